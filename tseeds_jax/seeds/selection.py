"""Seed selectors: for every seeded sample, which behavior rollout its seed comes from and where
it is cut.

Letters: B prompts of a seeded batch, G samples per prompt, N = B * G (group order), R width.

A selector is one pure host function (numpy; no sampler, no model):

    select(rollouts: BehaviorRollouts, stats: PromptStats, rngs) -> Selection

`rollouts` are the behavior responses written by pi_b at the refresh for one seeded batch, with
their learner log-probs / entropies under pi_b and their rewards (they are complete responses, so
they are scored at refresh time). `stats` carries per-prompt statistics (the success-rate
estimate p(x) of the current policy and the value model's shape). `rngs[i]` is sample i's own
generator, derived from (run seed, step, sample), so each seed is chosen independently of the
others and of batch composition. Sample i's seed is `tokens[source[i]][:cut[i]]`; the source is
always a rollout of sample i's own prompt.

Registered selectors: "ratio" and "entropy" (today's fixed truncation rules, each sample cut from
its own rollout, bit for bit as before), "success_target" (the first adaptive rule: every sample of
a group draws among the rollouts of one kind at one cut fraction, so with one such rollout the
whole group shares one seed), and "mixture" / "mixture_spread" (adaptive rules that keep every
sample's seed its own draw: per-sample cut jitter, a success/failure mixture, distinct
(source, cut) pairs; docs/adaptive_seeds.md).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np

import tseeds_jax.seeds.truncation as truncation


@dataclasses.dataclass(frozen=True)
class BehaviorRollouts:
    """One seeded batch's behavior rollouts, N = B * G in group order."""

    tokens: Sequence[Sequence[int]]  # N response token lists
    logp_NR: np.ndarray  # behavior log-probs (learner, under pi_b), response-aligned
    entropy_NR: np.ndarray
    rewards_N: np.ndarray
    group_size: int

    @property
    def lengths_N(self) -> np.ndarray:
        return np.array([len(t) for t in self.tokens], np.int32)


@dataclasses.dataclass(frozen=True)
class PromptStats:
    """Per-prompt statistics at refresh time."""

    p_B: np.ndarray  # estimated success rate of the current policy from each prompt
    gamma: float = 1.0  # value-model shape (calibrated online by SuccessTracker)


@dataclasses.dataclass(frozen=True)
class Selection:
    source_N: np.ndarray  # int: index (into the batch's N rollouts) of each seed's source rollout
    cut_N: np.ndarray  # int: seed length, in [0, |source| - 1] (0 for |source| <= 1)
    predicted_N: np.ndarray  # value-model success estimate from the seed (NaN: no model)
    fallback_N: np.ndarray  # bool: the fixed rule chose this seed (no rollout of the needed kind)


class Selector(Protocol):
    name: str
    adaptive: bool  # True: keeps a SuccessTracker (per-prompt estimates, calibration)

    def select(self, rollouts: BehaviorRollouts, stats: PromptStats | None, rngs) -> Selection:
        ...


def successes(rewards_N: np.ndarray) -> np.ndarray:
    """A rollout counts as a success at reward >= 1 (the trainer's `accuracy` uses the same)."""
    return np.asarray(rewards_N, np.float64) >= 1.0


def value(p, r, u, gamma):
    """Value model: success rate of the current policy from a prefix of a rollout with reward r,
    cut at fraction u of its length. V(0) = p (the prompt itself), V(1) = the rollout's outcome;
    gamma > 1 says early tokens reveal little of the outcome, gamma < 1 that they reveal much.
    The outcome is the binarised reward (`successes`: 1 at r >= 1, else 0), as in selection and
    in p(x): a fractional code reward (tests passed / tests run) counts as a failure."""
    p, u = (np.asarray(x, np.float64) for x in (p, u))
    r = successes(r).astype(np.float64)
    return p + (r - p) * np.power(u, gamma)


def informative(predicted_N) -> np.ndarray:
    """bool [N]: predictions that are a probability strictly between 0 and 1. A prediction of
    exactly 0 or 1 (a group with one outcome only, whose p(x) equals its rollouts' reward) says
    the outcome is known in advance; calibration metrics count only the informative ones."""
    pred = np.asarray(predicted_N, np.float64)
    return np.isfinite(pred) & (pred > 0.0) & (pred < 1.0)


def target_fraction(p: float, r: float, target: float, gamma: float) -> float:
    """The u in [0, 1] with value(p, r, u) = target, for r on the far side of target from p
    (r = 1 when p < target, r = 0 when p >= target); 0 when p already equals the target."""
    gap = (target - p) / (r - p)
    return float(np.clip(gap, 0.0, 1.0) ** (1.0 / gamma))


def _cut_at(u: float, length: int) -> int:
    if length <= 1:
        return 0
    return min(int(np.floor(length * u + 0.5)), length - 1)


