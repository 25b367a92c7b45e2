"""Assert-style tests graded so that the program cannot fool them (docs/sandbox.md, "Grading").

Split sources (`assert_split`): one sandbox run per source. `StepDialog` sends the harness the
program's entry points, then one step at a time (the next only once the last one's frame is back);
each assert's value comes back in a builtins-only form and is compared here, in the reward worker,
with this process's own `==`, `abs`, `math.isclose` (`matches`); the expected values never enter
the sandbox. Each step has its own wall clock (and, in the harness, its own CPU seconds).

Unsplittable sources: one run in which the checker (holding the test code and a per-run secret)
calls into the program's process (`sandbox_checker`); only ["pass", secret, n] passes.

Exit statuses are ignored: a test passes only when its own result arrived and matched.
"""

from __future__ import annotations

import ast
import marshal
import math
import secrets
import time
from typing import Any

import tseeds_jax.rewards.sandbox as sandbox
from tseeds_jax.rewards._common import Dialog
from tseeds_jax.rewards.assert_split import Check, SplitSource
from tseeds_jax.rewards.sandbox_harness import decode

# a run that ended without the result it was waiting for, by how it ended
_NO_RESULT = {"ok": "no_result", "exit_nonzero": "no_result"}
# the tampering verdicts (reason "tampering", details["tampering"] = the code; docs/sandbox.md):
# forged_reply (the checker's reply protocol broken from the program's process), forged_result (a
# result frame the harness did not write), opaque_value (a value that is not plain data, whose own
# comparison would decide), ended_early (the run exited 0 before its result came back)
TAMPERING = ("forged_reply", "forged_result", "opaque_value", "ended_early")
_FRAME_MIN = 1 << 20  # a result frame may always be this long (more for a long expected value)


def matches(value: Any, check: Check) -> bool:
    """Does the (decoded, builtins-only) `value` pass `check`, as Python would judge it? Never calls
    the program's code; an operation Python would refuse (TypeError) fails the check."""
    k, want = check.kind, check.expected
    if k == "method":  # the plain value's own (builtin) method
        name, args, kwargs, truth = want
        try:
            out = getattr(value, name)(*args, **kwargs)
            # `"55".__eq__(55)` is NotImplemented, which is truthy: no answer, not a pass
            return out is not NotImplemented and bool(out) == truth
        except Exception:  # noqa: BLE001 - what Python would raise fails the assert
            return False
    try:
        if k in ("truthy", "falsy"):
            return bool(value) == (k == "truthy")
        if k in ("is", "is_not"):
            return (value is want) == (k == "is")
        if k == "close":
            return math.isclose(value, want, rel_tol=check.rel_tol, abs_tol=check.abs_tol)
        if k in ("abs_lt", "abs_le"):
            diff = abs(value - want)
            return bool(diff < check.abs_tol if k == "abs_lt" else diff <= check.abs_tol)
        ops = {"eq": lambda: value == want, "ne": lambda: value != want, "lt": lambda: value < want,
               "le": lambda: value <= want, "gt": lambda: value > want, "ge": lambda: value >= want,
               "in": lambda: value in want, "not_in": lambda: value not in want,
               "contains": lambda: want in value, "not_contains": lambda: want not in value}
        return bool(ops[k]())
    except (TypeError, ValueError, OverflowError, ArithmeticError):
        return False


def message(obj: Any) -> bytes:
    """One message on the harness's fd 6 (None: the end)."""
    data = b"" if obj is None else marshal.dumps(obj)
    return len(data).to_bytes(4, "little") + data


def parse_frame(line: bytes) -> list | None:
    """One result line b"R" + literal, else None. `ast.literal_eval` builds plain values only."""
    if not line.startswith(b"R"):
        return None
    try:
        out = ast.literal_eval(line[1:].decode("utf-8", "surrogatepass"))
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError, UnicodeDecodeError):
        return None
    return out if isinstance(out, list) and out else None


def _error_outcome(frame: list) -> tuple[str, str]:
    name = frame[0] if frame and isinstance(frame[0], str) else "?"
    msg = frame[1] if len(frame) > 1 and isinstance(frame[1], str) else ""
    return ("memory" if name == "MemoryError" else "runtime_error"), f"{name}: {msg}"[:300]


class _Lines:
    """Complete result lines out of the chunks a run sends; `overflow` once a line outgrows `cap`."""

    def __init__(self):
        self.buf, self.cap, self.overflow = b"", _FRAME_MIN, False

    def feed(self, data: bytes) -> list[bytes]:
        self.buf += data
        *lines, self.buf = self.buf.split(b"\n")
        self.overflow = len(self.buf) > self.cap
        return lines


