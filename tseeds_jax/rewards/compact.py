"""Reward of the compact chain-sum task (tseeds_jax.data.compact_arith): the final answer after
'#', checked by reasoning-gym's own chain_sum verifier. Pure Python and fast, so it runs inline."""

from __future__ import annotations

from tseeds_jax.data import compact_arith
from tseeds_jax.rewards.registry import RewardResult, register


@register("compact_arith", isolation="inline")
def compact_arith_reward(response, reference, **_):
    if not isinstance(response, str):
        return RewardResult(0.0, "error", {"error": f"response is {type(response).__name__}"})
    if compact_arith.extract_answer(response) is None:
        return RewardResult(0.0, "no_answer")
    # Strict 0/1: reasoning-gym gives partial credit to near misses, the paper's reward is binary.
    correct = compact_arith.score(response, reference) >= 1.0
    return RewardResult(1.0 if correct else 0.0, "correct" if correct else "wrong")
