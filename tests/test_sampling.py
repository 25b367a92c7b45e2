"""Offline driver: learner parity of log-probs, determinism, prefixes, stops, bad input, and
no recompilation when only parameter values change."""

import functools

import jax
import numpy as np
import pytest
from flax import nnx

from tseeds_jax.model import ModelConfig, init_model
from tseeds_jax.sampling import core, generate

CFG = ModelConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)


@pytest.fixture(scope="module")
def model():
    m = init_model(CFG, seed=0)
    # Larger weights than the default init so that distributions are far from uniform.
    graphdef, params = nnx.split(m)
    params = jax.tree.map(lambda x: x * 8.0 if x.ndim > 1 else x, params)
    return nnx.merge(graphdef, params)


def _prompts(n, seed=0, lo=1, hi=20):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, CFG.vocab_size, size=int(rng.integers(lo, hi))).tolist()
            for _ in range(n)]


@functools.partial(jax.jit, static_argnums=0)
def _forward(graphdef, params, tokens_BT):
    return nnx.merge(graphdef, params)(tokens_BT)


def _learner_logits(model, seq):
    """Full-sequence forward logits [len(seq), V] as float64 (right-padded to 64: causal)."""
    padded = np.zeros((1, 64), np.int32)
    padded[0, :len(seq)] = seq
    graphdef, params = nnx.split(model)
    return np.asarray(_forward(graphdef, params, padded)[0, :len(seq)], np.float64)


def _log_softmax(x):
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def _allowed(logits_V, temperature, top_k, top_p):
    """Tokens a top-k/top-p sampler may draw (float64 reference of the filters)."""
    order = np.argsort(-logits_V, kind="stable")
    k = top_k or logits_V.size
    order = order[:k]
    probs = np.exp(_log_softmax(logits_V[order] / temperature))
    before = np.cumsum(probs) - probs
    return set(order[before < top_p - 1e-6].tolist()) | {int(order[0])}


@pytest.mark.parametrize("knobs", [dict(temperature=1.0), dict(temperature=0.7, top_k=5),
                                   dict(temperature=1.3, top_k=20, top_p=0.8)])
def test_logprobs_match_learner_forward(model, knobs):
    prompts = _prompts(5)
    budgets = [9, 4, 12, 1, 7]
    results = generate(model, prompts, max_new_tokens=budgets, seed=3, num_slots=2, **knobs)
    for prompt, res, n in zip(prompts, results, budgets):
        assert res.finish_reason == "length" and len(res.tokens) == n
        logits = _learner_logits(model, prompt + res.tokens)
        logp = _log_softmax(logits)
        pos = np.arange(len(prompt) - 1, len(prompt) + n - 1)
        # The reported log-prob is of the tempered distribution over the whole vocabulary
        # (strategies.logprob_temperature), what the learner computes at the rollout temperature.
        tempered = _log_softmax(logits / knobs["temperature"])
        np.testing.assert_allclose(res.logprobs, tempered[pos, res.tokens], rtol=0, atol=1e-4)
        for p, tok in zip(pos, res.tokens):  # drawn from the truncated support only
            assert tok in _allowed(logp[p], knobs["temperature"], knobs.get("top_k", 0),
                                   knobs.get("top_p", 1.0))


def test_greedy_equals_argmax_of_full_forward(model):
    prompts = _prompts(3, seed=1)
    for prompt, res in zip(prompts, generate(model, prompts, max_new_tokens=8, temperature=0,
                                             num_slots=2)):
        logits = _learner_logits(model, prompt + res.tokens)
        assert res.tokens == np.argmax(logits[len(prompt) - 1:-1], axis=-1).tolist()
    # top_p tiny: only the most likely token survives, i.e. greedy.
    nucleus = generate(model, prompts, max_new_tokens=8, top_p=1e-6, top_k=20,
                       temperature=1.3, num_slots=2)
    greedy = generate(model, prompts, max_new_tokens=8, temperature=0, num_slots=2)
    assert [r.tokens for r in nucleus] == [r.tokens for r in greedy]


