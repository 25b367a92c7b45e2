"""Ratios from the distribution that sampled: at a rollout temperature T != 1 the sampler draws
from softmax(logits / T), and the sampler's reported log-probs, the learner's log-probs and the
behavior log-probs of seed tokens (the learner's statistics pass at a refresh) are all of that
distribution; training refuses top-k / top-p truncation."""

import jax
import numpy as np
import pytest
import scipy.stats
from flax import nnx

from tests.test_learner import LCFG, OCFG
from tests.trainer_utils import tiny_cd, tiny_trainer
from tseeds_jax.model import ModelConfig, init_model
from tseeds_jax.rl.config import TrainConfig
from tseeds_jax.rl.config.errors import ConfigValueError
from tseeds_jax.rl.learn.learner import Learner
from tseeds_jax.sampling import generate

T = 0.7
VOCAB = 13
PROMPT = [5, 9, 4, 7]
DRAWS = 4000


def _sharp_model():
    """A random model whose logits spread over several units (final norm scaled up), so that the
    distributions at temperature 1 and 0.7 differ enough for a test of 4000 draws to tell apart."""
    cfg = ModelConfig(model_type="qwen2", vocab_size=VOCAB, hidden_size=16, intermediate_size=32,
                      num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1)
    graphdef, params = nnx.split(init_model(cfg, seed=3))

    def scale(path, x):
        names = {str(getattr(p, "key", getattr(p, "name", p))) for p in path}
        return x * 40.0 if "final_norm" in names else x

    return graphdef, jax.tree_util.tree_map_with_path(scale, params)


def _learner(graphdef, params, temperature):
    return Learner(graphdef, params, LCFG, OCFG, variant="state+action", old_logp_mode="auto",
                   temperature=temperature)


def _next_token_logp(learner, params):
    """The learner's log-prob of every vocabulary entry as the token after PROMPT [V]."""
    tokens = np.array([PROMPT + [v] for v in range(VOCAB)], np.int32)
    logp, _ = learner.stats(params, tokens, np.ones_like(tokens), 1)
    return logp[:, 0]


def _chi_square_p(counts, probs):
    """Pearson chi-square p-value of `counts` against `probs`, bins of expected count < 5 merged
    into one (the test's usual validity condition)."""
    expected = probs * counts.sum()
    small = expected < 5
    obs = np.append(counts[~small], counts[small].sum())
    exp = np.append(expected[~small], expected[small].sum())
    if exp[-1] == 0:
        obs, exp = obs[:-1], exp[:-1]
    return scipy.stats.chisquare(obs, exp * obs.sum() / exp.sum()).pvalue


def test_tokens_drawn_at_temperature_follow_the_learners_logprobs():
    graphdef, params = _sharp_model()
    res = generate((graphdef, params), [PROMPT] * DRAWS, max_new_tokens=1, temperature=T,
                   seed=list(range(DRAWS)))
    drawn = np.array([r.tokens[0] for r in res])
    counts = np.bincount(drawn, minlength=VOCAB)
    tempered = np.exp(_next_token_logp(_learner(graphdef, params, T), params).astype(np.float64))
    plain = np.exp(_next_token_logp(_learner(graphdef, params, 1.0), params).astype(np.float64))
    np.testing.assert_allclose(tempered.sum(), 1.0, atol=1e-5)
    # An independent reference: numpy softmax(logits / T) from the model's own logits.
    logits = np.asarray(nnx.merge(graphdef, params)(np.array([PROMPT], np.int32)))[0, -1]
    ref = np.exp(logits / T - logits.max() / T)
    np.testing.assert_allclose(tempered, ref / ref.sum(), rtol=1e-4, atol=1e-7)
    assert np.abs(tempered - plain).max() > 0.05  # the two distributions really differ
    assert _chi_square_p(counts, tempered) > 1e-3
    # The temperature-1 log-probs the learner used before are rejected by the same test.
    assert _chi_square_p(counts, plain) < 1e-6
    # The sampler reports the same log-probs as the learner for the tokens it drew.
    reported = np.array([r.logprobs[0] for r in res])
    np.testing.assert_allclose(reported, np.log(tempered[drawn]), atol=2e-5)


def test_sampler_and_learner_logprobs_agree_on_whole_responses_at_temperature():
    """A fresh on-policy step's ratio pi_theta / pi_sampler is 1 token by token; with the
    temperature-1 learner of before it is not."""
    graphdef, params = _sharp_model()
    prompts = [PROMPT, [3, 8], [11, 2, 6]]
    res = generate((graphdef, params), prompts, max_new_tokens=6, temperature=T, seed=7)
    width = max(len(p) for p in prompts)
    for prompt, r in zip(prompts, res, strict=True):
        pad = width - len(prompt)
        tokens = np.array([[0] * pad + prompt + list(r.tokens)], np.int32)
        attn = np.array([[0] * pad + [1] * (len(prompt) + len(r.tokens))], np.int32)
        n = len(r.tokens)
        at_t = _learner(graphdef, params, T).stats(params, tokens, attn, n)[0][0]
        at_1 = _learner(graphdef, params, 1.0).stats(params, tokens, attn, n)[0][0]
        np.testing.assert_allclose(np.exp(at_t - np.array(r.logprobs)), 1.0, atol=1e-4)
        assert np.abs(at_1 - np.array(r.logprobs)).max() > 0.05


@pytest.mark.parametrize("field,value", [("top_p", 0.95), ("top_k", 20)])
def test_training_refuses_truncated_sampling_naming_the_field(tmp_path, field, value):
    with pytest.raises(ConfigValueError, match=rf"config\.rollout\.{field}={value}: training "):
        TrainConfig.from_config(tiny_cd(tmp_path, **{f"rollout.{field}": value}))
    TrainConfig.from_config(tiny_cd(tmp_path, **{"rollout.temperature": T}))  # accepted


def test_tempered_run_unchanged_policy_has_unit_seed_ratios(tmp_path):
    """lr 1e-12 leaves the float32 parameters unchanged: a seed token's ratio pi_theta / pi_b
    (pi_b from the refresh's statistics pass) is then 1, and so is every step's sampler-vs-learner
    ratio, when all of them use the rollout's temperature."""
    tr = tiny_trainer(tmp_path, **{"rollout.temperature": T, "optim.lr": 1e-12,
                                   "seeds.refresh_interval": 3, "steps": 3})
    assert tr.learner.temperature == T
    hist = tr.run(steps=3)
    assert sum(m["seed_length"] for m in hist[1:]) > 0, "some seeds are non-empty"
    for m in hist:
        assert 0.0 <= float(m["sampler_learner_gap"]) < 1e-4, m["sampler_learner_gap"]
    for m in hist[1:]:
        if m["seed_length"] > 0:
            assert abs(float(m["ratio_max/seed"]) - 1.0) < 1e-4
            assert abs(float(m["ratio_min/seed"]) - 1.0) < 1e-4


def test_tempered_config_trains_three_steps(tmp_path):
    tr = tiny_trainer(tmp_path, **{"rollout.temperature": T, "seeds.refresh_interval": 2,
                                   "steps": 3})
    hist = tr.run(steps=3)
    assert len(hist) == 3
    for m in hist:
        assert np.isfinite(float(m["loss"])) and np.isfinite(float(m["grad_norm"]))
        # The sampler ran with the parameters the first update starts from.
        assert 0.0 <= float(m["sampler_learner_gap"]) < 1e-4
