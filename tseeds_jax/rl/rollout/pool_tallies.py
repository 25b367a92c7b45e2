"""Per-token versions of a trained batch, as counts that add up over hosts (the partial-rollout
pool's metrics: tokens per age, the share of seed tokens, the sampler-vs-learner gap of carried
tokens per age), and the pool's per-step metrics merged over hosts."""

from __future__ import annotations

from typing import Any

import numpy as np

from tseeds_jax.rl.rollout.samples import Sample


def version_metrics(samples: list[Sample], step: int) -> dict[str, float]:
    """Per-token versions of a trained batch: tokens per age (step - version), the share of
    tokens per source, and the sampler-vs-learner log-prob gap of the seed tokens per age (the
    continuation's gap is the learner's `sampler_learner_gap`)."""
    return tally_metrics(version_tallies(samples, step))


def version_tallies(samples: list[Sample], step: int) -> dict[str, Any]:
    """The counts behind `version_metrics` (they add up over hosts: `merge_hosts`); JSON-safe
    (a queued batch's info is checkpointed): "age" [[age, tokens]], "gap" [[age, sum, n]]."""
    parts = []
    for s in samples:
        if s.versions is None:
            continue
        h = len(s.seed_ids)
        ages, counts = np.unique(step - np.asarray(s.versions), return_counts=True)
        gap: list = []
        if h and s.seed_sampler_logp is not None:
            # refresh seeds have no sampler log-prob (NaN): no gap to report
            known = np.isfinite(s.seed_sampler_logp)
            seed_age = (step - np.asarray(s.versions[:h]))[known]
            diff = np.abs(np.asarray(s.seed_logp, np.float64) - s.seed_sampler_logp)[known]
            gap = [[a, float(diff[seed_age == a].sum()), int(np.sum(seed_age == a))]
                   for a in np.unique(seed_age).tolist()]
        parts.append({"seed": h, "all": len(s.versions), "gap": gap,
                      "age": [[int(a), int(n)] for a, n in zip(ages, counts)]})
    return sum_tallies(parts)


def sum_tallies(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """Tallies added up: token counts per age, gap sums and counts per age."""
    ages: dict[int, int] = {}
    gaps: dict[int, tuple[float, int]] = {}
    for t in parts:
        for a, n in t["age"]:
            ages[a] = ages.get(a, 0) + n
        for a, g, n in t["gap"]:
            g0, n0 = gaps.get(a, (0.0, 0))
            gaps[a] = (g0 + g, n0 + n)
    return {"seed": sum(t["seed"] for t in parts), "all": sum(t["all"] for t in parts),
            "age": sorted([a, n] for a, n in ages.items()),
            "gap": sorted([a, g, n] for a, (g, n) in gaps.items())}


def tally_metrics(t: dict[str, Any]) -> dict[str, float]:
    out: dict[str, float] = {"token_share/seed": t["seed"] / max(t["all"], 1),
                             "token_share/continuation": (t["all"] - t["seed"]) / max(t["all"], 1)}
    for a, n in t["age"]:
        out[f"token_age/{a}"] = float(n)
    for a, total, n in t["gap"]:
        out[f"logp_gap_age/{a}"] = total / n
    return out


# Pool metrics over hosts: counts add up, a step's calls and the oldest group are the largest.
SUMMED = ("partial_decoded_tokens", "partial_slot_steps", "partial_groups_in_flight",
          "partial_responses_in_flight")
LARGEST = ("partial_calls", "group_staleness_max", "time_partial_stats")
MERGED = SUMMED + LARGEST


def merge_hosts(infos: list[dict[str, Any]], tallies: list[dict[str, Any]]) -> dict[str, Any]:
    """The pool metrics of every host's `next_batch` info and `version_tallies`, as one."""
    out: dict[str, Any] = {k: sum(i[k] for i in infos) for k in SUMMED}
    out.update({k: max(i[k] for i in infos) for k in LARGEST})
    out["slot_occupancy"] = out["partial_decoded_tokens"] / max(out["partial_slot_steps"], 1)
    out.update(tally_metrics(sum_tallies(tallies)))
    return out