class StepDialog(Dialog):
    """One split source: outcomes[i] is (outcome, note) of its i-th assert once known."""

    def __init__(self, split: SplitSource, *, wall_s: float, cpu_s: float, budget_end: float,
                 stop_early: bool):
        self.split, self.wall_s, self.cpu_s = split, wall_s, cpu_s
        self.budget_end, self.stop_early = budget_end, stop_early
        self.restart()

    def restart(self) -> None:
        self.outgoing = bytearray(message({"entries": list(self.split.entries), "cpu_s": self.cpu_s}))
        self.outcomes: list[tuple[str, str] | None] = [None] * self.split.asserts
        self.k, self.finished, self.lines, self.method_sent = 0, False, _Lines(), False
        self.deadline = min(time.monotonic() + self.wall_s, self.budget_end)

    def _assert_index(self, k: int) -> int:
        """Index among the asserts of the first assert at or after step k (1-based steps)."""
        return sum(s.kind == "eval" for s in self.split.steps[:max(k - 1, 0)])

    def _fail_rest(self, from_step: int, outcome: str, note: str) -> None:
        first = self._assert_index(from_step)
        for i in range(first, len(self.outcomes)):
            if self.outcomes[i] is None:
                self.outcomes[i] = (outcome, note) if i == first else ("no_result", "the run had ended")
        self.finished = True

    def received(self, data: bytes) -> None:
        for line in self.lines.feed(data):
            if not self.finished:
                self._frame(parse_frame(line))
        if self.lines.overflow and not self.finished:
            self._fail_rest(max(self.k, 1), "output_limit", "a result too large")

    def _frame(self, frame: list | None) -> None:
        k = self.k
        if frame is None or frame[0] != k or len(frame) < 2:  # only the program could write it
            return self._fail_rest(max(k, 1), "tampering", f"forged_result: frame {str(frame)[:80]}")
        what = frame[1]
        step = self.split.steps[k - 1] if k else None
        where = step.source if step else "the program"
        if what == "limit":
            return self._fail_rest(max(k, 1), "cpu_limit", f"{where}: CPU limit")
        if step is None or step.kind == "exec":
            if what != "done":  # the import or a setup statement failed: what follows cannot run
                outcome, note = _error_outcome(frame[2:]) if what == "error" else ("wrong", "malformed")
                return self._fail_rest(max(k, 1), outcome, f"{where}: {note}"[:300])
        elif what == "opaque" and step.check.kind == "method" and not self.method_sent:
            # not a plain value: its own method answers, inside (the literals go in only now)
            name, args, kwargs, _ = step.check.expected
            self.method_sent = True
            self.outgoing += message({"method": (name, args, kwargs)})
            self.deadline = min(time.monotonic() + self.wall_s, self.budget_end)
            return None
        else:
            outcome, note = self._judge(step, frame)
            self.outcomes[self._assert_index(k)] = (outcome, note)
            if outcome != "correct" and self.stop_early:
                return self._fail_rest(k + 1, "no_result", "not run: an earlier assert failed")
        self._advance()

    def _judge(self, step, frame: list) -> tuple[str, str]:
        if frame[1] == "error":  # the assert's call raised (fraction mode goes on to the next)
            outcome, note = _error_outcome(frame[2:])
            return outcome, f"{step.source}: {note}"[:300]
        if frame[1] == "refused":  # its own __eq__ would judge it: the program grading itself
            return "tampering", f"opaque_value: {step.source}: not a plain value ({str(frame[2:])[:200]})"
        if frame[1] != "ok" or len(frame) != 3:
            return "wrong", f"{step.source}: malformed result"
        try:
            value = decode(frame[2])
        except Exception:  # noqa: BLE001 - whatever arrived is not a plain value: not an answer
            return "wrong", f"{step.source}: undecodable result"
        check = step.check
        if self.method_sent:  # the method's own result came back: its truth is the answer
            check = Check("truthy" if check.expected[3] else "falsy")
        if matches(value, check):
            return "correct", ""
        return "wrong", f"{step.source}: got {value!r}"[:300]

    def _advance(self) -> None:
        self.k += 1
        if self.k > len(self.split.steps):
            self.outgoing += message(None)
            self.finished = True
            return
        step = self.split.steps[self.k - 1]
        self.lines.cap = _FRAME_MIN + (8 * len(repr(step.check.expected)) if step.check else 0)
        self.method_sent = False
        if step.kind == "exec":
            self.outgoing += message({"exec": step.code})
        else:
            keep = {"keep": True} if step.check.kind == "method" else {}
            self.outgoing += message({"eval": step.code, **keep})
        self.deadline = min(time.monotonic() + self.wall_s, self.budget_end)

    def ended(self, status: str | None) -> None:
        if self.finished:
            return
        if status == "timeout":
            outcome = "budget" if time.monotonic() >= self.budget_end else "timeout"
        else:
            outcome = _NO_RESULT.get(status, status or "no_result")
        where = self.split.steps[self.k - 1].source if self.k else "the program's import"
        if status == "ok":  # exit status 0 with an answer outstanding: the program ended the run
            return self._fail_rest(max(self.k, 1), "tampering", f"ended_early: {where}: no result")
        self._fail_rest(max(self.k, 1), outcome, f"{where}: no result ({status})")


