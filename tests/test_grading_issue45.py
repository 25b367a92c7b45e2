"""Issue 45: code grading that is right both ways.

Every class of the issue, with programs written for this file: a wrong program scores 0 and the
honest program of the same task 1, through `rewards.score_result`, as root and as a non-root user
(root creates one; the same runner, `python -m tests.test_grading_issue45`, runs as both). Classes:
unrecognised assert forms (against an always-equal object, a program that replaces `builtins.eval`
without defining the function, and one that patches every builtin a comparison could use), checker
tests that would execute no assert, state and constants between asserts, StopIteration, the
prompt's helpers, entry points named like builtins; return values of subclass and stdlib types,
state, class-design, generators, module constants, big ints, `from solution import`; many asserts
and slow imports; output caps; process and thread pools; numpy; extraction, float output, a
Latin-1 coding declaration. The unit tests at the end check the splitter, the value encoding and
the checker's source without a sandbox.

The programs are in tests/grading_programs/issue45.py. Expected scores are the task's own truth
(the honest program is right on every case, the wrong one is not), never values read back from the
grader.
"""

from __future__ import annotations

import ast
import json
import os
import sys

import pytest

from tests.contract import run_both, violations
from tests.grading_programs.issue45 import (
    AREA,
    CHECK_UNCALLED,
    FORMS,
    NO_ASSERT,
    ROT_HONEST,
    ROT_PROMPT,
    ROT_WRONG,
    cases,
)
from tests.sandbox_utils import run_runner, system_user
from tseeds_jax.rewards import assert_split, checker_source, code_reward, extract, grading, sandbox_harness


def run_all(ctx: dict) -> dict:
    from tseeds_jax import rewards
    from tseeds_jax.rewards import _pool

    picked = [c for c in cases() if not ctx.get("only") or c[0] in ctx["only"]]
    # each program through the grader and the plain judge (tests/contract.py)
    out = {"uid": os.getuid(), "scores": run_both(picked)}
    # the same honest numpy program without the package: hidden, as documented (an error, not a pass)
    norm = "import numpy as np\ndef norm(v):\n    return float(np.linalg.norm(v))\n"
    r = rewards.score_result("code", norm, {"asserts": "assert abs(norm([3, 4]) - 5.0) < 1e-9"})
    out["numpy_hidden"] = [r.score, r.reason, r.details.get("stderr_tail", "")[-200:]]
    # a check() nobody calls and no entry point: nothing can be graded, whatever the program
    r = rewards.score_result("code", AREA, {"asserts": CHECK_UNCALLED})
    out["check_uncalled"] = [r.score, r.reason, r.details.get("stderr_tail", "")[-200:]]
    _pool.restart_shared(None)
    return out


def _check(out: dict) -> None:
    bad = violations(cases(), out["scores"])
    assert not bad, bad
    assert out["numpy_hidden"][:2] == [0.0, "runtime_error"] and "numpy" in out["numpy_hidden"][2], out
    assert out["check_uncalled"][:2] == [0.0, "wrong"] and "no assert" in out["check_uncalled"][2], out


@pytest.fixture(scope="module")
def user():
    if os.geteuid() != 0:
        yield None  # this user is the non-root trainer
        return
    with system_user(f"tsgf{os.getpid() % 100000}") as pw:
        yield pw


@pytest.mark.skipif(os.geteuid() != 0, reason="the root trainer's run needs root")
def test_issue45_classes_as_root():
    out = run_runner("tests.test_grading_issue45", {}, timeout=600)
    assert out["uid"] == 0
    _check(out)


def test_issue45_classes_as_non_root(user):
    out = run_runner("tests.test_grading_issue45", {}, user, timeout=600)
    assert out["uid"] != 0
    _check(out)


# --- the splitter, the value encoding, the checker's source and extraction, without a sandbox ---


