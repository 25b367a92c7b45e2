"""The "reasoning_gym" reward: score with the source dataset's own `score_answer`.

The reference is the reasoning-gym entry dict (`question`, `answer`, `metadata` with
`source_dataset`). The answer is extracted from the response by `extract` (see
`tseeds_jax.rewards.extract.extract_answer`: default 'auto' = last <answer> tags, else last boxed,
else text after the last `marker` (default "####"), else a final-answer phrase, else the whole text).
Scores in (0, 1) are partial credit as defined by the dataset.
"""

from __future__ import annotations

import functools

from tseeds_jax.rewards.extract import extract_answer
from tseeds_jax.rewards.registry import RewardResult, register


@functools.cache
def _scorer(dataset: str):
    import reasoning_gym

    return reasoning_gym.get_score_answer_fn(dataset)


def gym_score(response, reference, *, extract: str = "auto", marker: str = "####") -> RewardResult:
    """Grade `response` (str) against a reasoning-gym entry. Never raises on bad data."""
    if not isinstance(response, str):
        return RewardResult(
            0.0, "invalid_input", {"error": f"response must be str, got {type(response).__name__}"}
        )
    meta = reference.get("metadata") if isinstance(reference, dict) else None
    dataset = meta.get("source_dataset") if isinstance(meta, dict) else None
    if not isinstance(dataset, str):
        return RewardResult(
            0.0,
            "invalid_input",
            {"error": "reference must be a reasoning-gym entry with metadata.source_dataset"},
        )
    answer = extract_answer(response, extract, marker)  # ValueError for a bad `extract` -> "error"
    if answer is None:
        return RewardResult(0.0, "no_answer", {"dataset": dataset})
    try:
        fn = _scorer(dataset)
    except Exception as e:  # noqa: BLE001 - unknown dataset name
        return RewardResult(0.0, "invalid_input", {"error": f"{type(e).__name__}: {e}"[:300]})
    s = float(fn(answer, reference))
    reason = "correct" if s >= 1.0 else ("partial" if s > 0 else "wrong")
    return RewardResult(s, reason, {"dataset": dataset, "answer": answer[:200]})


@register("reasoning_gym", isolation="process", hard_timeout_s=60.0)
def _gym_reward(response, reference, **options) -> RewardResult:
    return gym_score(response, reference, **options)
