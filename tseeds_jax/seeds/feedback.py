"""The trainer's two touch points with seed selection: building a seeded batch at refresh time,
and feeding each trained batch's rewards back (selector state, seed metrics).

Kept here rather than in the trainer so that the trainer only passes plain arrays (host-local:
on several hosts each host selects, tracks and reports its own samples).
"""

from __future__ import annotations

import numpy as np

from tseeds_jax.seeds.cache import SeedBatch
from tseeds_jax.seeds.refresh import make_selected_seed_batch
from tseeds_jax.seeds.selection import BehaviorRollouts, PromptStats, Selector, informative, successes
from tseeds_jax.seeds.tracker import SuccessTracker, calibration_bins

CUT_BINS = 10  # the cut-ratio histogram: 10 equal bins over [0, 1]


def make_selector(seeds_cfg) -> Selector:
    import tseeds_jax.seeds.selection as selection

    return selection.get(seeds_cfg.truncation, ratio=seeds_cfg.ratio, top_k=seeds_cfg.top_k,
                         target=getattr(seeds_cfg, "target", 0.5),
                         fallback=getattr(seeds_cfg, "fallback", "ratio"))


def new_tracker(selector: Selector, seeds_cfg) -> SuccessTracker | None:
    if not selector.adaptive:
        return None
    return SuccessTracker(gamma0=seeds_cfg.gamma, ema=seeds_cfg.ema, calibrate=seeds_cfg.calibrate)


def select_seed_batch(selector: Selector, tracker: SuccessTracker | None, prompt_ids, references,
                      responses, logp_NR, entropy_NR, rewards_N, group_size: int,
                      rngs) -> SeedBatch:
    """One seeded batch from its behavior rollouts (N = len(prompt_ids) * group_size)."""
    rollouts = BehaviorRollouts(tokens=responses, logp_NR=logp_NR, entropy_NR=entropy_NR,
                                rewards_N=np.asarray(rewards_N, np.float64), group_size=group_size)
    p_B, gamma, stats = None, float("nan"), None
    if tracker is not None:
        p_B = tracker.at_refresh(prompt_ids, rollouts.rewards_N, group_size)
        gamma = tracker.gamma
        stats = PromptStats(p_B=p_B, gamma=gamma)
    chosen = selector.select(rollouts, stats, rngs)
    return make_selected_seed_batch(prompt_ids, references, rollouts, chosen, p_B=p_B, gamma=gamma)


def after_scoring(tracker: SuccessTracker | None, sb: SeedBatch | None, prompt_ids, rewards_N,
                  group_size: int, zero_adv: float | None) -> dict:
    """Metrics of one scored batch (`sb`: its seeds, None for an on-policy batch); updates the
    tracker with the batch's realised successes."""
    out: dict = {}
    if zero_adv is not None:
        out["zero_adv_group_frac/" + ("seeded" if sb is not None else "onpolicy")] = zero_adv
    rewards = np.asarray(rewards_N, np.float64)
    if sb is None:
        if tracker is not None and len(rewards):
            tracker.observe_onpolicy(prompt_ids, rewards, group_size)
        return out
    sel, u = sb.selection_arrays(), sb.cut_ratios
    if not len(u):
        return out
    out["seeds/cut_ratio_mean"] = float(u.mean())
    out["seeds/cut_ratio_hist"] = np.histogram(np.clip(u, 0, 1), bins=CUT_BINS,
                                               range=(0, 1))[0].astype(float).tolist()
    # an empty seed restarts from the prompt: which rollout it "came from" carries nothing
    scored = np.isfinite(sel["source_reward"]) & (sb.seed_lengths > 0)
    out["seeds/empty_frac"] = float(np.mean(sb.seed_lengths == 0))
    if scored.any():
        out["seeds/from_success_frac"] = float(successes(sel["source_reward"][scored]).mean())
    out["seeds/fallback_frac"] = float(sel["fallback"].mean())
    if tracker is None or len(rewards) != len(u):
        return out
    # calibration counts only informative predictions (strictly between 0 and 1): a group with
    # one outcome only predicts its own rollouts' reward, which says nothing of the value model
    info = informative(sel["predicted"])
    out["seeds/informative_frac"] = float(info.mean())
    if info.any():
        out["seeds/predicted_success"] = float(np.mean(sel["predicted"][info]))
        out["seeds/realised_success"] = float(successes(rewards[info]).mean())
    out["seeds/gamma"] = float(sb.gamma)
    for k, v in calibration_bins(sel["predicted"][info], rewards[info]).items():
        out[f"calib/{k}"] = v
    tracker.observe_continuations(prompt_ids, sel["p_sel"], sel["source_reward"], u, sb.gamma,
                                  rewards, group_size)
    out["seeds/gamma_calibrated"] = tracker.gamma
    out["seeds/tracked_prompts"] = len(tracker.p)
    return out
