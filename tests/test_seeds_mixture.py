"""The mixture selectors ("mixture", "mixture_spread"): every sample's seed is its own draw,
the group's expected predicted success is the target, groups with one outcome only; the value
model on binarised rewards; calibration metrics on informative predictions only
(docs/adaptive_seeds.md)."""

import numpy as np
import pytest

from tests.test_seeds_selection import _rollouts as constructed_rollouts
from tests.trainer_utils import tiny_cd
from tseeds_jax.rl.config import TrainConfig
from tseeds_jax.seeds import feedback, make_selected_seed_batch, sample_rngs, selection, truncation

NAMES = ["mixture", "mixture_spread"]


def _rollouts(rewards, lengths, group_size, seed=0):
    return constructed_rollouts(rewards, lengths, seed=seed, group_size=group_size)


def _stats(p, gamma=1.0):
    return selection.PromptStats(p_B=np.atleast_1d(np.asarray(p, np.float64)), gamma=gamma)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("g", [4, 8, 16])
def test_one_success_in_a_group_gives_every_sample_its_own_seed(name, g):
    """The issue's independence test: with one success out of G, no two samples share a
    (source, cut), for many run seeds and steps, estimates and value-model shapes."""
    sel = selection.get(name, ratio=0.5)
    rng = np.random.default_rng(0)
    for trial in range(40):
        rewards = np.zeros(g)
        rewards[rng.integers(g)] = 1.0
        lengths = rng.integers(12, 60, g).tolist()
        ro = _rollouts(rewards, lengths, g, seed=trial)
        p = float(rng.choice([1 / g, 0.05, 0.3, 0.7]))
        out = sel.select(ro, _stats(p, gamma=float(rng.choice([0.5, 1.0, 2.0]))),
                         sample_rngs(trial, 3, g))
        pairs = list(zip(out.source_N.tolist(), out.cut_N.tolist(), strict=True))
        assert len(set(pairs)) == g, (trial, pairs)
        assert not out.fallback_N.any()
        assert all(1 <= c <= lengths[j] - 1 for j, c in pairs)


@pytest.mark.parametrize("name", NAMES)
def test_seeds_repeat_only_when_the_group_has_fewer_candidates_than_samples(name):
    sel = selection.get(name)
    # 4 samples, candidates: source 0 cut 1, source 1 cut 1 -> only 2 distinct (source, cut)
    ro = _rollouts([1, 0, 0, 0], [2, 2, 1, 1], 4)
    out = sel.select(ro, _stats(0.25), sample_rngs(0, 1, 4))
    pairs = list(zip(out.source_N.tolist(), out.cut_N.tolist(), strict=True))
    assert set(pairs) == {(0, 1), (1, 1), (2, 0), (3, 0)} and len(set(pairs)) == 4
    ro = _rollouts([1, 0, 0, 0, 0, 0], [2, 2, 1, 1, 1, 1], 6)
    out = sel.select(ro, _stats(1 / 6), sample_rngs(0, 1, 6))
    pairs = list(zip(out.source_N.tolist(), out.cut_N.tolist(), strict=True))
    assert len(set(pairs)) == 6  # exactly 6 candidates for 6 samples


def _formula(p, r, u, gamma):
    return p + (float(r >= 1.0) - p) * u ** gamma


@pytest.mark.parametrize("p,gamma", [(0.125, 1.0), (0.25, 2.0), (0.75, 1.0), (0.9, 0.5), (0.5, 1.0)])
def test_each_sample_draws_a_mixture_whose_expected_prediction_is_the_target(p, gamma):
    """Long rollouts (cut rounding negligible), two success sources and two failure sources per
    group of 4: the kind of source is Bernoulli(w(a)) with a = u^gamma uniform on the lower half
    of [a_min, 1]; reference from the rule's statement, float64."""
    target, g, groups = 0.5, 4, 1000
    sel = selection.get("mixture", target=target)
    rewards = np.tile([1.0, 0.0, 1.0, 0.0], groups)
    ro = _rollouts(rewards, [4000] * (g * groups), g)
    out = sel.select(ro, _stats(np.full(groups, p), gamma), sample_rngs(5, 2, g * groups))
    r_src = rewards[out.source_N]
    u = out.cut_N / 4000.0
    want = np.array([_formula(p, r, x, gamma) for r, x in zip(r_src, u, strict=True)])
    np.testing.assert_allclose(out.predicted_N, want, rtol=1e-12)
    a_min = (target - p) / (1 - p) if p < target else (p - target) / p if p > target else 0.0
    lo, hi = a_min, (1 + a_min) / 2
    a = u ** gamma
    assert np.all(a >= lo - 1e-3) and np.all(a <= hi + 1e-3)
    # E[w] over a ~ U[lo, hi]: p + (target - p) ln(hi / lo) / (hi - lo) (w = target at p = target)
    ew = p + (target - p) * np.log(hi / lo) / (hi - lo) if p != target else target
    share = float(np.mean(r_src >= 1))
    se = np.sqrt(ew * (1 - ew) / len(r_src))
    assert abs(share - ew) < 4 * se + 1e-3, (share, ew)
    assert 0 < share < 1
    assert abs(out.predicted_N.mean() - target) < 0.02