class CheckDialog(Dialog):
    """One unsplittable source, run by the checker: `outcome` once known."""

    def __init__(self, test: str, entries: tuple[str, ...], *, wall_s: float, cpu_s: float,
                 budget_end: float):
        self.secret = secrets.token_hex(16)
        self.hello = {"entries": list(entries), "wall_s": wall_s, "cpu_s": cpu_s}
        self.spec = {"test": test, "secret": self.secret}
        self.budget_end = budget_end
        self.restart()

    def restart(self) -> None:
        self.outgoing = bytearray(message(self.hello) + message(self.spec))
        self.outcome, self.finished, self.lines = None, False, _Lines()
        self.deadline = self.budget_end

    def received(self, data: bytes) -> None:
        lines = self.lines.feed(data)
        if lines and not self.finished:
            one = len(lines) == 1 and not self.lines.buf
            self.outcome = self._judge(parse_frame(lines[0]) if one else None)
            self.finished = True

    def _judge(self, frame: list | None) -> tuple[str, str]:
        if frame is None:
            return "tampering", "forged_result: checked test: malformed result"
        if frame[0] == "pass":
            if frame == ["pass", self.secret, frame[-1]] and isinstance(frame[-1], int) and frame[-1] >= 1:
                return "correct", ""
            return "tampering", "forged_result: a pass without the run's secret"
        if frame == ["pass", self.secret, frame[-1]] and isinstance(frame[-1], int) and frame[-1] >= 1:
            return "correct", ""
        if frame[0] == "tamper":  # [tamper, code, what]
            return "tampering", f"{frame[1]}: {' '.join(str(x) for x in frame[2:])}"[:300]
        if frame[0] == "noassert":
            return "wrong", "checked test: the test executed no assert"
        if frame[0] == "error" and len(frame) >= 2 and frame[1] in ("Timeout", "CpuLimit"):
            return ("timeout" if frame[1] == "Timeout" else "cpu_limit"), f"checked test: {frame[1]}"
        if frame[0] == "error":
            return _error_outcome(frame[1:])
        return "wrong", " ".join(str(x) for x in frame[1:])[:300]

    def ended(self, status: str | None) -> None:
        if self.outcome is None:
            if status == "timeout":
                outcome = "budget" if time.monotonic() >= self.budget_end else "timeout"
            else:
                outcome = _NO_RESULT.get(status, status or "no_result")
            if status == "ok":
                outcome, status = "tampering", "ended_early"
            self.outcome = (outcome, f"checked test: no result ({status})" if outcome != "tampering"
                            else "ended_early: checked test: no result")


def _harness_limits(limits: sandbox.SandboxLimits, budget_end: float) -> sandbox.SandboxLimits:
    """The run's own limits: the whole budget on the wall clock and as each process's hard CPU
    limit; the per-step limits are the dialog's (wall) and the harness's (CPU)."""
    left = max(budget_end - time.monotonic(), 0.05)
    return sandbox.SandboxLimits(cpu_s=math.ceil(left) + 1, wall_s=left, memory_mb=limits.memory_mb,
                                 nproc=limits.nproc, fsize_mb=limits.fsize_mb, nofile=limits.nofile,
                                 output_bytes=limits.output_bytes, stderr_bytes=limits.stderr_bytes,
                                 tmpfs_mb=limits.tmpfs_mb)


def run_steps(program: str, split: SplitSource, limits, binds, *, budget_end: float,
              stop_early: bool) -> tuple[list[tuple[str, str]], sandbox.RunResult]:
    """(outcome, note) of each assert of a split source (correct | wrong | runtime_error |
    no_result | timeout | budget | cpu_limit | memory | ...), and the run."""
    dialog = StepDialog(split, wall_s=limits.wall_s, cpu_s=limits.cpu_s, budget_end=budget_end,
                        stop_early=stop_early)
    r = sandbox.run_program(program, "", _harness_limits(limits, budget_end), extra_binds=binds,
                            harness=("steps", dialog))
    if r.status == "sandbox_error":
        return [("sandbox_error", r.stderr_tail[-300:])] * split.asserts, r
    return [o or ("no_result", "") for o in dialog.outcomes], r


def run_checked(program: str, test: str, entries: tuple[str, ...], limits, binds, *,
                budget_end: float) -> tuple[str, str, sandbox.RunResult]:
    """(outcome, note, run) of one unsplittable source, run by the in-sandbox checker."""
    dialog = CheckDialog(test, entries, wall_s=limits.wall_s, cpu_s=limits.cpu_s, budget_end=budget_end)
    r = sandbox.run_program(program, "", _harness_limits(limits, budget_end), extra_binds=binds,
                            harness=("check", dialog))
    if r.status == "sandbox_error":
        return "sandbox_error", r.stderr_tail[-300:], r
    return (*dialog.outcome, r)
