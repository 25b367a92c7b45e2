"""Assert-style tests graded so that the program cannot fool them (docs/sandbox.md, "Grading").

Split tests (`assert_split`): one sandbox run per assert; inside, `sandbox_harness` runs the program
as the module `solution`, evaluates the call and sends back the value in a builtins-only form; the
comparison with the expected value (which never enters the sandbox) happens here, in the reward
worker, with this process's own `==`, `abs` and `math.isclose`. Unsplittable tests: one run in which
a checker process (holding the test code and a per-run secret) calls into the program's process;
only ["pass", secret] on the checker's channel passes. Exit statuses are ignored: a test passes only
when its own result arrived and matched.
"""

from __future__ import annotations

import ast
import marshal
import math
import secrets
from typing import Any

import tseeds_jax.rewards.sandbox as sandbox
from tseeds_jax.rewards.assert_split import Check, SplitTest
from tseeds_jax.rewards.sandbox_harness import decode

# a run that ended without a result, by how it ended
_NO_RESULT = {"ok": "no_result", "exit_nonzero": "no_result"}


def matches(value: Any, check: Check) -> bool:
    """Does the (decoded, builtins-only) `value` pass `check`? Never calls the program's code."""
    k, want = check.kind, check.expected
    if k in ("eq", "ne"):
        return (value == want) == (k == "eq")
    if k in ("is", "is_not"):
        return (value is want) == (k == "is")
    if k in ("truthy", "falsy"):
        return bool(value) == (k == "truthy")
    if not isinstance(value, (int, float, complex)) or not isinstance(want, (int, float, complex)):
        return False
    if k == "close":
        if isinstance(value, complex) or isinstance(want, complex):
            return False  # math.isclose refuses complex numbers: the assert would have raised
        return math.isclose(value, want, rel_tol=check.rel_tol, abs_tol=check.abs_tol)
    diff = abs(value - want)
    return diff < check.abs_tol if k == "abs_lt" else diff <= check.abs_tol


def _frame(raw: bytes) -> list | None:
    """The single result frame b"R" + literal + b"\\n" of a run, else None (none, several, garbage).
    `ast.literal_eval` builds plain values only and runs no code; the run caps the size."""
    if not raw.startswith(b"R") or not raw.endswith(b"\n") or raw.count(b"\n") != 1:
        return None
    try:
        out = ast.literal_eval(raw[1:-1].decode("utf-8", "surrogatepass"))
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError, UnicodeDecodeError):
        return None
    return out if isinstance(out, list) and out and isinstance(out[0], str) else None


def _failed_run(r: sandbox.RunResult, what: str) -> tuple[str, str]:
    return _NO_RESULT.get(r.status, r.status), f"{what}: no result ({r.status}); {r.stderr_tail[-300:]}"


def _error_outcome(frame: list) -> tuple[str, str]:
    name = frame[1] if len(frame) > 1 and isinstance(frame[1], str) else "?"
    msg = frame[2] if len(frame) > 2 and isinstance(frame[2], str) else ""
    return ("memory" if name == "MemoryError" else "runtime_error"), f"{name}: {msg}"[:300]


def run_split(program: str, setup: str, test: SplitTest, limits, binds) -> tuple[str, str, sandbox.RunResult]:
    """(outcome, note, run) of one split test: correct | wrong | runtime_error | no_result | the
    run's limit or sandbox status."""
    spec = marshal.dumps({"setup": setup, "call": test.call})
    r = sandbox.run_program(program, "", limits, extra_binds=binds, harness=("call", spec))
    if r.status == "sandbox_error":
        return "sandbox_error", r.stderr_tail[-300:], r
    frame = _frame(r.result)
    if frame is None:
        return (*_failed_run(r, test.source), r)
    if frame[0] == "error":
        return (*_error_outcome(frame), r)
    if frame[0] != "ok" or len(frame) != 2:
        return "wrong", f"{test.source}: malformed result", r
    try:
        value = decode(frame[1])
    except Exception:  # noqa: BLE001 - whatever arrived is not a plain value: not an answer
        return "wrong", f"{test.source}: undecodable result", r
    ok = matches(value, test.check)
    return ("correct" if ok else "wrong"), ("" if ok else f"{test.source}: got {value!r}"[:300]), r


def run_checked(program: str, test_source: str, limits, binds) -> tuple[str, str, sandbox.RunResult]:
    """(outcome, note, run) of one unsplittable test, run by the in-sandbox checker."""
    secret = secrets.token_hex(16)
    spec = marshal.dumps({"test": test_source, "secret": secret})
    r = sandbox.run_program(program, "", limits, extra_binds=binds, harness=("check", spec))
    if r.status == "sandbox_error":
        return "sandbox_error", r.stderr_tail[-300:], r
    frame = _frame(r.result)
    if frame is None:
        return (*_failed_run(r, "checked test"), r)
    if frame == ["pass", secret]:
        return "correct", "", r
    if frame[0] == "error":
        return (*_error_outcome(frame), r)
    return "wrong", " ".join(str(x) for x in frame[1:])[:300], r
