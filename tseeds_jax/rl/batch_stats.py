"""Batch-wide statistics of a step's samples: rewards per group, lengths, the light copies that
carry them across hosts, and DAPO's all-equal-group filter."""

from __future__ import annotations

from typing import Any

import numpy as np

from tseeds_jax.rl import hosts as hosts_lib
from tseeds_jax.rl import rollout


def gather_samples(samples, hosts):
    """Light copies of every host's samples (rewards, lengths) for batch-wide statistics."""
    if hosts.single:
        return samples
    per = np.array([[s.reward, len(s.seed_ids), len(s.cont_ids), s.finish == "stop"]
                    for s in samples], np.float64).reshape(-1, 4)
    # Hosts may hold different numbers of samples (dynamic sampling short of a full batch), and
    # rewards stay float64: objects, not `gather_rows` (equal shapes, 32-bit on the device).
    allp = np.concatenate(hosts_lib.allgather_objects(per, hosts))
    return [rollout.Sample(group=i, prompt_ids=[], reference=None,
                           seed_ids=[0] * int(row[1]), seed_logp=np.zeros(int(row[1])),
                           cont_ids=[0] * int(row[2]), cont_logp=np.zeros(int(row[2])),
                           finish="stop" if row[3] else "length", reward=float(row[0]))
            for i, row in enumerate(allp)]


def keep_varied_groups(samples, g):
    out = []
    for start in range(0, len(samples), g):
        grp = samples[start : start + g]
        rewards = [s.reward for s in grp]
        if len(grp) == 1 or max(rewards) > min(rewards):
            out += grp
    return out


def group_stats(samples, g) -> dict[str, float]:
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
