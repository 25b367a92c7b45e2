"""The "math" reward: the response's final answer against a ground-truth answer string, via math-verify.

Extraction is ours (last `\\boxed{...}` with nested braces, else a final-answer phrase such as
"The final answer is 3" or "#### 3"); equivalence is math-verify's (`parse` + `verify`: sympy
equality, numeric rounding to `float_rounding` decimals, sets/intervals/tuples, percentages, units
stripped). math-verify bounds its own time with SIGALRM, which only works on the main thread: the
registered reward runs in a reward worker process on its main thread (timeouts on, plus a hard
deadline from the caller); `math_score` called directly off the main thread disables those timeouts.
"""

from __future__ import annotations

import threading

from tseeds_jax.rewards.extract import math_answer
from tseeds_jax.rewards.registry import RewardResult, register

_CFG = None


def _configs():
    global _CFG
    if _CFG is None:
        from math_verify import ExprExtractionConfig, LatexExtractionConfig

        _CFG = [LatexExtractionConfig(), ExprExtractionConfig()]
    return _CFG


def _as_boxed(s: str) -> str:
    return s if "\\boxed" in s else "\\boxed{" + s + "}"


def math_score(response, reference, *, timeout_s: int = 5, float_rounding: int = 6) -> RewardResult:
    """Grade `response` (str) against `reference` (answer str, or int/float). Never raises."""
    if not isinstance(response, str):
        return RewardResult(
            0.0, "invalid_input", {"error": f"response must be str, got {type(response).__name__}"}
        )
    if isinstance(reference, (int, float)) and not isinstance(reference, bool):
        reference = str(reference)
    if not isinstance(reference, str) or not reference.strip():
        return RewardResult(
            0.0, "invalid_input", {"error": f"reference must be a non-empty str, got {reference!r}"[:200]}
        )
    answer, how = math_answer(response)
    if answer is None:
        return RewardResult(0.0, "no_answer", {})
    details = {"answer": answer[:200], "extracted_by": how}
    if answer.strip() == reference.strip():
        return RewardResult(1.0, "correct", details)
    from math_verify import parse, verify

    # SIGALRM-based timeouts are only possible on the main thread.
    t = int(timeout_s) if threading.current_thread() is threading.main_thread() else None
    try:
        gold = parse(_as_boxed(reference.strip()), extraction_config=_configs(), parsing_timeout=t)
        if not gold:
            return RewardResult(0.0, "bad_reference", {**details, "reference": reference[:200]})
        pred = parse(_as_boxed(answer), extraction_config=_configs(), parsing_timeout=t)
        if not pred:
            return RewardResult(0.0, "unparsable", details)
        ok = verify(gold, pred, float_rounding=float_rounding, timeout_seconds=t)
    except Exception as e:  # noqa: BLE001 - includes math-verify's TimeoutException
        reason = "timeout" if "timeout" in type(e).__name__.lower() else "error"
        return RewardResult(0.0, reason, {**details, "error": f"{type(e).__name__}: {e}"[:300]})
    return RewardResult(1.0 if ok else 0.0, "correct" if ok else "wrong", details)


@register(
    "math", isolation="process", hard_timeout_s=lambda ref, opts: 3 * float(opts.get("timeout_s", 5)) + 10
)
def _math_reward(response, reference, **options) -> RewardResult:
    return math_score(response, reference, **options)
