"""GRPO advantages, DAPO dynamic sampling's group filter, DAPO overlong penalty."""

import types

import numpy as np
import pytest

from tseeds_jax.rl.learn import advantages as adv
from tseeds_jax.rl.rollout import stats


def ref_grpo(scores, gids, norm_by_std=True, eps=1e-6):
    """Loop reference of verl compute_grpo_outcome_advantage (unbiased std; singleton μ=0, σ=1)."""
    out = np.zeros(len(scores))
    for g in set(gids.tolist()):
        idx = [i for i in range(len(scores)) if gids[i] == g]
        vals = [scores[i] for i in idx]
        if len(idx) == 1:
            mu, sd = 0.0, 1.0
        else:
            mu = sum(vals) / len(vals)
            sd = (sum((v - mu) ** 2 for v in vals) / (len(vals) - 1)) ** 0.5
        for i in idx:
            out[i] = (scores[i] - mu) / (sd + eps) if norm_by_std else scores[i] - mu
    return out


@pytest.mark.parametrize("norm_by_std", [True, False])
def test_grpo_matches_reference_with_shuffled_ids(norm_by_std):
    rng = np.random.default_rng(0)
    gids = np.array([7, 3, 7, 7, 3, 11, 5, 5, 5, 5, 3, -2])  # 11 and -2 are singletons
    scores = rng.normal(size=len(gids))
    scores[6:10] = 1.0  # an all-equal group -> 0
    got = adv.grpo_advantages(scores, gids, norm_by_std=norm_by_std)
    np.testing.assert_allclose(got, ref_grpo(scores, gids, norm_by_std), rtol=1e-12, atol=1e-15)
    assert np.all(got[6:10] == 0.0)


def test_grpo_contiguous_groups_equal_explicit_ids():
    rng = np.random.default_rng(1)
    scores = rng.integers(0, 2, size=24).astype(float)
    a = adv.grpo_advantages(scores, group_size=8)
    b = adv.grpo_advantages(scores, np.repeat(np.arange(3), 8))
    np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(a, ref_grpo(scores, np.repeat(np.arange(3), 8)), rtol=1e-12)
    np.testing.assert_array_equal(adv.token_advantages(a[:2], np.array([[1, 1, 0], [1, 0, 0]])),
                                  [[a[0], a[0], 0.0], [a[1], 0.0, 0.0]])


def test_grpo_validation():
    with pytest.raises(ValueError, match="exactly one of group_ids_B and group_size"):
        adv.grpo_advantages([1.0, 2.0])
    with pytest.raises(ValueError, match="not a multiple of group_size=3"):
        adv.grpo_advantages([1.0, 2.0], group_size=3)
    with pytest.raises(TypeError, match="group_ids_B must be integers"):
        adv.grpo_advantages([1.0, 2.0], np.array([0.5, 1.5]))
    with pytest.raises(ValueError, match="scores_B must be finite"):
        adv.grpo_advantages([1.0, np.nan], group_size=2)


def test_dynamic_sampling_keeps_groups_with_unequal_rewards():
    # rollout/stats.py: the one group filter (DAPO filter_groups)
    metric = np.array([1, 1, 1, 0, 1, 0.1, 0.1, 0.1, 5.0, 2, 2], float)
    gids = np.array([0, 0, 0, 1, 1, 2, 2, 2, 3, 4, 4])
    want = np.array([0, 0, 0, 1, 1, 0, 0, 0, 1, 0, 0], bool)  # 3 is a singleton: kept
    np.testing.assert_array_equal(stats.varied_mask(metric, gids), want)
    np.testing.assert_array_equal(stats.varied_mask([0, 0, 1, 0, 1, 1], np.arange(6) // 2),
                                  [0, 0, 1, 1, 0, 0])
    samples = [types.SimpleNamespace(reward=r) for r in [0, 0, 1, 0, 1, 1]]
    assert stats.keep_varied_groups(samples, 2) == samples[2:4]


def test_overlong_penalty_formula():
    L, buf, f = 100, 20, 0.5
    lengths = np.array([0, 50, 80, 81, 90, 100])
    got = adv.overlong_penalty(lengths, max_resp_len=L, buffer_len=buf, penalty_factor=f)
    want = [min(-(n - (L - buf)) / buf * f, 0.0) for n in lengths]
    np.testing.assert_allclose(got, want, rtol=1e-12)
    np.testing.assert_allclose(got[[2, 4, 5]], [0.0, -0.25, -0.5])  # linear to -factor at L
    with pytest.raises(ValueError, match="buffer_len must be > 0"):
        adv.overlong_penalty(lengths, max_resp_len=L, buffer_len=0)
