"""Batch-wide statistics of a step's samples: rewards per group, lengths, decode-slot occupancy,
the light copies that carry them across hosts, and DAPO's all-equal-group filter.

Letters: N samples of a batch, G samples per group.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tseeds_jax.decode_layout import default_slots
from tseeds_jax.rl.rollout.samples import Sample
from tseeds_jax.rl.run import hosts as hosts_lib


def gather_samples(samples, hosts):
    """Light copies of every host's samples (rewards, lengths) for batch-wide statistics."""
    if hosts.single:
        return samples
    per = np.array([[s.reward, len(s.seed_ids), len(s.cont_ids), s.finish == "stop"]
                    for s in samples], np.float64).reshape(-1, 4)
    # Hosts may hold different numbers of samples (dynamic sampling short of a full batch), and
    # rewards stay float64: objects, not `gather_rows` (equal shapes, 32-bit on the device).
    allp = np.concatenate(hosts_lib.allgather_objects(per, hosts))
    return [Sample(group=i, prompt_ids=[], reference=None,
                   seed_ids=[0] * int(row[1]), seed_logp=np.zeros(int(row[1])),
                   cont_ids=[0] * int(row[2]), cont_logp=np.zeros(int(row[2])),
                   finish="stop" if row[3] else "length", reward=float(row[0]))
            for i, row in enumerate(allp)]


def varied_mask(metric_N, group_ids_N) -> np.ndarray:
    """DAPO `filter_groups`: bool [N], True on the samples of groups whose metric is not all
    equal, or that have a single sample. max > min is the "std > 0" test without np.std's
    rounding (the std of equal floats can be ~1e-17)."""
    s = np.asarray(metric_N, np.float64)
    ids = np.asarray(group_ids_N)
    if s.ndim != 1 or ids.shape != s.shape:
        raise ValueError(f"metric_N {s.shape} and group_ids_N {ids.shape} must be equal [N]")
    _, gidx = np.unique(ids, return_inverse=True)
    n = int(gidx.max()) + 1 if len(gidx) else 0
    gmax, gmin = np.full(n, -np.inf), np.full(n, np.inf)
    np.maximum.at(gmax, gidx, s)
    np.minimum.at(gmin, gidx, s)
    keep = (gmax > gmin) | (np.bincount(gidx, minlength=n) == 1)
    return keep[gidx]


def keep_varied_groups(samples, g):
    """The samples of the groups of `g` consecutive samples that `varied_mask` keeps."""
    if not samples:
        return []
    keep = varied_mask([s.reward for s in samples], np.arange(len(samples)) // g)
    return [s for s, k in zip(samples, keep) if k]


def group_stats(samples, g) -> dict[str, float]:
    """pass@G and the share of groups whose rewards are all equal (no gradient)."""
    if not samples:
        return {}
    groups = [samples[i : i + g] for i in range(0, len(samples), g)]
    solved = [max(s.reward for s in grp) >= 1.0 for grp in groups]
    equal = [max(s.reward for s in grp) == min(s.reward for s in grp) for grp in groups]
    return {"pass_at_G": float(np.mean(solved)), "zero_adv_group_frac": float(np.mean(equal))}


def sample_metrics(samples, g) -> dict[str, Any]:
    if not samples:
        return {"reward": 0.0, "accuracy": 0.0, "num_samples": 0}
    rewards = np.array([s.reward for s in samples])
    reasons: dict[str, int] = {}
    for s in samples:
        if s.reward_reason:
            reasons[s.reward_reason] = reasons.get(s.reward_reason, 0) + 1
    return {
        "reward": float(rewards.mean()),
        "accuracy": float(np.mean(rewards >= 1.0)),
        "response_length": float(np.mean([len(s.response_ids) for s in samples])),
        "seed_length": float(np.mean([len(s.seed_ids) for s in samples])),
        "seed_fraction": float(np.mean([len(s.seed_ids) / max(len(s.response_ids), 1)
                                        for s in samples])),
        "finish_stop_frac": float(np.mean([s.finish == "stop" for s in samples])),
        "num_samples": len(samples),
        "reward_reasons": reasons,
    }


def slots_of(n_requests: int, sampler_slots: int = 0) -> int:
    """Decode slots of a sampler call (`make_sample_fn` / `sampling.generate`'s default)."""
    if n_requests <= 0:
        return 0
    return sampler_slots or default_slots(n_requests)


def occupancy(lengths: list[int], sampler_slots: int = 0) -> tuple[int, int]:
    """(tokens decoded, slot-steps spent) of one sampler call whose requests all start together
    (requests <= slots): every decode step runs every slot until the longest request ends."""
    if not lengths:
        return 0, 0
    slots = slots_of(len(lengths), sampler_slots)
    waves = -(-len(lengths) // slots)  # more requests than slots: later waves refill slots
    return int(sum(lengths)), int(slots * max(lengths) * waves)
