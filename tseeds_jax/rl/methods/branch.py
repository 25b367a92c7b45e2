"""FR3E and CURE: branches from high-entropy tokens of the step's own first-pass rollouts.

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

CURE branches the same way without the factor for the first `stage1_frac` of the run's steps,
then trains plain on-policy DAPO. The branches need the first pass's rewards, so this method
scores its samples itself (the collection tail does not score them again).

Several hosts: every host draws the whole batch's prompts and keeps its contiguous share of the
groups (global request indices); the anchors come from one random stream over the whole batch,
so the hosts gather every group's first-pass lengths and entropies and each draws every anchor
in order, keeping its own: the anchors one process draws. restart/* metrics are the host's.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from tseeds_jax.rl.methods import registry
from tseeds_jax.rl.methods.base import OnPolicy
from tseeds_jax.rl.rollout import stats, streams
from tseeds_jax.rl.rollout.source import Plan, Policy, StepInfo
from tseeds_jax.rl.run import hosts as hosts_lib
from tseeds_jax.seeds.truncation import EntropyTruncation

BRANCH, ANCHOR = 0x7E13, 0x7E14  # the family's streams: the branches, the anchors' choice


def branch_split(group_size: int, base: int, points: int) -> tuple[int, int]:
    """(first-pass rollouts, branches per anchor) of FR3E / CURE's groups; ValueError when
    G - base is not split evenly over the anchors."""
    base = base or group_size // 2
    rest = group_size - base
    if base < 1 or rest < 1 or points < 1 or rest % points:
        raise ValueError(f"branching: group_size={group_size}, branch_base={base}, "
                         f"branch_points={points}: need 1 <= base < G and (G - base) divisible "
                         "by branch_points")
    return base, rest // points


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


class Branched(OnPolicy):
    """Branches at every step, advantages as they are; FR3E and CURE change one rule each."""

    def __init__(self, ctx):
        super().__init__(ctx)
        self.cfg, self.rs = ctx.cfg, ctx.cfg.restart
        self.last: dict[str, float] = {}  # this step's restart/* metrics

    def _stage2(self, j: int) -> bool:
        """Whether batch j is trained as plain on-policy DAPO instead of branching."""
        return False

    def _factors(self, base_samples, branch_samples, per: int) -> np.ndarray:
        """The advantage factors of one group's branches (`per` for each anchor)."""
        return np.ones(len(branch_samples))

    def plan(self, j: int, policy: Policy, info: StepInfo) -> Plan:
        if self._stage2(j):
            self.last = {"restart/stage": 2.0}
            return super().plan(j, policy, info)
        prompts, refs, first = self.ctx.take_local(self.ctx.b)
        return Plan(prompts, refs, first,
                    stream=streams.method_seed(self.cfg.seed, j, streams.FIRST_PASS))

    def generate(self, plan: Plan, j: int, policy: Policy, info: StepInfo) -> list:
        if self._stage2(j):
            return super().generate(plan, j, policy, info)
        ctx, c, rs = self.ctx, self.cfg, self.rs
        g, r = ctx.g, ctx.r
        b, g0 = len(plan.prompts), plan.first // g  # this host's groups, its first group
        base, per = branch_split(g, rs.branch_base, rs.branch_points)
        t0 = time.perf_counter()
        first = ctx.generate(policy, dataclasses.replace(plan, first=g0 * base), group_size=base)
        ctx.score(first)
        tokens, attn = ctx.stats.sequences(first)
        logp, ent = ctx.stats.logp_entropy(policy.stats, tokens, attn, r)
        lengths = [len(s.cont_ids) for s in first]
        if not ctx.hosts.single:  # every group's, in order: the anchors of the whole batch
            every = hosts_lib.allgather_objects((lengths, ent), ctx.hosts)
            lengths = [n for part, _ in every for n in part]
            ent = np.concatenate([e for _, e in every])
        rng = np.random.default_rng(streams.method_seed(c.seed, j, ANCHOR))
        seed_ids, seed_logp, cuts = [], [], []
        for k in range(len(lengths) // base):
            rows = slice(k * base, (k + 1) * base)
            for a in anchors(lengths[rows], ent[rows], rs.branch_points, rs.branch_top_k, rng):
                if not g0 <= k < g0 + b:  # another host's group
                    continue
                i = (k - g0) * base + a.rollout
                src = first[i]
                for _ in range(per):
                    seed_ids.append(list(src.cont_ids[: a.cut]))
                    seed_logp.append(logp[i, : a.cut].copy())
                    cuts.append(a.cut / max(len(src.cont_ids), 1))
        nb = g - base
        branches = ctx.generate(policy, Plan(
            plan.prompts, plan.references, g0 * nb, seeds=(seed_ids, seed_logp),
            stream=streams.method_seed(c.seed, j, BRANCH)), group_size=nb)
        ctx.score(branches)
        samples = []
        for k in range(b):
            mine = branches[k * nb : (k + 1) * nb]
            f = self._factors(first[k * base : (k + 1) * base], mine, per)
            for s, factor in zip(mine, f.tolist()):
                s.adv_factor = factor
            samples += first[k * base : (k + 1) * base] + mine
        for i, s in enumerate(samples):
            s.group = i // g
        # generation, its statistics pass and the scoring the branches need: all rollout time
        info.rollout_s += time.perf_counter() - t0
        info.scored = True
        used, spent = (sum(x) for x in zip(stats.occupancy([len(s.cont_ids) for s in first],
                                                           c.hardware.sampler_slots),
                                           stats.occupancy([len(s.cont_ids) for s in branches],
                                                           c.hardware.sampler_slots)))
        info.slot_counts, info.slot_occupancy = (used, spent), used / max(spent, 1)
        factors = [s.adv_factor for s in samples]
        self.last = {"restart/stage": 1.0, "restart/branch_frac": nb / g,
                     "restart/branch_cut_ratio": float(np.mean(cuts)) if cuts else 0.0,
                     "restart/branch_reward": float(np.mean([s.reward for s in branches]))
                     if branches else 0.0,
                     "restart/first_pass_reward": float(np.mean([s.reward for s in first])),
                     "restart/adv_factor_mean": float(np.mean(factors))}
        return samples

    def sample_metrics(self, samples):
        return dict(self.last)


class FR3E(Branched):
    """Branch advantages x exp(-beta (V(anchor) - V(prompt)))."""

    def _factors(self, base_samples, branch_samples, per):
        return fr3e_factors([s.reward for s in base_samples],
                            np.array([s.reward for s in branch_samples]).reshape(-1, per),
                            self.rs.value_beta).reshape(-1)


class CURE(Branched):
    """Branching for the first `stage1_frac` of the run's steps, then plain DAPO."""

    def _stage2(self, j):
        return j >= round(self.rs.stage1_frac * self.cfg.steps)


def _check(cfg, bad) -> None:
    try:
        branch_split(cfg.rollout.group_size, cfg.restart.branch_base, cfg.restart.branch_points)
    except ValueError as e:
        bad("branch_points", cfg.restart.branch_points, str(e))


def _presets(scale: str) -> dict:
    # G/2 first-pass rollouts, 2 anchors at their highest-entropy tokens, G/4 branches each
    return {"restart.branch_base": 0, "restart.branch_points": 2, "restart.branch_top_k": 1,
            "restart.value_beta": 1.0, "restart.stage1_frac": 0.5}


FEATURE = registry.Feature("branch", "FR3E / CURE", {
    **registry.REFUSED_BY_ALL,
    "partial": "branches restart from the same step's scored first-pass rollouts: two "
               "dependent generations, not one pool",
})
_STREAMS = {"BRANCH": BRANCH, "ANCHOR": ANCHOR}
registry.register(registry.MethodSpec(
    name="fr3e", label="FR3E", description="FR3E (entropy branches, value-modulated)",
    feature=FEATURE, variant="state+action", route=FR3E, presets=_presets, check=_check,
    streams=_STREAMS))
registry.register(registry.MethodSpec(
    name="cure", label="CURE", description="CURE (entropy branches, then DAPO)",
    feature=FEATURE, variant="state+action", route=CURE, presets=_presets, check=_check,
    streams=_STREAMS))
