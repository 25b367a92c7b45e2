"""The "code" reward: run the response's program against unit tests in the sandbox.

Reference (a dict): "stdin_stdout" — a list of [input, expected_output] pairs (one test each; the
program runs as __main__; outputs compared whitespace-normalised: per line, runs of whitespace
collapsed and ends stripped; blank lines at the start/end ignored; with "float_tol" = t, output
tokens that both read as numbers match when |got - want| <= t * max(1, |want|)) — and/or "asserts"
— Python test source (a str, or a list of str), optionally with "entry_point" (the function under
test: HumanEval's `check(candidate)` is called with it when the source does not call it) and
"helpers" (HumanEval's prompt: the test's own copy of the helpers it calls); "packages": names of
installed packages the program may import (e.g. ["numpy"]; bound read-only into the sandbox).

Program: of the response's ```python blocks, the last that defines a name the tests call (else,
for stdin tasks, the last that reads stdin; else the last that parses), or the whole text
(`extract.code_block`). Each assert source is one sandbox run: split (`assert_split`) into steps
run in order in the program's namespace, one test per assert, expected values compared here
(`grading`); a source that cannot be split is one test, run by the in-sandbox checker. Exit
statuses prove nothing: an assert passes only when its own result arrived and matched. Limits
(`cpu_s`, `wall_s`) hold for each test: each stdin/stdout run, each assert's step, each call the
checker makes. Score: `mode="all"` (default) gives 1 only if every test passes, else 0, and stops
at the first failure (the all-or-nothing code reward of the paper); `mode="fraction"` gives passed
/ total. `extra_binds`: host paths the program may read (read-only, added to those of
`sandbox.configure`); `packages`: as in the reference. Reason: "correct", or the first failing
test's outcome ("wrong", "no_result" (the program ended or was ended before its result came back),
"runtime_error", "timeout", "cpu_limit", "memory", "output_limit", "killed", "sandbox_error": the
sandbox failed or refused to grade — `details["sandbox_error"]` names the setup step, the OS error
and the missing isolation `layer`), or "invalid_input" / "budget" (total time budget `max_total_s`
exhausted).
"""

from __future__ import annotations

import dataclasses
import math
import time

import tseeds_jax.rewards.checker_source as checker_source
import tseeds_jax.rewards.grading as grading
from tseeds_jax.rewards.assert_split import Unsplittable, split
from tseeds_jax.rewards.extract import code_block
from tseeds_jax.rewards.registry import RewardResult, register
from tseeds_jax.rewards.sandbox import SandboxLimits, configured_binds, package_binds, run_program

MODES = ("all", "fraction")


