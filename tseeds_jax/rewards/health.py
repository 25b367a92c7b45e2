"""Sandbox failures as the caller sees them: never silent.

`note` (called by `registry.score_result` for every result) logs one warning, at the first
`sandbox_error` of the process, with its cause (the failing setup step and OS error). `check_rewards`
is what a trainer calls on the reasons of one step: if every reward is `sandbox_error` the sandbox
cannot run programs at all here, and training on those zeros would only waste the run.
"""

from __future__ import annotations

import logging
import threading

log = logging.getLogger("tseeds_jax.rewards")
_lock = threading.Lock()
_first_cause: str | None = None


class SandboxUnavailableError(RuntimeError):
    """Every reward of a training step failed in the code sandbox."""


def cause(details: dict) -> str:
    """One line: the failing step and OS error of a sandbox_error result's details."""
    err = details.get("sandbox_error")
    if isinstance(err, dict):
        layer = f" (missing layer: {err['layer']})" if err.get("layer") else ""
        return f"{err.get('step')}: {err.get('error')}{layer}"
    return str(details.get("stderr_tail") or details.get("error") or "no cause reported")


def note(result) -> None:
    """Log the cause of the first sandbox_error of this process (one warning per process)."""
    global _first_cause
    if result.reason != "sandbox_error":
        return
    with _lock:
        if _first_cause is not None:
            return
        _first_cause = cause(result.details)
    log.warning(
        "code sandbox failed: %s. Every code reward it grades scores 0; `tseeds doctor` shows the "
        "isolation layers and the failing step (docs/sandbox.md).",
        _first_cause,
    )


def first_cause() -> str | None:
    return _first_cause


def preflight() -> dict:
    """Grade one tiny program through the code reward as training does; raise
    SandboxUnavailableError naming the missing layer if the sandbox refuses or fails. Returns the
    isolation the program got (`isolation["weak"]` when the switch allowed less)."""
    from tseeds_jax.rewards.registry import score_result

    res = score_result("code", "a, b = map(int, input().split())\nprint(a + b)\n",
                       {"stdin_stdout": [["2 3\n", "5\n"]]})
    if res.reason != "correct":
        err = res.details.get("sandbox_error") or {}
        from tseeds_jax.rewards.sandbox import refusal

        why = refusal(err) if err else f"the test program scored {res.reason}: {res.details}"
        raise SandboxUnavailableError(f"code reward preflight failed: {why}"[:2000])
    return res.details.get("isolation") or {}


def check_rewards(reasons) -> None:
    """Raise SandboxUnavailableError if `reasons` (one step's reward reasons) are all sandbox_error."""
    reasons = list(reasons)
    if reasons and all(r == "sandbox_error" for r in reasons):
        raise SandboxUnavailableError(
            f"all {len(reasons)} rewards of this step are sandbox_error: the code sandbox cannot run "
            f"programs here (first failure: {_first_cause or 'not recorded in this process'}). "
            "Training on these zero rewards would be meaningless; run `tseeds doctor` for the "
            "isolation layers and the failing step, and see docs/sandbox.md."
        )
