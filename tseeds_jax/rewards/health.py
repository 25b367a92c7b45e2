"""Sandbox failures as the caller sees them: never silent.

`note` (`failure_log`, called by `registry.score_result` for every result) logs one warning, at the
first `sandbox_error` of the process, with its cause (the failing setup step and OS error);
`sweep_failures` lists the uid sweeps that failed after a worker was killed (each also logged);
`status` gathers both for reports. `check_rewards`
is what a trainer calls on the reasons of one step: if every reward is `sandbox_error` the sandbox
cannot run programs at all here, and training on those zeros would only waste the run.
"""

from __future__ import annotations

import tseeds_jax.rewards.code_reward as code_reward  # noqa: F401 - registers "code", which preflight grades
import tseeds_jax.rewards.failure_log as failure_log
import tseeds_jax.rewards.registry as registry
import tseeds_jax.rewards.sandbox as sandbox
from tseeds_jax.rewards.failure_log import cause, first_cause, log, note, sweep_failures

__all__ = ["SandboxUnavailableError", "cause", "check_rewards", "first_cause", "log", "note", "preflight",
           "status", "sweep_failures"]


class SandboxUnavailableError(RuntimeError):
    """Every reward of a training step failed in the code sandbox."""


def preflight() -> dict:
    """Grade one tiny program through the code reward as training does; raise
    SandboxUnavailableError naming the missing layer if the sandbox refuses or fails. Returns the
    isolation the program got (`isolation["weak"]` when the switch allowed less)."""
    res = registry.score_result("code", "a, b = map(int, input().split())\nprint(a + b)\n",
                                {"stdin_stdout": [["2 3\n", "5\n"]]})
    if res.reason != "correct":
        err = res.details.get("sandbox_error") or {}
        why = sandbox.refusal(err) if err else f"the test program scored {res.reason}: {res.details}"
        raise SandboxUnavailableError(f"code reward preflight failed: {why}"[:2000])
    return res.details.get("isolation") or {}


def check_rewards(reasons) -> None:
    """Raise SandboxUnavailableError if `reasons` (one step's reward reasons) are all sandbox_error."""
    reasons = list(reasons)
    if reasons and all(r == "sandbox_error" for r in reasons):
        raise SandboxUnavailableError(
            f"all {len(reasons)} rewards of this step are sandbox_error: the code sandbox cannot run "
            f"programs here (first failure: {failure_log.first_cause() or 'not recorded in this process'}). "
            "Training on these zero rewards would be meaningless; run `tseeds doctor` for the "
            "isolation layers and the failing step, and see docs/sandbox.md."
        )


def status() -> dict:
    """Health fields of this process's grading: the first sandbox failure and the failed sweeps."""
    return {"first_sandbox_failure": failure_log.first_cause(), "sweep_failures": sweep_failures()}