def test_unrecognised_forms_are_never_split():
    for src in FORMS.values():
        with pytest.raises(assert_split.Unsplittable):
            assert_split.split(src)
    for src in ("x = area(2, 3) - 6\nassert x == 0", "ok = area(2, 3) == 6\nassert ok",
                "assert all([area(1, 1)])", "assert np.allclose(area(2, 3), 6)",
                "assert isinstance(area(2, 3), int)", "import numpy as np\nassert np.isclose(area(2, 3), 6)",
                "assert f(1) == f(2)", "assert max(f(1), 5) - 1 == 4"):
        with pytest.raises(assert_split.Unsplittable):
            assert_split.split(src)
    # found by the held-out set: a builtin that calls a function of the program (StopIteration would
    # end its loop: the checker's proxies apply PEP 479's rule)
    for src in ("assert list(filter(is_pal, ['ab'])) == []", "assert sum(map(f, [1, 2])) == 3",
                "import itertools\nassert list(itertools.takewhile(f, [1, 2])) == [1]"):
        with pytest.raises(assert_split.Unsplittable, match="may call it"):
            assert_split.split(src)
    # ... and a truth-value assert of the value's own method: the value comes back, the method runs
    # outside (the literal never enters); a mutating one runs inside
    (step,) = assert_split.split("assert fib(10).__eq__(55)").steps
    assert (step.code, step.check.kind) == ("fib(10)", "method")
    assert step.check.expected == ("__eq__", (55,), {}, True)
    (step,) = assert_split.split("assert not name().startswith('x', 1)").steps
    assert step.check.expected == ("startswith", ("x", 1), {}, False)
    steps = assert_split.split("s = [1]\nassert s.pop()\nassert s == []").steps
    assert [(s.code, s.check.kind if s.check else None) for s in steps] == [
        ("s = [1]", None), ("s.pop()", "truthy"), ("s", "eq")]
    assert grading.matches(0, assert_split.Check("method", ("__eq__", (55,), {}, True))) is False
    assert grading.matches("abc", assert_split.Check("method", ("startswith", ("a",), {}, True)))
    assert not grading.matches([1], assert_split.Check("method", ("no_such", (), {}, True)))
    # what is split: the program's value, read by builtins at most, compared outside
    steps = assert_split.split("assert sorted(f(1)) == [1, 2]\nassert len(f(2)) >= 3\n"
                               "assert round(g(1), 2) == 0.5\nassert 3 in f(3)\nassert f(4) not in [1, 2]\n"
                               "assert s.pop() is None\n").steps
    assert [(s.code, s.check.kind, s.check.expected) for s in steps] == [
        ("sorted(f(1))", "eq", [1, 2]), ("len(f(2))", "ge", 3), ("round(g(1), 2)", "eq", 0.5),
        ("f(3)", "contains", 3), ("f(4)", "not_in", [1, 2]), ("s.pop()", "is", None)]


def test_split_runs_in_source_order_and_sends_an_expected_name_only_when_read():
    def plan(src):
        steps = assert_split.split(src).steps
        return [(s.kind, s.code, s.check.expected if s.check else None) for s in steps]

    assert plan("E = 4\nassert sq(2) == E\nE = 9\nassert sq(3) == E") == [
        ("eval", "sq(2)", 4), ("eval", "sq(3)", 9)]  # each assert its value at its place; never sent
    assert plan("B = [3, 2, 1]\nassert rev([1, 2, 3]) == B\nassert rev(B) == [1, 2, 3]") == [
        ("eval", "rev([1, 2, 3])", [3, 2, 1]), ("exec", "B = [3, 2, 1]", None), ("eval", "rev(B)", [1, 2, 3])]
    assert plan("x = [1, 2]\nassert total(x) == 3\nx = [5]\nassert total(x) == 5") == [
        ("exec", "x = [1, 2]", None), ("eval", "total(x)", 3), ("exec", "x = [5]", None),
        ("eval", "total(x)", 5)]
    assert plan("s = Stack()\ns.push(1)\nassert s.pop() == 1") == [
        ("exec", "s = Stack()", None), ("exec", "s.push(1)", None), ("eval", "s.pop()", 1)]
    with pytest.raises(assert_split.Unsplittable):  # A is sent in, then an expected value
        assert_split.split("A = [1, 2, 3]\nB = [3, 2, 1]\nassert rev(A) == B\nassert rev(B) == A")
    # a main guard and check(NAME) inlined; an uncalled check() needs the entry point
    sp = assert_split.split("def check(candidate):\n    assert candidate(1) == 2\n\n"
                            "if __name__ == '__main__':\n    check(inc)\n")
    assert [s.code for s in sp.steps] == ["inc(1)"] and sp.entries == ("inc",)
    assert [s.code for s in assert_split.split(CHECK_UNCALLED, "area").steps] == ["area(2, 3)", "area(1, 5)"]
    with pytest.raises(assert_split.Unsplittable):
        assert_split.split(CHECK_UNCALLED)
    assert assert_split.split("assert sorted([3, 1]) == [1, 3]").entries == ("sorted",)
    assert assert_split.split("assert sorted(f([3, 1])) == [1, 3]").entries == ()
    with pytest.raises(assert_split.Unsplittable, match="helper"):
        assert_split.split("assert unrot3(rot3('a')) == 'a'", "unrot3", frozenset({"rot3"}))


