"""Relay inference with the same checkpoint on both sides is single-model inference.

Without stop tokens every response has exactly `max_new_tokens` tokens, so the cut point is fixed
and relay(pi, pi) has exactly the distribution of pi's own responses: with greedy decoding the two
are identical token for token; with sampling the two estimates differ by sampling noise only. The
score depends on the whole response (prefix and continuation). Sizes are small so that the file
runs in seconds (the sampler compiles once per shape).
"""

import math

import numpy as np
import pytest

from tseeds_jax.eval.evaluate import Problem, evaluate
from tseeds_jax.eval.relay import cut_point, relay_evaluate
from tseeds_jax.model import ModelConfig, init_model

V, LEN, TOKEN = 12, 8, 5


def _model():
    cfg = ModelConfig.from_hf_dict(dict(
        model_type="qwen2", vocab_size=V, hidden_size=32, intermediate_size=64,
        num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2,
        tie_word_embeddings=True, max_position_embeddings=64))
    return init_model(cfg, seed=3)


def _problems(count):
    rng = np.random.default_rng(1)
    return [Problem(tuple(int(x) for x in rng.integers(4, V, 3)), None) for _ in range(count)]


def _decode(ids):
    return " ".join(str(i) for i in ids)


def _score(texts, refs):
    return [float(str(TOKEN) in t.split()) for t in texts]


KW = dict(decode=_decode, score_fn=_score, max_new_tokens=LEN, temperature=1.0)


def test_greedy_relay_with_same_checkpoint_is_single_model_exactly():
    model, probs = _model(), _problems(24)
    kw = dict(KW, temperature=0.0)
    single = evaluate(model, probs, n=1, seed=0, **kw)
    relay = relay_evaluate(model, model, probs, n=1, ratio=0.5, seed=1, **kw)
    assert 0 < int(np.sum(single.correct)) < len(probs)  # the score is informative here
    np.testing.assert_array_equal(relay.correct, single.correct)
    assert relay.extra["mean_prefix_length"] == LEN // 2
    assert relay.mean_length == LEN


def test_sampled_relay_with_same_checkpoint_matches_single_model_in_law():
    model, probs, n = _model(), _problems(32), 8
    single = evaluate(model, probs, n=n, seed=0, **KW)
    relay = relay_evaluate(model, model, probs, n=n, ratio=0.5, seed=1, **KW)
    m = len(probs) * n
    p = (single.avg + relay.avg) / 2
    assert 0.1 < p < 0.9  # the score is informative for this model
    se = math.sqrt(2 * p * (1 - p) / m)
    assert abs(single.avg - relay.avg) < 4 * se
    assert relay.extra["mean_prefix_length"] == LEN // 2
    assert relay.mean_length == LEN


def test_cut_point_never_keeps_the_final_token():
    assert cut_point(10, 0.5) == 5
    assert cut_point(1, 0.5) == 0
    assert cut_point(4, 1.0) == 3
    with pytest.raises(ValueError, match="ratio"):
        cut_point(4, 1.5)


def test_bad_inputs_are_rejected():
    model, probs = _model(), _problems(2)
    with pytest.raises(ValueError, match="k=8 exceeds"):
        evaluate(model, probs, n=4, ks=[1, 8], **KW)
    with pytest.raises(ValueError, match="no problems"):
        evaluate(model, [], n=4, **KW)
    with pytest.raises(ValueError, match="n=0"):
        relay_evaluate(model, model, probs, n=0, **KW)
