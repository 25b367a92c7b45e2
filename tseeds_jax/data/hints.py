"""QuestA hints: the first part of a problem's reference solution, as tokens.

QuestA (Li et al., arXiv 2507.13266) augments a hard problem with the first p% of a reference
solution. Here the hint becomes the response prefix the policy continues from (context only:
the run's `seeds.variant` is "state", so the hint is never trained), which for the compact
chain-sum task is the same conditioning as a hint appended to the question. Only sources whose
reference holds a worked solution can give hints: compact chain sums (the reasoning-gym entry's
expression gives the worked left-to-right solution) and references with a "solution" string.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def solution_text(reference: Any) -> str:
    """The worked reference solution of a problem; ValueError if the reference has none."""
    if isinstance(reference, dict):
        if isinstance(reference.get("solution"), str):
            return reference["solution"]
        expr = (reference.get("metadata") or {}).get("expression")
        if isinstance(expr, str):
            from tseeds_jax.data.compact_arith import parse_terms, worked_solution

            return worked_solution(parse_terms(expr))
    raise ValueError(
        f"QuestA hints need a worked reference solution: reference {str(reference)[:80]!r} has "
        "neither a 'solution' string nor a chain-sum 'metadata.expression' (restart.method="
        "'questa' runs on compact:chain_sum or sources whose references carry a solution)")


def hint_length(num_tokens: int, share: float) -> int:
    """Tokens of a hint that is `share` of a `num_tokens`-token solution: floor(share * n),
    never the whole solution (at least one token is left for the policy)."""
    if num_tokens <= 1:
        return 0
    return min(int(share * num_tokens), num_tokens - 1)


def hint_tokens(reference: Any, share: float, encode: Callable[[str], list[int]]) -> list[int]:
    ids = list(encode(solution_text(reference)))
    return ids[: hint_length(len(ids), share)]


def hint_share(step: int, steps: int, start: float, end: float, switch: float) -> float:
    """QuestA's two-stage curriculum: `start` before step round(switch * steps), `end` after."""
    return start if step < int(round(switch * steps)) else end