def test_values_are_read_through_their_base_types():
    import collections
    import decimal
    import enum
    import fractions

    def roundtrip(v):
        return sandbox_harness.decode(ast.literal_eval(repr(sandbox_harness.encode(v))))

    class Color(enum.IntEnum):
        RED = 1

    class Yes(int):
        def __eq__(self, other):
            return True

    class LyingDict(dict):
        def __eq__(self, other):
            return True

        def items(self):
            return [("forged", 1)]

    point = collections.namedtuple("P", "x y")(1, 2)
    got = roundtrip([collections.Counter("aab"), collections.defaultdict(list, a=[1]),
                     collections.OrderedDict(b=2), point, Color.RED, fractions.Fraction(1, 3),
                     decimal.Decimal("0.30"), 1 << 20000, float("inf"), -0.0, b"\x00", bytearray(b"ab"),
                     {"k": 1}.keys(), {"k": 1}.items(), {1: 2}.values(), Yes(0), LyingDict(a=1), 3 + 4j,
                     frozenset({1})])
    assert type(got[0]) is collections.Counter and got[0] == {"a": 2, "b": 1} and got[0]["z"] == 0
    assert type(got[1]) is dict and got[1] == {"a": [1]}
    # issue 54 (W8): an OrderedDict keeps its order, which its equality reads
    assert type(got[2]) is collections.OrderedDict and got[2] == collections.OrderedDict(b=2)
    assert type(got[3]) is tuple and got[3] == (1, 2) and type(got[4]) is int and got[4] == 1
    assert got[5] == fractions.Fraction(1, 3) and type(got[5]) is fractions.Fraction
    assert got[6] == decimal.Decimal("0.30") and str(got[6]) == "0.30"
    assert got[7] == 1 << 20000 and got[8] == float("inf") and str(got[9]) == "-0.0"
    assert got[10] == b"\x00" and type(got[11]) is bytearray and got[12] == {"k"} and got[13] == {("k", 1)}
    assert got[14] != [2] and list(got[14]) == [2]  # a values view equals nothing but itself, as in Python
    assert type(got[15]) is int and got[15] != 5  # the subclass's __eq__ never decides
    assert got[16] == {"a": 1}  # the base dict's storage, not the subclass's items()
    assert got[17] == 3 + 4j and got[18] == frozenset({1})
    with pytest.raises(TypeError, match="not a plain value"):
        sandbox_harness.encode(object())


def test_outside_comparison_follows_python_on_rebuilt_values():
    import collections
    import decimal
    import fractions

    eq = assert_split.Check("eq", {"a": 2})
    assert grading.matches(collections.Counter(a=2), eq) and not grading.matches(collections.Counter(a=1), eq)
    assert grading.matches(fractions.Fraction(1, 2), assert_split.Check("eq", 0.5))
    assert grading.matches(decimal.Decimal("0.5"), assert_split.Check("eq", 0.5))
    assert not grading.matches(decimal.Decimal("0.1"), assert_split.Check("eq", 0.1))  # exact, as Python
    # Decimal - float raises TypeError in Python: the assert fails
    assert not grading.matches(decimal.Decimal("0.1"), assert_split.Check("abs_lt", 0.1, abs_tol=1))
    assert grading.matches({"k": 1}.keys(), assert_split.Check("eq", {"k"}))
    assert not grading.matches({1: 2}.values(), assert_split.Check("eq", [2]))
    assert grading.matches([1, 2], assert_split.Check("contains", 2))
    assert grading.matches(3, assert_split.Check("in", (1, 3)))
    assert not grading.matches(3, assert_split.Check("lt", 3))
    assert not grading.matches("a", assert_split.Check("lt", 3))  # str < int raises: the assert fails


