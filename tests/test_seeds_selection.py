"""Seed selectors on constructed rollouts: the success_target rule, its fallback, determinism, the
fixed rules unchanged, and the selector state's checkpoint (docs/adaptive_seeds.md)."""

import numpy as np
import pytest

from tests.trainer_utils import tiny_cd
from tseeds_jax.rl.config import ConfigValueError, TrainConfig
from tseeds_jax.seeds import (
    SeedCache,
    SuccessTracker,
    make_seed_batch,
    make_selected_seed_batch,
    sample_rngs,
    selection,
    truncation,
)
from tseeds_jax.seeds.tracker import GAMMA_GRID, calibration_bins

G = 4


def _rollouts(rewards, lengths, seed=0, group_size=G):
    """Constructed behavior rollouts: random tokens, log-probs and entropies of given lengths."""
    rng = np.random.default_rng(seed)
    r = max(lengths) + 3
    tokens = [rng.integers(3, 50, n).tolist() for n in lengths]
    return selection.BehaviorRollouts(tokens=tokens, logp_NR=-rng.random((len(lengths), r)),
                                      entropy_NR=rng.random((len(lengths), r)),
                                      rewards_N=np.asarray(rewards, np.float64),
                                      group_size=group_size)


def _half_up(x):
    return int(np.floor(x + 0.5))


def _target_cut(p, r, length, target=0.5, gamma=1.0):
    """Reference from the rule's statement: V(u) = p + (r - p) u^gamma = target, u = c / |o|."""
    u = ((target - p) / (r - p)) ** (1.0 / gamma)
    return min(_half_up(length * u), length - 1)


ADAPTIVE = selection.get("success_target", ratio=0.5)


def test_failing_prompt_takes_seeds_from_its_successful_rollout_cut_later_as_p_falls():
    ro = _rollouts([0, 1, 0, 0], [30, 40, 25, 35])
    cuts = []
    for p in (0.4, 0.25, 0.1, 0.0):
        sel = ADAPTIVE.select(ro, selection.PromptStats(p_B=np.array([p]), gamma=1.0),
                              sample_rngs(7, 3, G))
        assert sel.source_N.tolist() == [1] * G and not sel.fallback_N.any()
        assert sel.cut_N.tolist() == [_target_cut(p, 1.0, 40)] * G
        cuts.append(int(sel.cut_N[0]))
    assert cuts == sorted(cuts) and cuts[0] < cuts[-1]
    # gamma > 1 (early tokens reveal little) cuts later still
    sel = ADAPTIVE.select(ro, selection.PromptStats(p_B=np.array([0.0]), gamma=2.0),
                          sample_rngs(7, 3, G))
    assert sel.cut_N[0] == _target_cut(0.0, 1.0, 40, gamma=2.0) > cuts[-1]


def test_tracker_estimate_falls_with_failures_and_the_cut_moves_later():
    """A prompt the policy keeps failing on-policy: its estimate falls, its seeds (from the one
    successful behavior rollout of each refresh) are cut later each time."""
    prompt, rewards = [5, 6, 7], np.array([0, 0, 1, 0], np.float64)
    ro = _rollouts(rewards, [20, 20, 48, 20])
    tracker, cuts, ps = SuccessTracker(gamma0=1.0, ema=0.5, calibrate=False), [], []
    for step in range(3):
        p_B = tracker.at_refresh([prompt], rewards, G)
        sel = ADAPTIVE.select(ro, selection.PromptStats(p_B=p_B, gamma=tracker.gamma),
                              sample_rngs(0, step, G))
        assert set(sel.source_N.tolist()) == {2}
        cuts.append(int(sel.cut_N[0]))
        ps.append(float(p_B[0]))
        tracker.observe_onpolicy([prompt], np.zeros(G), G)  # every on-policy sample fails
    # p: 1/4 at the first refresh; then 0.5 * 1/8 + 0.5 * 1/4 = 3/16 (after the failed group
    # moved it to 1/8); then (3/32 + 1/4) / 2 = 11/64
    np.testing.assert_allclose(ps, [0.25, 3 / 16, 11 / 64], rtol=1e-12)
    assert cuts == [_target_cut(p, 1.0, 48) for p in ps] and cuts[0] < cuts[2]


