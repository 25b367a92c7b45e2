"""FR3E / CURE branching: where a group's branch rollouts restart, and FR3E's advantage factor.

A group of G samples is `base` first-pass rollouts of the current policy plus G - base branch
rollouts. Branches restart at `points` anchors: anchor a cuts first-pass rollout a % base before
one of its highest-entropy tokens (`seeds/truncation.py` EntropyTruncation, entropies of the
learner under the current policy), so the branch re-samples that token and everything after it.
Each anchor gets (G - base) / points branches. The prefix before the anchor is the policy's own
on-policy text and is trained with the branch (seed tokens carry the current log-probs, ratio 1).

FR3E scales a branch's advantage by exp(-beta (V(anchor) - V(prompt))): V(anchor) the mean reward
of the anchor's branches, V(prompt) the mean reward of the group's first-pass rollouts. Anchors
that already lead to success get smaller updates, anchors whose branches lose value larger ones
(our reading of FR3E's value-based advantage modulation; docs/restart_methods.md).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from tseeds_jax.rl.restart_checks import split  # noqa: F401  (re-exported: the group layout)
from tseeds_jax.seeds.truncation import EntropyTruncation


@dataclasses.dataclass(frozen=True)
class Anchor:
    rollout: int  # first-pass rollout index within the group
    cut: int  # prefix length: response tokens [0, cut) are kept, the branch writes from `cut`


def anchors(lengths, entropy_NR, points: int, top_k: int, rng: np.random.Generator) -> list[Anchor]:
    """`points` anchors over a group's first-pass rollouts (lengths[i] tokens, entropies row i)."""
    rule = EntropyTruncation(k=top_k)
    out = []
    for a in range(points):
        i = a % len(lengths)
        out.append(Anchor(i, rule.seed_length(int(lengths[i]), entropy_NR[i], rng)))
    return out


def fr3e_factors(base_rewards, branch_rewards_AM, beta: float) -> np.ndarray:
    """[A, M] advantage factors of the branches of A anchors (M each): exp(-beta (V_a - V_0))."""
    v0 = float(np.mean(base_rewards))
    branch = np.asarray(branch_rewards_AM, np.float64)
    va = branch.mean(axis=1, keepdims=True)
    return np.broadcast_to(np.exp(-beta * (va - v0)), branch.shape).copy()