def test_same_seed_same_tokens_regardless_of_batch_and_slots(model):
    prompts = _prompts(6, seed=4)
    seeds = [11, 12, 13, 14, 15, 16]
    knobs = dict(temperature=0.7, top_k=5, max_new_tokens=10)
    full = generate(model, prompts, seed=seeds, num_slots=4, **knobs)
    again = generate(model, prompts, seed=seeds, num_slots=4, **knobs)
    assert [r.tokens for r in full] == [r.tokens for r in again]
    order = [4, 1, 5, 0]
    sub = generate(model, [prompts[i] for i in order], seed=[seeds[i] for i in order],
                   num_slots=2, **knobs)
    assert [r.tokens for r in sub] == [full[i].tokens for i in order]
    # int seed: request i uses fold_in(PRNGKey(seed), i), independent of the slot count
    a = generate(model, prompts, max_new_tokens=10, seed=7, num_slots=2)
    b = generate(model, prompts, max_new_tokens=10, seed=7, num_slots=4)
    c = generate(model, prompts, max_new_tokens=10, seed=8, num_slots=4)
    assert [r.tokens for r in a] == [r.tokens for r in b]
    assert [r.tokens for r in a] != [r.tokens for r in c]


def test_prefix_continuation_equals_single_prompt(model):
    prompts = _prompts(3, seed=5)
    prefixes = [p[:3] for p in _prompts(3, seed=6, lo=4)]
    joined = [p + q for p, q in zip(prompts, prefixes)]
    a = generate(model, prompts, prefixes=prefixes, max_new_tokens=7, seed=[1, 2, 3], num_slots=2)
    b = generate(model, joined, max_new_tokens=7, seed=[1, 2, 3], num_slots=2)
    assert [r.tokens for r in a] == [r.tokens for r in b]
    assert [r.logprobs for r in a] == [r.logprobs for r in b]


def test_stop_tokens_end_a_request(model):
    prompts = _prompts(4, seed=7)
    free = generate(model, prompts, max_new_tokens=12, temperature=0, num_slots=2)
    stop = free[0].tokens[4]
    stopped = generate(model, prompts, max_new_tokens=12, temperature=0, stop_tokens=[stop],
                       num_slots=2)
    for f, s in zip(free, stopped):
        if stop in f.tokens:
            cut = f.tokens.index(stop) + 1
            assert s.tokens == f.tokens[:cut] and s.finish_reason == "stop"
        else:
            assert s.tokens == f.tokens and s.finish_reason == "length"


def test_last_emission_runs_no_model_call(model, monkeypatch):
    # n tokens per request: the prefill samples the first, n - 1 decode steps feed tokens and
    # sample the rest, and the n-th emission needs no model call (also when a stop token ends
    # the request). The decode steps run are counted by run_chunk's fourth output.
    steps = []
    real = core.run_chunk

    def spy(*args, **kwargs):
        out = real(*args, **kwargs)
        steps.append(int(out[3]))
        return out

    monkeypatch.setattr(core, "run_chunk", spy)
    prompts = _prompts(3, seed=11)
    for n in (1, 2, 6):
        steps.clear()
        res = generate(model, prompts, max_new_tokens=n, temperature=0)
        assert [len(r.tokens) for r in res] == [n] * 3 and steps == [n - 1]
    free = generate(model, prompts[:1], max_new_tokens=8, temperature=0)[0].tokens
    stop = free[3]
    steps.clear()
    res = generate(model, prompts[:1], max_new_tokens=8, temperature=0, stop_tokens=[stop])[0]
    cut = free.index(stop) + 1
    assert res.tokens == free[:cut] and res.finish_reason == "stop" and steps == [cut - 1]


def test_continuous_batching_refills_slots(model):
    # 7 requests through 2 slots with different lengths: every result equals its solo run.
    prompts = _prompts(7, seed=8)
    lens = [3, 9, 1, 5, 2, 8, 4]
    batched = generate(model, prompts, max_new_tokens=lens, seed=[0, 1, 2, 3, 4, 5, 6],
                       num_slots=2)
    for i, (p, n) in enumerate(zip(prompts, lens)):
        solo = generate(model, [p], max_new_tokens=n, seed=[i], num_slots=2)[0]
        assert batched[i].tokens == solo.tokens and len(solo.tokens) == n


