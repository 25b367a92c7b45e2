"""Compact chain-sum problems for tiny models: reasoning-gym `chain_sum` entries in short form.

reasoning-gym's own question ("State the final answer to the following arithmetic problem:
4 - 1 - 7 =") is ~70 characters, too long for a character-level model of a few hundred thousand
parameters. This source keeps the entry (and so reasoning-gym's own verifier) but renders

    prompt   "4-1-7:"
    solution "4-1=3 3-7=-4 #-4"      (a worked left-to-right solution, final answer after '#')

so that a response has ~20+ tokens in which a seed can be cut.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from tseeds_jax.data.reasoning_gym_tasks import ReasoningGymSource
from tseeds_jax.data.reasoning_gym_tasks import score_answer as rg_score_answer

ANSWER_MARK = "#"
_TERM = re.compile(r"([+-]?)\s*(\d+)")


def parse_terms(expression: str) -> list[int]:
    """Signed terms of a chain sum, e.g. '4 - 1 - 7' -> [4, -1, -7]."""
    terms = [(-1 if sign == "-" else 1) * int(num) for sign, num in _TERM.findall(expression)]
    if not terms:
        raise ValueError(f"chain_sum expression {expression!r} has no terms")
    return terms


def compact_prompt(terms: list[int]) -> str:
    out = str(terms[0])
    for t in terms[1:]:
        out += f"{'-' if t < 0 else '+'}{abs(t)}"
    return out + ":"


def worked_solution(terms: list[int], *, error_rate: float = 0.0, rng=None) -> str:
    """Left-to-right partial sums, each step `a+b=c`; with `error_rate`, a step's result is off by
    ±1-2 (the chain continues from the wrong value, so the final answer is wrong too)."""
    acc, steps = terms[0], []
    for t in terms[1:]:
        value = acc + t
        if error_rate and rng is not None and rng.random() < error_rate:
            value += int(rng.choice([-2, -1, 1, 2]))
        steps.append(f"{acc}{'-' if t < 0 else '+'}{abs(t)}={value}")
        acc = value
    return " ".join(steps) + f" {ANSWER_MARK}{acc}"


def extract_answer(response: str) -> str | None:
    """Text after the last answer mark, up to whitespace; None when there is no mark."""
    if ANSWER_MARK not in response:
        return None
    tail = response.rsplit(ANSWER_MARK, 1)[1].strip()
    return tail.split()[0] if tail else ""


def score(response: str, entry: Mapping[str, Any]) -> float:
    """reasoning-gym's own verifier on the extracted final answer."""
    answer = extract_answer(response)
    if answer is None:
        return 0.0
    return float(rg_score_answer(answer, entry))


class CompactChainSum:
    """Indexable source of compact chain-sum examples (same schema as the other sources)."""

    def __init__(self, *, seed: int = 0, size: int = 100000,
                 config: Mapping[str, Any] | None = None):
        self._src = ReasoningGymSource("chain_sum", seed=seed, size=size, config=config)

    def __len__(self) -> int:
        return len(self._src)

    def terms(self, index: int) -> list[int]:
        return parse_terms(self._src.entry(index)["metadata"]["expression"])

    def __getitem__(self, index: int) -> dict[str, Any]:
        entry = self._src.entry(int(index))
        terms = parse_terms(entry["metadata"]["expression"])
        return {"id": f"compact:chain_sum/{self._src.seed}/{index}",
                "prompt": compact_prompt(terms),
                "reference": entry, "source": "compact:chain_sum", "reward_name": "compact_arith",
                "meta": {"terms": terms}}

    def solution(self, index: int, *, error_rate: float = 0.0,
                 rng: np.random.Generator | None = None) -> str:
        return worked_solution(self.terms(index), error_rate=error_rate, rng=rng)

    @staticmethod
    def alphabet() -> str:
        """Every character a prompt or solution can contain (for a character vocabulary)."""
        return "0123456789+-=:# "
