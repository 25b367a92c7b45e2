"""Failures of the grading machinery, never silent: one warning per process for the first
`sandbox_error` (with its cause), and every failed uid sweep logged and counted.

The bottom of the import graph for these notes: `registry` calls `note` for every result, `_pool`
calls `sweep_failed`; `health` reads both for trainers and `tseeds doctor`.
"""

from __future__ import annotations

import logging
import threading

log = logging.getLogger("tseeds_jax.rewards")
_lock = threading.Lock()
_first_cause: str | None = None
_sweep_failures: list[str] = []


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


def sweep_failed(uid: int, why: str) -> None:
    """A killed worker's sandbox uid could not be swept: processes of that uid may survive."""
    with _lock:
        _sweep_failures.append(f"uid {uid}: {why}"[:500])
    log.error("reward worker killed, but the sweep of its sandbox uid %d failed: %s (processes of "
              "that uid may survive; see docs/sandbox.md)", uid, why)


def sweep_failures() -> list[str]:
    """Every failed uid sweep of this process (uid and why), oldest first."""
    with _lock:
        return list(_sweep_failures)