def test_bad_requests_fail_alone(model):
    good = _prompts(2, seed=9)
    prompts = [good[0], [], list(range(200)), [5, CFG.vocab_size], [-1, 3], good[1], [1, 2]]
    budgets = [5, 5, 5, 5, 5, 5, 0]
    res = generate(model, prompts, max_new_tokens=budgets, temperature=0, max_prefill_length=64,
                   num_slots=2)
    reasons = [r.finish_reason for r in res]
    assert reasons == ["length", "error", "error", "error", "error", "length", "error"]
    assert "empty" in res[1].error
    assert "max_prefill_length=64" in res[2].error
    assert "outside the vocabulary" in res[3].error and str(CFG.vocab_size) in res[3].error
    assert "-1" in res[4].error
    assert "max_new_tokens=0" in res[6].error
    ref = generate(model, good, max_new_tokens=5, temperature=0, num_slots=2)
    assert res[0].tokens == ref[0].tokens and res[5].tokens == ref[1].tokens


def test_invalid_arguments_raise(model):
    with pytest.raises(ValueError, match="temperature"):
        generate(model, [[1]], max_new_tokens=2, temperature=-1.0)
    with pytest.raises(ValueError, match="top_p"):
        generate(model, [[1]], max_new_tokens=2, top_p=0.0)
    with pytest.raises(ValueError, match="max_new_tokens"):
        generate(model, [[1], [2]], max_new_tokens=[1])
    with pytest.raises(TypeError, match="model"):
        generate("not a model", [[1]], max_new_tokens=2)


def test_new_params_values_do_not_recompile(model):
    graphdef, params = nnx.split(model)
    prompts = _prompts(3, seed=10, lo=5, hi=8)
    first = generate((graphdef, params), prompts, max_new_tokens=6, temperature=0, num_slots=2)
    before = dict(core.TRACE_COUNTS)
    params2 = jax.tree.map(lambda x: x * 0.9, params)  # "an optimizer step": same shapes/dtypes
    second = generate((graphdef, params2), prompts, max_new_tokens=6, temperature=0, num_slots=2)
    # a fresh split of a fresh model of the same config also hits the cache
    g3, p3 = nnx.split(nnx.merge(graphdef, params2))
    third = generate((g3, p3), prompts, max_new_tokens=6, temperature=0, num_slots=2)
    assert core.TRACE_COUNTS == before
    assert [r.tokens for r in second] == [r.tokens for r in third]
    assert [r.tokens for r in first] != [r.tokens for r in second]


def test_module_input_follows_in_place_weight_updates(model):
    # generate(module) reuses the module's split graph across calls: updating a weight in place
    # must still reach the sampler, exactly as a fresh nnx.split of the updated module does.
    from tseeds_jax.sampling import driver

    m = nnx.merge(*nnx.split(model))  # a private copy
    prompts = _prompts(3, seed=12)
    before = generate(m, prompts, max_new_tokens=6, temperature=0)
    mdef, params = driver.split_model(m)
    ref_leaves = jax.tree.leaves(nnx.split(m)[1])
    assert all(a is b for a, b in zip(jax.tree.leaves(params), ref_leaves))
    m.embed.value = m.embed.value[::-1]  # a different embedding table, same shape
    after = generate(m, prompts, max_new_tokens=6, temperature=0)
    fresh = generate(nnx.split(m), prompts, max_new_tokens=6, temperature=0)
    assert [r.tokens for r in after] == [r.tokens for r in fresh]
    assert [r.tokens for r in after] != [r.tokens for r in before]


def test_bfloat16_params(model):
    prompts = _prompts(2, seed=11)
    res = generate(model, prompts, max_new_tokens=4, temperature=0, param_dtype="bfloat16",
                   num_slots=2)
    assert all(r.finish_reason == "length" and len(r.tokens) == 4 for r in res)
