"""The "code" reward: run the response's program against unit tests in the sandbox.

Program: the last ```python fenced block of the response, else the whole text. Reference: a dict
with "stdin_stdout" — a list of [input, expected_output] pairs (one test each; the program runs as
__main__; outputs compared whitespace-normalised: per line, runs of whitespace collapsed and ends
stripped; blank lines at the start/end ignored) — and/or "asserts" — Python test source (a str, or a
list of str). Each assert source is split (`assert_split`) into one test per assert: the call runs in
the sandbox, the expected value stays here (`grading`); a source that cannot be split is one test,
run by the in-sandbox checker. Exit statuses prove nothing: an assert test passes only when its own
result arrived and matched. Each test has its own limits. Score: `mode="all"` (default) gives 1 only
if every test passes, else 0, and stops at the first failure (the all-or-nothing code reward of the
paper); `mode="fraction"` gives passed / total. `extra_binds`: host paths the program may read
(read-only, added to those of `sandbox.configure`). Reason: "correct", or the first failing test's
outcome ("wrong", "no_result" (the program ended or was ended before its result came back),
"runtime_error", "timeout", "cpu_limit", "memory", "output_limit", "killed", "sandbox_error": the
sandbox failed or refused to grade — `details["sandbox_error"]` names the setup step, the OS error
and the missing isolation `layer`), or "invalid_input" / "budget" (total time budget `max_total_s`
exhausted).
"""

from __future__ import annotations

import time

import tseeds_jax.rewards.grading as grading
from tseeds_jax.rewards.assert_split import Unsplittable, split
from tseeds_jax.rewards.extract import code_block
from tseeds_jax.rewards.registry import RewardResult, register
from tseeds_jax.rewards.sandbox import SandboxLimits, configured_binds, run_program

MODES = ("all", "fraction")


def normalize_output(text: str) -> list[str]:
    lines = [" ".join(line.split()) for line in text.replace("\r\n", "\n").split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    while lines and not lines[0]:
        lines.pop(0)
    return lines


def _tests(reference) -> list[tuple]:
    """[("io", stdin, expected_stdout) | ("split", setup, SplitTest) | ("check", source)];
    ValueError for a malformed reference."""
    if not isinstance(reference, dict):
        raise ValueError(f"reference must be a dict, got {type(reference).__name__}")
    tests: list[tuple] = []
    pairs = reference.get("stdin_stdout") or []
    if not isinstance(pairs, (list, tuple)):
        raise ValueError("reference['stdin_stdout'] must be a list of [input, output] pairs")
    for i, p in enumerate(pairs):
        if not (isinstance(p, (list, tuple)) and len(p) == 2 and all(isinstance(x, str) for x in p)):
            raise ValueError(
                f"reference['stdin_stdout'][{i}] must be [input: str, output: str], got {p!r}"[:200]
            )
        tests.append(("io", p[0], p[1]))
    asserts = reference.get("asserts")
    if asserts:
        srcs = [asserts] if isinstance(asserts, str) else asserts
        if not isinstance(srcs, (list, tuple)) or not all(isinstance(s, str) for s in srcs):
            raise ValueError("reference['asserts'] must be a str or a list of str")
        for src in srcs:
            try:
                setup, split_tests = split(src)
            except Unsplittable:
                tests.append(("check", src))
            else:
                tests += [("split", setup, t) for t in split_tests]
    if not tests:
        raise ValueError("reference has no tests ('stdin_stdout' and 'asserts' both empty)")
    return tests


_STATUS_REASON = {"exit_nonzero": "runtime_error", "ok": "wrong"}


def code_score(
    response,
    reference,
    *,
    mode: str = "all",
    cpu_s: float = 2.0,
    wall_s: float = 4.0,
    memory_mb: int = 1024,
    nproc: int = 16,
    max_total_s: float = 30.0,
    extra_binds: tuple[str, ...] | list[str] = (),
) -> RewardResult:
    """Grade a program response against `reference` tests. Must run in a single-threaded process."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if not isinstance(response, str):
        return RewardResult(
            0.0, "invalid_input", {"error": f"response must be str, got {type(response).__name__}"}
        )
    try:
        tests = _tests(reference)
    except ValueError as e:
        return RewardResult(0.0, "invalid_input", {"error": str(e)})
    limits = SandboxLimits(cpu_s=cpu_s, wall_s=wall_s, memory_mb=memory_mb, nproc=nproc)
    binds = tuple(extra_binds) + configured_binds()
    program = code_block(response)
    t0, passed, outcomes, first_fail, isolation, sandbox = time.monotonic(), 0, [], None, None, None
    for test in tests:
        if time.monotonic() - t0 + wall_s > max_total_s:
            outcome, note = "budget", ""
        elif test[0] == "io":
            r = run_program(program, test[1], limits, extra_binds=binds)
            ok = r.status == "ok" and normalize_output(r.stdout) == normalize_output(test[2])
            outcome = "correct" if ok else _STATUS_REASON.get(r.status, r.status)
            note = r.stderr_tail[-300:]
        elif test[0] == "split":
            outcome, note, r = grading.run_split(program, test[1], test[2], limits, binds)
        else:
            outcome, note, r = grading.run_checked(program, test[1], limits, binds)
        if outcome != "budget":
            isolation = r.isolation
        outcomes.append(outcome)
        if outcome == "correct":
            passed += 1
        else:
            first_fail = first_fail or (outcome, note)
            if outcome == "sandbox_error" and sandbox is None:
                sandbox = r.error  # which setup step failed, and the OS error
            if mode == "all":
                break
    details = {"passed": passed, "total": len(tests), "outcomes": outcomes, "isolation": isolation}
    if first_fail is None:
        return RewardResult(1.0, "correct", details)
    details["stderr_tail"] = first_fail[1]
    if sandbox is not None:
        details["sandbox_error"] = sandbox
    s = passed / len(tests) if mode == "fraction" else 0.0
    return RewardResult(s, first_fail[0], details)


def _hard_timeout(reference, options) -> float:
    wall, total = float(options.get("wall_s", 4.0)), float(options.get("max_total_s", 30.0))
    try:
        n = len(_tests(reference))
    except ValueError:
        n = 1
    return min(n * (wall + 2.0), total + wall + 2.0) + 10.0


@register("code", isolation="process", hard_timeout_s=_hard_timeout)
def _code_reward(response, reference, **options) -> RewardResult:
    return code_score(response, reference, **options)