def test_solved_prompt_takes_seeds_from_failed_rollouts():
    ro = _rollouts([1, 1, 0, 1, 0, 1, 1, 0], [30, 30, 44, 30, 18, 30, 30, 26])
    p_B = np.array([0.9, 0.7])
    sel = ADAPTIVE.select(ro, selection.PromptStats(p_B=p_B, gamma=1.0), sample_rngs(1, 2, 2 * G))
    assert sel.source_N[:G].tolist() == [2] * G
    assert set(sel.source_N[G:].tolist()) <= {4, 7} and len(set(sel.source_N[G:].tolist())) == 2
    for i in range(2 * G):
        j = sel.source_N[i]
        assert ro.rewards_N[j] == 0
        assert sel.cut_N[i] == _target_cut(p_B[i // G], 0.0, len(ro.tokens[j]))
        u = sel.cut_N[i] / len(ro.tokens[j])
        np.testing.assert_allclose(sel.predicted_N[i], p_B[i // G] * (1 - u), rtol=1e-12)


@pytest.mark.parametrize("rule_name", ["ratio", "entropy"])
def test_no_rollout_of_the_needed_kind_falls_back_to_the_fixed_rule(rule_name):
    lengths = [30, 17, 25, 9]
    rule = truncation.get(rule_name, ratio=0.5, top_k=3)
    sel_fn = selection.get("success_target", ratio=0.5, top_k=3, fallback=rule_name)
    for rewards, p in (([0, 0, 0, 0], 0.1), ([1, 1, 1, 1], 0.8)):
        ro = _rollouts(rewards, lengths)
        sel = sel_fn.select(ro, selection.PromptStats(p_B=np.array([p])), sample_rngs(3, 4, G))
        want = truncation.seed_lengths(rule, ro.lengths_N, ro.entropy_NR, sample_rngs(3, 4, G))
        assert sel.fallback_N.all() and sel.source_N.tolist() == list(range(G))
        assert sel.cut_N.tolist() == want.tolist()


def test_choices_are_deterministic_per_run_seed_step_and_sample():
    rewards = [1, 0, 1, 1, 0, 1, 1, 1] * 2
    ro = _rollouts(rewards, [20 + i for i in range(16)], group_size=8)
    stats = selection.PromptStats(p_B=np.array([0.1, 0.3]), gamma=1.0)
    a = ADAPTIVE.select(ro, stats, sample_rngs(11, 5, 16))
    b = ADAPTIVE.select(ro, stats, sample_rngs(11, 5, 16))
    np.testing.assert_array_equal(a.source_N, b.source_N)
    np.testing.assert_array_equal(a.cut_N, b.cut_N)
    # one group alone with its own samples' generators: the same choices (batch-independent)
    ro2 = selection.BehaviorRollouts(tokens=ro.tokens[8:], logp_NR=ro.logp_NR[8:],
                                     entropy_NR=ro.entropy_NR[8:], rewards_N=ro.rewards_N[8:],
                                     group_size=8)
    c = ADAPTIVE.select(ro2, selection.PromptStats(p_B=stats.p_B[1:], gamma=1.0),
                        sample_rngs(11, 5, 16)[8:])
    np.testing.assert_array_equal(c.source_N + 8, a.source_N[8:])
    # another step or run seed draws other sources (6 candidates per sample, 16 samples)
    for rs, st in ((11, 6), (12, 5)):
        d = ADAPTIVE.select(ro, stats, sample_rngs(rs, st, 16))
        assert not np.array_equal(d.source_N, a.source_N)


@pytest.mark.parametrize("rule_name", ["ratio", "entropy"])
def test_fixed_selectors_give_todays_seeds(rule_name):
    rule = truncation.get(rule_name, ratio=0.3, top_k=4)
    ro = _rollouts([0, 1, 1, 0, 1, 0, 0, 0], [12, 1, 30, 7, 19, 25, 3, 40])
    prompts, refs = [[1, 2], [3]], ["a", "b"]
    old = make_seed_batch(prompts, refs, ro.tokens, ro.logp_NR, ro.entropy_NR, rule,
                          sample_rngs(2, 9, 8))
    chosen = selection.get(rule_name, ratio=0.3, top_k=4).select(ro, None, sample_rngs(2, 9, 8))
    new = make_selected_seed_batch(prompts, refs, ro, chosen)
    assert new.seed_tokens == old.seed_tokens
    for x, y in zip(new.seed_logp, old.seed_logp, strict=True):
        np.testing.assert_array_equal(x, y)
    np.testing.assert_array_equal(new.behavior_lengths, old.behavior_lengths)


def test_seeds_keep_their_source_rollouts_behavior_log_probs():
    ro = _rollouts([0, 1, 0, 0], [30, 40, 25, 35])
    chosen = ADAPTIVE.select(ro, selection.PromptStats(p_B=np.array([0.25])), sample_rngs(0, 1, G))
    sb = make_selected_seed_batch([[1]], [None], ro, chosen, p_B=np.array([0.25]), gamma=1.0)
    for i in range(G):
        assert sb.seed_tokens[i] == ro.tokens[1][: chosen.cut_N[i]]
        np.testing.assert_array_equal(sb.seed_logp[i],
                                      ro.logp_NR[1, : chosen.cut_N[i]].astype(np.float32))
    assert sb.behavior_lengths.tolist() == [40] * G and sb.source_reward.tolist() == [1.0] * G
    bad = selection.Selection(source_N=np.array([4, 1, 2, 3]), cut_N=np.zeros(4, int),
                              predicted_N=np.zeros(4), fallback_N=np.zeros(4, bool))
    with pytest.raises(ValueError, match="own prompt"):
        make_selected_seed_batch([[1]], [None], ro, bad)


def test_gamma_is_calibrated_from_realised_continuation_success():
    rng = np.random.default_rng(0)
    tracker = SuccessTracker(gamma0=1.0, ema=0.5, decay=0.95)
    assert tracker.gamma == 1.0  # nothing observed yet
    true_gamma = 2.0
    for step in range(60):
        n = 64
        p = rng.uniform(0, 1, n)
        r = (rng.random(n) < 0.5).astype(float)
        u = rng.uniform(0, 1, n)
        v = p + (r - p) * u ** true_gamma
        y = (rng.random(n) < v).astype(float)
        tracker.observe_continuations([[step, b] for b in range(n // 8)], p, r, u, 1.0, y, 8)
    # within one grid step (2^(1/4)) of the truth
    assert true_gamma / 1.2 <= tracker.gamma <= true_gamma * 1.2
    assert GAMMA_GRID[0] <= tracker.gamma <= GAMMA_GRID[-1]


def test_calibration_bins_sum_predictions_and_successes():
    out = calibration_bins([0.1, 0.15, 0.5, 0.95, np.nan], [1, 0, 1, 1, 1])
    assert out["n"] == [2.0, 0.0, 1.0, 0.0, 1.0]
    np.testing.assert_allclose(out["pred"], [0.25, 0, 0.5, 0, 0.95], rtol=1e-12)
    assert out["real"] == [1.0, 0.0, 1.0, 0.0, 1.0]


def test_selector_state_and_choices_round_trip_through_the_seed_cache_checkpoint():
    tracker = SuccessTracker(gamma0=1.5, ema=0.25, decay=0.9)
    tracker.at_refresh([[1, 2], [3]], np.array([1, 0, 0, 0, 1, 1, 1, 0.0]), G)
    tracker.observe_continuations([[1, 2]], np.full(G, 0.25), np.ones(G), np.full(G, 0.5), 1.5,
                                  np.array([1, 0, 1, 0.0]), G)
    ro = _rollouts([0, 1, 0, 0], [30, 40, 25, 35])
    chosen = ADAPTIVE.select(ro, selection.PromptStats(p_B=np.array([0.25])), sample_rngs(0, 1, G))
    cache = SeedCache(cycle_start=8, tracker=tracker)
    cache.batches[9] = make_selected_seed_batch([[1, 2]], ["r"], ro, chosen, p_B=np.array([0.25]),
                                                gamma=1.5)
    back = SeedCache.from_state(cache.to_pytree(48), cache.to_json())
    assert back.tracker.p == tracker.p and back.tracker.weight == tracker.weight
    np.testing.assert_array_equal(back.tracker.sse_K, tracker.sse_K)
    assert (back.tracker.gamma0, back.tracker.ema, back.tracker.decay) == (1.5, 0.25, 0.9)
    b, a = back.batches[9], cache.batches[9]
    for k, v in a.selection_arrays().items():
        np.testing.assert_array_equal(b.selection_arrays()[k], v, err_msg=k)
    assert b.gamma == 1.5 and b.seed_tokens == a.seed_tokens
    empty = SeedCache.from_state(SeedCache(tracker=SuccessTracker()).to_pytree(8), {})
    assert empty.tracker.p == {} and empty.tracker.gamma == 1.0
    assert SeedCache.from_state(SeedCache().to_pytree(8), {}).tracker is None


@pytest.mark.parametrize("field,value", [("target", 1.0), ("gamma", 0.0), ("ema", 0.0),
                                         ("fallback", "success_target")])
def test_config_rejects_bad_adaptive_fields(tmp_path, field, value):
    cd = tiny_cd(tmp_path, **{"seeds.truncation": "success_target", f"seeds.{field}": value})
    with pytest.raises(ConfigValueError, match=rf"seeds\.{field}"):
        TrainConfig.from_config(cd)