@dataclasses.dataclass(frozen=True)
class FixedSelector:
    """A truncation rule applied to each sample's own rollout: today's seeds, unchanged."""

    rule: truncation.TruncationRule
    adaptive: bool = False

    @property
    def name(self) -> str:
        return self.rule.name

    def select(self, rollouts, stats=None, rngs=()) -> Selection:
        n = len(rollouts.tokens)
        cut = truncation.seed_lengths(self.rule, rollouts.lengths_N, rollouts.entropy_NR, rngs)
        return Selection(source_N=np.arange(n), cut_N=cut, predicted_N=np.full(n, np.nan),
                         fallback_N=np.zeros(n, bool))


@dataclasses.dataclass(frozen=True)
class SuccessTargetSelector:
    """Restart where the current policy's estimated success rate is near `target`.

    A prompt with p(x) < target takes its seeds from successful rollouts, cut where the value
    model reaches the target; a prompt with p(x) >= target from failed rollouts. Each sample
    draws its source uniformly among its group's rollouts of the needed kind; where the group has
    none, the fixed rule cuts the sample's own rollout (with the sample's untouched generator,
    so the fallback seed is exactly the fixed rule's seed).
    """

    fallback: truncation.TruncationRule
    target: float = 0.5
    name: str = "success_target"
    adaptive: bool = True

    def __post_init__(self):
        if not 0 < self.target < 1:
            raise ValueError(f"SuccessTargetSelector.target={self.target!r}: must be in (0, 1)")

    def select(self, rollouts, stats, rngs) -> Selection:
        if stats is None:
            raise ValueError("success_target needs per-prompt statistics (PromptStats)")
        g, n = rollouts.group_size, len(rollouts.tokens)
        if n % g or len(stats.p_B) != n // g:
            raise ValueError(f"success_target: {n} rollouts, group size {g} and "
                             f"{len(stats.p_B)} prompt estimates do not match")
        lengths, ok = rollouts.lengths_N, successes(rollouts.rewards_N)
        rewards = np.asarray(rollouts.rewards_N, np.float64)
        source, cut = np.arange(n), np.zeros(n, np.int32)
        predicted, fallback = np.zeros(n), np.zeros(n, bool)
        for b in range(n // g):
            p = float(stats.p_B[b])
            want_success = p < self.target
            members = np.arange(b * g, (b + 1) * g)
            kind = members[ok[members] == want_success]
            for i in members:
                if len(kind) == 0:
                    fallback[i] = True
                    ent = None if rollouts.entropy_NR is None else rollouts.entropy_NR[i]
                    cut[i] = self.fallback.seed_length(int(lengths[i]), ent, rngs[i])
                else:
                    j = int(kind[rngs[i].integers(len(kind))])
                    r = 1.0 if want_success else 0.0
                    u = target_fraction(p, r, self.target, stats.gamma)
                    source[i], cut[i] = j, _cut_at(u, int(lengths[j]))
                j = source[i]
                u_real = cut[i] / lengths[j] if lengths[j] else 0.0
                predicted[i] = value(p, rewards[j], u_real, stats.gamma)
        return Selection(source_N=source, cut_N=cut, predicted_N=predicted, fallback_N=fallback)


def _validate(name: str, rollouts, stats) -> None:
    if stats is None:
        raise ValueError(f"{name} needs per-prompt statistics (PromptStats)")
    g, n = rollouts.group_size, len(rollouts.tokens)
    if n % g or len(stats.p_B) != n // g:
        raise ValueError(f"{name}: {n} rollouts, group size {g} and "
                         f"{len(stats.p_B)} prompt estimates do not match")


def _free_cut(want: int, length: int, taken: set, source: int) -> int | None:
    """The untaken cut of `source` nearest to `want` in [1, length - 1] (a cut of 0 is the
    prompt itself, the same state from every source); None when all are taken."""
    if length <= 1:
        return None if (source, 0) in taken else 0
    for d in range(length):
        for c in (want - d, want + d):
            if 1 <= c <= length - 1 and (source, c) not in taken:
                return c
    return None


@dataclasses.dataclass(frozen=True)
class MixtureSelector:
    """Adaptive seeds in which every sample of a group is its own draw.

    In a group with both successful and failed behavior rollouts, sample i draws a value-model
    level a_i = u_i^gamma uniformly from the lower half of the feasible range [a_min, 1], then a
    success source with probability w_i = p + (p* - p) / a_i and a failure source otherwise, so
    that its expected predicted success  w_i V(1, u_i) + (1 - w_i) V(0, u_i)  is exactly p*
    (a_min: the smallest level at which w_i is a probability). Sources of the drawn kind are
    taken least-used first, and a (source, cut) pair already taken in the group moves to the
    nearest free cut, so no two samples share a seed while the group has distinct candidates.

    Groups with one outcome only (all behavior rollouts right, or all wrong): the fixed rule on
    each sample's own rollout (`spread=False`, "mixture"), or (`spread=True`, "mixture_spread")
    cut positions stratified over [0, spread_max): the group's k-th sample cuts its own rollout
    at a fraction drawn in the k-th of G equal strata, so the group spans states from the prompt
    to mid-rollout instead of G restarts at one depth.
    """

    fallback: truncation.TruncationRule
    target: float = 0.5
    spread: bool = False
    spread_max: float = 0.5
    adaptive: bool = True

    def __post_init__(self):
        if not 0 < self.target < 1:
            raise ValueError(f"{self.name}.target={self.target!r}: must be in (0, 1)")
        if not 0 < self.spread_max <= 1:
            raise ValueError(f"{self.name}.spread_max={self.spread_max!r}: must be in (0, 1]")

    @property
    def name(self) -> str:
        return "mixture_spread" if self.spread else "mixture"

    def _level_bounds(self, p: float) -> tuple[float, float]:
        t = self.target
        if p < t:
            a_min = (t - p) / (1 - p)
        elif p > t:
            a_min = (p - t) / p
        else:
            a_min = 0.0
        return a_min, a_min + 0.5 * (1.0 - a_min)

    def select(self, rollouts, stats, rngs) -> Selection:
        _validate(self.name, rollouts, stats)
        g, n = rollouts.group_size, len(rollouts.tokens)
        lengths, ok = rollouts.lengths_N, successes(rollouts.rewards_N)
        gamma = float(stats.gamma)
        source, cut = np.arange(n), np.zeros(n, np.int32)
        predicted, fallback = np.zeros(n), np.zeros(n, bool)
        for b in range(n // g):
            p = float(np.clip(stats.p_B[b], 0.0, 1.0))
            members = np.arange(b * g, (b + 1) * g)
            kinds = {True: members[ok[members]], False: members[~ok[members]]}
            if len(kinds[True]) == 0 or len(kinds[False]) == 0:
                for k, i in enumerate(members):
                    fallback[i] = True
                    if self.spread:
                        u = self.spread_max * (k + rngs[i].random()) / g
                        cut[i] = int(min(np.floor(u * lengths[i]), max(lengths[i] - 1, 0)))
                    else:
                        ent = None if rollouts.entropy_NR is None else rollouts.entropy_NR[i]
                        cut[i] = self.fallback.seed_length(int(lengths[i]), ent, rngs[i])
            else:
                lo, hi = self._level_bounds(p)
                used = dict.fromkeys(members.tolist(), 0)
                taken: set = set()
                for i in members:
                    rng = rngs[i]
                    a = lo + (hi - lo) * rng.random()
                    w = float(np.clip(p + (self.target - p) / a, 0.0, 1.0)) if a > 0 else 1.0
                    want = bool(rng.random() < w)
                    u = a ** (1.0 / gamma)
                    pick = None
                    # least-used sources of the drawn kind first (random order among equals),
                    # then the other kind: a free (source, cut) pair where one exists
                    for kind in (want, not want):
                        cand = kinds[kind][rng.permutation(len(kinds[kind]))]
                        cand = sorted(cand.tolist(), key=lambda j: used[j])
                        for j in cand:
                            c = _free_cut(_cut_at(u, int(lengths[j])), int(lengths[j]), taken, j)
                            if c is not None:
                                pick = (j, c)
                                break
                        if pick is not None:
                            break
                    if pick is None:  # fewer distinct candidates than samples
                        j = int(cand[0])
                        pick = (j, max(_cut_at(u, int(lengths[j])), min(1, int(lengths[j]) - 1)))
                    source[i], cut[i] = pick
                    used[pick[0]] += 1
                    taken.add(pick)
            for i in members:
                j = source[i]
                u_real = cut[i] / lengths[j] if lengths[j] else 0.0
                predicted[i] = value(p, rollouts.rewards_N[j], u_real, gamma)
        return Selection(source_N=source, cut_N=cut, predicted_N=predicted, fallback_N=fallback)


_SELECTORS: dict[str, Callable[..., Selector]] = {
    "ratio": lambda ratio=0.5, top_k=32, **_: FixedSelector(truncation.get("ratio", ratio=ratio)),
    "entropy": lambda ratio=0.5, top_k=32, **_: FixedSelector(
        truncation.get("entropy", top_k=top_k)),
    "success_target": lambda ratio=0.5, top_k=32, target=0.5, fallback="ratio", **_:
        SuccessTargetSelector(fallback=truncation.get(fallback, ratio=ratio, top_k=top_k),
                              target=target),
    "mixture": lambda ratio=0.5, top_k=32, target=0.5, fallback="ratio", **_: MixtureSelector(
        fallback=truncation.get(fallback, ratio=ratio, top_k=top_k), target=target),
    "mixture_spread": lambda ratio=0.5, top_k=32, target=0.5, fallback="ratio", **_:
        MixtureSelector(fallback=truncation.get(fallback, ratio=ratio, top_k=top_k),
                        target=target, spread=True, spread_max=ratio),
}


def register(name: str, factory: Callable[..., Selector]) -> None:
    if name in _SELECTORS:
        raise ValueError(f"seed selector {name!r} is already registered")
    _SELECTORS[name] = factory


def get(name: str, **kwargs) -> Selector:
    if name not in _SELECTORS:
        raise ValueError(f"unknown seed selector {name!r}; registered: {sorted(_SELECTORS)}")
    return _SELECTORS[name](**kwargs)


def names() -> list[str]:
    return sorted(_SELECTORS)
