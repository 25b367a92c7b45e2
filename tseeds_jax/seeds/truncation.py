"""Truncation rules: where a behavior response is cut into a seed (a token prefix).

A rule maps one behavior response (its length and, for the entropy rule, its per-token entropies
under the behavior policy) plus a random generator to a seed length `h` in [0, |o| - 1]: the seed
is `o[:h]` and the current policy writes everything from position `h` on. Rules are pure host
functions (numpy), registered by name so that adaptive rules can be added beside them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Protocol

import numpy as np


class TruncationRule(Protocol):
    name: str

    def seed_length(self, length: int, entropy_R: np.ndarray | None, rng: np.random.Generator) -> int:
        """Seed length for a response of `length` tokens; `entropy_R` has at least `length` entries."""


@dataclasses.dataclass(frozen=True)
class RatioTruncation:
    """Keep the first round(|o| * ratio) tokens, never the final token (so never the EOS).

    Python's round() is banker's rounding; the paper's round() is ambiguous, so we round half up,
    which is what "keep the first half" means for odd lengths in most readings.
    """

    ratio: float
    name: str = "ratio"

    def __post_init__(self):
        if not 0 <= self.ratio < 1:
            raise ValueError(f"RatioTruncation.ratio={self.ratio!r}: must be in [0, 1)")

    def seed_length(self, length, entropy_R=None, rng=None) -> int:
        if length <= 1:
            return 0
        keep = int(np.floor(length * self.ratio + 0.5))
        return min(keep, length - 1)


@dataclasses.dataclass(frozen=True)
class EntropyTruncation:
    """Among the k highest-entropy positions of o under pi_b, pick one uniformly; cut before it.

    The seed ends *before* the chosen token, so the current policy makes that branching decision.
    Ties in entropy are broken by position (earlier first) so that the rule is deterministic.
    """

    k: int = 32
    name: str = "entropy"

    def __post_init__(self):
        if self.k < 1:
            raise ValueError(f"EntropyTruncation.k={self.k!r}: must be >= 1")

    def seed_length(self, length, entropy_R, rng) -> int:
        if length <= 1:
            return 0
        if entropy_R is None:
            raise ValueError("EntropyTruncation needs the behavior entropies of the response")
        ent = np.asarray(entropy_R[:length], dtype=np.float64)
        # stable argsort of -entropy: equal entropies keep position order
        order = np.argsort(-ent, kind="stable")
        candidates = order[: min(self.k, length)]
        return int(candidates[rng.integers(len(candidates))])


_RULES: dict[str, Callable[..., TruncationRule]] = {
    "ratio": lambda ratio=0.5, **_: RatioTruncation(ratio=ratio),
    "entropy": lambda top_k=32, **_: EntropyTruncation(k=top_k),
}


def register(name: str, factory: Callable[..., TruncationRule]) -> None:
    if name in _RULES:
        raise ValueError(f"truncation rule {name!r} is already registered")
    _RULES[name] = factory


def get(name: str, **kwargs) -> TruncationRule:
    if name not in _RULES:
        raise ValueError(f"unknown truncation rule {name!r}; registered: {sorted(_RULES)}")
    return _RULES[name](**kwargs)


def names() -> list[str]:
    return sorted(_RULES)


def seed_lengths(rule: TruncationRule, lengths_N, entropy_NR, rngs) -> np.ndarray:
    """Independent seed length per sample; `rngs[i]` is sample i's own generator."""
    out = np.zeros(len(lengths_N), np.int32)
    for i, n in enumerate(lengths_N):
        ent = None if entropy_NR is None else entropy_NR[i]
        out[i] = rule.seed_length(int(n), ent, rngs[i])
    return out