def test_checker_source_runs_what_would_never_run_and_counts_asserts():
    src, entries = checker_source.prepare(NO_ASSERT["pytest_functions"])
    assert src.rstrip().endswith("test_small()\ntest_unit()") and src.count("__tseeds_asserted__()") == 2
    assert checker_source.prepare(NO_ASSERT["pytest_class"])[0].rstrip().endswith(
        "TestArea().test_small()\nTestArea().test_unit()")
    assert checker_source.prepare(NO_ASSERT["unittest_main"])[0].rstrip().endswith("__tseeds_unittest__()")
    src, entries = checker_source.prepare(CHECK_UNCALLED, "area")
    assert src.rstrip().endswith("check(area)") and entries == ("area",)
    src, entries = checker_source.prepare("for a in range(3):\n    assert f(a) == a\n")
    assert "check(" not in src and entries == ()
    src, _ = checker_source.prepare("def check(candidate):\n    assert candidate(rot3('a')) == 'a'\n",
                                    "unrot3", ROT_PROMPT)
    assert "def rot3" in src and "def unrot3" not in src and src.rstrip().endswith("check(unrot3)")


def test_code_block_picks_the_program_not_a_usage_example():
    assert extract.code_block(f"```python\n{AREA}```\n```python\nprint(area(1, 2))\n```", {"area"}) == AREA
    two = "```python\nimport sys\nprint(sum(map(int, sys.stdin.read().split())))\n```\n" \
          "```python\nprint(3)\n```"
    assert "stdin" in extract.code_block(two, stdin=True)
    assert extract.code_block(two) == "print(3)\n"  # no names, not stdin: the last block
    assert extract.code_block("```python\nx = 1\n```\n```python\n$ python main.py\n```") == "x = 1\n"
    assert extract.code_block("no fence: x = 1") == "no fence: x = 1"


def test_float_tolerance_of_outputs_and_bad_reference_fields():
    assert code_reward.same_output("0.3333333333\n", "0.333333333", 1e-6)
    assert not code_reward.same_output("0.3333333333\n", "0.333333333")  # exact tokens without it
    assert code_reward.same_output("1000000.5 x", "1000000.0 x", 1e-6)  # relative to the expected
    assert not code_reward.same_output("0.34", "0.333333333", 1e-6)
    assert not code_reward.same_output("a", "b", 1)
    for ref, field in (({"stdin_stdout": [["", "1"]], "float_tol": -1}, "float_tol"),
                       ({"asserts": "assert f() == 1", "entry_point": "1x"}, "entry_point"),
                       ({"asserts": "assert f() == 1", "helpers": 3}, "helpers"),
                       ({"asserts": "assert f() == 1", "packages": "numpy"}, "packages"),
                       ({"asserts": "assert f() == 1", "packages": ["no_such_tseeds"]}, "no_such_tseeds")):
        res = code_reward.code_score("def f():\n    return 1\n", ref)
        assert res.reason == "invalid_input" and field in res.details["error"], (ref, res)


def test_a_humaneval_record_from_the_loader_gives_the_test_its_helpers():
    from tseeds_jax import rewards
    from tseeds_jax.data import formats
    from tseeds_jax.data.formats import DataFormatError

    record = {"task_id": "T/1", "prompt": ROT_PROMPT, "entry_point": "unrot3",
              "test": "def check(candidate):\n    for s in ['ab', 'xyz']:\n"
                      "        assert candidate(rot3(s)) == s\n"}
    ref = formats.normalize("code", record, "tasks.jsonl", 1, "he")["reference"]
    assert ref["entry_point"] == "unrot3" and ref["helpers"] == ROT_PROMPT
    assert rewards.score("code", ROT_HONEST, ref) == 1.0
    assert rewards.score("code", ROT_WRONG, ref) == 0.0  # its own rot3 is not the test's
    with pytest.raises(DataFormatError, match="entry_point"):  # nothing would call check()
        formats.normalize("code", {**record, "entry_point": None}, "tasks.jsonl", 2, "he")


if __name__ == "__main__":
    print(json.dumps(run_all(json.loads(sys.argv[1]))))