def test_mixture_leaves_one_outcome_groups_to_the_fixed_rule():
    ro = _rollouts([0] * 4 + [1] * 4, [30, 17, 25, 9, 40, 22, 13, 31], 4)
    out = selection.get("mixture", ratio=0.5).select(ro, _stats([0.0, 1.0]), sample_rngs(3, 4, 8))
    want = truncation.seed_lengths(truncation.get("ratio", ratio=0.5), ro.lengths_N, ro.entropy_NR,
                                   sample_rngs(3, 4, 8))
    assert out.fallback_N.all() and out.source_N.tolist() == list(range(8))
    assert out.cut_N.tolist() == want.tolist()
    np.testing.assert_array_equal(out.predicted_N, [0.0] * 4 + [1.0] * 4)
    assert not selection.informative(out.predicted_N).any()


def test_spread_cuts_one_outcome_groups_in_stratified_positions():
    g, spread = 8, 0.5
    lengths = [40, 33, 57, 21, 48, 60, 29, 35]
    ro = _rollouts([0] * g, lengths, g)
    out = selection.get("mixture_spread", ratio=spread).select(ro, _stats(0.0),
                                                               sample_rngs(1, 9, g))
    assert out.fallback_N.all() and out.source_N.tolist() == list(range(g))
    for k, (c, n) in enumerate(zip(out.cut_N.tolist(), lengths, strict=True)):
        # sample k cuts its own rollout at a fraction in [k, k + 1) * spread / G
        assert np.floor(n * spread * k / g) <= c <= np.floor(n * spread * (k + 1) / g), (k, c, n)
    assert len(set((out.cut_N / np.array(lengths)).round(6).tolist())) == g


@pytest.mark.parametrize("name", NAMES)
def test_choices_are_per_sample_and_batch_independent(name):
    sel = selection.get(name)
    rewards = [1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]
    ro = _rollouts(rewards, [20 + i for i in range(16)], 8)
    st = _stats([0.125, 0.0])
    a = sel.select(ro, st, sample_rngs(11, 5, 16))
    b = sel.select(ro, st, sample_rngs(11, 5, 16))
    np.testing.assert_array_equal(a.cut_N, b.cut_N)
    ro1 = selection.BehaviorRollouts(tokens=ro.tokens[:8], logp_NR=ro.logp_NR[:8],
                                     entropy_NR=ro.entropy_NR[:8], rewards_N=ro.rewards_N[:8],
                                     group_size=8)
    c = sel.select(ro1, _stats([0.125]), sample_rngs(11, 5, 16)[:8])
    np.testing.assert_array_equal(c.source_N, a.source_N[:8])
    np.testing.assert_array_equal(c.cut_N, a.cut_N[:8])
    d = sel.select(ro, st, sample_rngs(12, 5, 16))
    assert not np.array_equal(d.cut_N[:8], a.cut_N[:8])


def test_value_uses_the_binarised_outcome():
    p, u, gamma = 0.3, np.array([0.0, 0.25, 0.6, 1.0]), 1.5
    for r in (0.0, 0.4, 0.99):
        np.testing.assert_allclose(selection.value(p, r, u, gamma), p - p * u ** gamma, rtol=1e-12)
    for r in (1.0, 1.5):
        np.testing.assert_allclose(selection.value(p, r, u, gamma), p + (1 - p) * u ** gamma,
                                   rtol=1e-12)


def test_calibration_metrics_count_informative_predictions_only():
    """A batch of 2 groups of 4: one mixed group (informative predictions), one all-fail group
    (predictions of exactly 0)."""
    g = 4
    ro = _rollouts([1, 0, 0, 0, 0, 0, 0, 0], [30, 20, 25, 35, 30, 30, 30, 30], g)
    sel = selection.get("mixture")
    chosen = sel.select(ro, _stats([0.25, 0.0]), sample_rngs(0, 1, 2 * g))
    sb = make_selected_seed_batch([[1], [2]], ["a", "b"], ro, chosen, p_B=np.array([0.25, 0.0]),
                                  gamma=1.0)
    realised = np.array([1, 0, 1, 1, 0, 0, 0, 1.0])
    from tseeds_jax.seeds import SuccessTracker

    out = feedback.after_scoring(SuccessTracker(), sb, [[1], [2]], realised, g, 0.5)
    pred = chosen.predicted_N
    keep = (pred > 0) & (pred < 1)
    assert keep[:g].all() and not keep[g:].any()
    assert sum(out["calib/n"]) == g
    np.testing.assert_allclose(sum(out["calib/pred"]), pred[:g].sum(), rtol=1e-12)
    assert sum(out["calib/real"]) == realised[:g].sum()
    np.testing.assert_allclose(out["seeds/predicted_success"], pred[:g].mean(), rtol=1e-12)
    assert out["seeds/realised_success"] == realised[:g].mean()
    assert out["seeds/informative_frac"] == 0.5


@pytest.mark.parametrize("name", NAMES)
def test_config_accepts_the_new_selectors_and_they_keep_a_tracker(tmp_path, name):
    cfg = TrainConfig.from_config(tiny_cd(tmp_path, **{"seeds.truncation": name,
                                                       "seeds.refresh_interval": 4}))
    sel = feedback.make_selector(cfg.seeds)
    assert sel.name == name and sel.adaptive
    assert feedback.new_tracker(sel, cfg.seeds) is not None
    with pytest.raises(ValueError, match=r"target=1\.0"):
        selection.get(name, target=1.0)
