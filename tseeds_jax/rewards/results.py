"""What a reward returns (`RewardResult`), what the registry keeps per reward (`RewardSpec`), and
how a reward function's return value becomes a valid result. Imported by the registry and by the
worker pool alike (neither imports the other back)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any


@dataclasses.dataclass(frozen=True)
class RewardResult:
    """score in [0, 1]; reason: short machine-readable tag (see docs/sandbox.md); details: free-form."""

    score: float
    reason: str
    details: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class RewardSpec:
    name: str
    fn: Callable[..., Any]
    module: str  # imported by a worker process to (re-)register the reward
    file: str | None  # loaded by path when `module` is not importable there (tests, scripts, __main__)
    isolation: str
    hard_timeout_s: Callable[[Any, dict], float]


def normalize(value: Any) -> RewardResult:
    """Turn a reward function's return value into a valid RewardResult (score clamped to [0, 1])."""
    if isinstance(value, RewardResult):
        res = value
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        res = RewardResult(float(value), "correct" if value > 0 else "wrong")
    else:
        return RewardResult(0.0, "error", {"error": f"reward returned {type(value).__name__}"})
    s = float(res.score) if isinstance(res.score, (int, float)) else float("nan")
    if not math.isfinite(s):
        return RewardResult(0.0, "error", {**res.details, "error": f"non-finite score {res.score!r}"})
    return dataclasses.replace(res, score=min(1.0, max(0.0, s)))


def call_inline(spec: RewardSpec, response: Any, reference: Any, options: dict) -> RewardResult:
    try:
        return normalize(spec.fn(response, reference, **options))
    except Exception as e:  # noqa: BLE001 - a reward never raises into the trainer
        return RewardResult(0.0, "error", {"error": f"{type(e).__name__}: {e}"[:500]})