def normalize_output(text: str) -> list[str]:
    lines = [" ".join(line.split()) for line in text.replace("\r\n", "\n").split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    while lines and not lines[0]:
        lines.pop(0)
    return lines


def _number(token: str) -> float | None:
    try:
        x = float(token)
    except ValueError:
        return None
    return x if math.isfinite(x) else None


def same_output(got: str, want: str, float_tol: float | None = None, *, compare: str = "lines",
                ignore_case: bool = False) -> bool:
    """Whitespace-normalised equality; with `float_tol`, numeric tokens within tolerance;
    `compare="tokens"`: the whole output as one sequence of tokens (line breaks are whitespace);
    `ignore_case`: letters compared case-folded ("YES" == "yes")."""
    if ignore_case:
        got, want = got.lower(), want.lower()
    if compare == "tokens":
        got, want = " ".join(got.split()), " ".join(want.split())
    a, b = normalize_output(got), normalize_output(want)
    if a == b or float_tol is None or len(a) != len(b):
        return a == b
    for la, lb in zip(a, b):
        ta, tb = la.split(" "), lb.split(" ")
        if len(ta) != len(tb):
            return False
        for x, y in zip(ta, tb):
            if x != y:
                fx, fy = _number(x), _number(y)
                if fx is None or fy is None or abs(fx - fy) > float_tol * max(1.0, abs(fy)):
                    return False
    return True


def _str_field(reference: dict, key: str) -> str | None:
    v = reference.get(key)
    if v is not None and not (isinstance(v, str) and v.strip()):
        raise ValueError(f"reference[{key!r}] must be a non-empty str, got {v!r}"[:200])
    return v


def _tests(reference) -> tuple[list[tuple], dict]:
    """([("io", stdin, expected) | ("steps", SplitSource) | ("check", source, entries)], facts);
    ValueError naming the field for a malformed reference."""
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
    entry, helpers = _str_field(reference, "entry_point"), _str_field(reference, "helpers")
    if entry is not None and not entry.isidentifier():
        raise ValueError(f"reference['entry_point'] must be a Python name, got {entry!r}"[:200])
    tol = reference.get("float_tol")
    if tol is not None and (isinstance(tol, bool) or not isinstance(tol, (int, float))
                            or not 0 <= tol < math.inf):
        raise ValueError(f"reference['float_tol'] must be a finite number >= 0, got {tol!r}"[:200])
    compare, ignore_case = reference.get("compare", "lines"), reference.get("ignore_case", False)
    if compare not in ("lines", "tokens") or not isinstance(ignore_case, bool):
        raise ValueError(f"reference['compare'] must be 'lines' or 'tokens' and reference['ignore_case'] a "
                         f"bool, got {compare!r}, {ignore_case!r}"[:200])
    names: set[str] = {entry} if entry else set()
    asserts = reference.get("asserts")
    if asserts:
        srcs = [asserts] if isinstance(asserts, str) else asserts
        if not isinstance(srcs, (list, tuple)) or not all(isinstance(s, str) for s in srcs):
            raise ValueError("reference['asserts'] must be a str or a list of str")
        helper_names = checker_source.helper_names(helpers, entry)
        for src in srcs:
            names |= checker_source.program_names(src, entry)
            try:
                tests.append(("steps", split(src, entry, helper_names)))
            except Unsplittable:
                tests.append(("check", *checker_source.prepare(src, entry, helpers)))
    if not tests:
        raise ValueError("reference has no tests ('stdin_stdout' and 'asserts' both empty)")
    packages = reference.get("packages") or []
    return tests, {"names": names, "float_tol": tol, "packages": packages, "helpers": helpers,
                   "entry": entry, "compare": compare, "ignore_case": ignore_case}


def _weight(test: tuple) -> int:
    return test[1].asserts if test[0] == "steps" else 1


_STATUS_REASON = {"exit_nonzero": "runtime_error", "ok": "wrong"}


def code_score(
    response,
    reference,
    *,
    mode: str = "all",
    cpu_s: float = 2.0,
    wall_s: float = 4.0,
    memory_mb: int = 1024,
    nproc: int = 32,  # a 20-thread pool and the checker fit
    max_total_s: float = 30.0,
    extra_binds: tuple[str, ...] | list[str] = (),
    packages: tuple[str, ...] | list[str] = (),
) -> RewardResult:
    """Grade a program response against `reference` tests. Must run in a single-threaded process."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if not isinstance(response, str):
        return RewardResult(
            0.0, "invalid_input", {"error": f"response must be str, got {type(response).__name__}"}
        )
    try:
        tests, facts = _tests(reference)
        binds = tuple(extra_binds) + configured_binds() + package_binds([*packages, *facts["packages"]])
    except ValueError as e:
        return RewardResult(0.0, "invalid_input", {"error": str(e)})
    limits = SandboxLimits(cpu_s=cpu_s, wall_s=wall_s, memory_mb=memory_mb, nproc=nproc)
    io_only = all(t[0] == "io" for t in tests)
    program = code_block(response, facts["names"], stdin=io_only)
    if facts["helpers"]:  # HumanEval: prompt + completion, as its harness runs them
        program = checker_source.with_prelude(program, facts["helpers"], facts["entry"])
    t0 = time.monotonic()
    budget_end = t0 + max_total_s
    total = sum(_weight(t) for t in tests)
    passed, outcomes, first_fail, isolation, sandbox = 0, [], None, None, None
    for test in tests:
        if time.monotonic() + (wall_s if test[0] == "io" else 0.05) > budget_end:
            results, r = [("budget", "")] * _weight(test), None
        elif test[0] == "io":
            # a correct output may be long: the cap grows with the expected one
            cap = max(limits.output_bytes, 4 * len(test[2].encode()) + (1 << 16))
            io_limits = dataclasses.replace(limits, output_bytes=cap)
            r = run_program(program, test[1], io_limits, extra_binds=binds)
            ok = r.status == "ok" and same_output(r.stdout, test[2], facts["float_tol"],
                                                  compare=facts["compare"], ignore_case=facts["ignore_case"])
            results = [("correct" if ok else _STATUS_REASON.get(r.status, r.status), r.stderr_tail[-300:])]
        elif test[0] == "steps":
            results, r = grading.run_steps(program, test[1], limits, binds, budget_end=budget_end,
                                           stop_early=mode == "all")
        else:
            outcome, note, r = grading.run_checked(program, test[1], test[2], limits, binds,
                                                   budget_end=budget_end)
            results = [(outcome, note)]
        if r is not None:
            isolation = r.isolation
        for outcome, note in results:
            outcomes.append(outcome)
            if outcome == "correct":
                passed += 1
                continue
            first_fail = first_fail or (outcome, note)
            if outcome == "sandbox_error" and sandbox is None:
                sandbox = r.error  # which setup step failed, and the OS error
            if mode == "all":
                break
        if first_fail is not None and mode == "all":
            break
    details = {"passed": passed, "total": total, "outcomes": outcomes, "isolation": isolation}
    if first_fail is None:
        return RewardResult(1.0, "correct", details)
    details["stderr_tail"] = first_fail[1]
    if first_fail[0] == "tampering":
        details["tampering"] = first_fail[1].split(":", 1)[0]
    if sandbox is not None:
        details["sandbox_error"] = sandbox
    s = passed / total if mode == "fraction" else 0.0
    return RewardResult(s, first_fail[0], details)


def _hard_timeout(reference, options) -> float:
    """The worker's deadline: stdin/stdout tests take at most a wall limit each; an assert source
    may use the whole budget (its steps and calls each have their own limit)."""
    wall, total = float(options.get("wall_s", 4.0)), float(options.get("max_total_s", 30.0))
    try:
        tests = _tests(reference)[0]
    except ValueError:
        tests = []
    if any(t[0] != "io" for t in tests):
        return total + wall + 12.0
    return min(max(len(tests), 1) * (wall + 2.0), total + wall + 2.0) + 10.0


@register("code", isolation="process", hard_timeout_s=_hard_timeout)
def _code_reward(response, reference, **options) -> RewardResult:
    return code_score(response, reference, **options)
