"""Issue 45's held-out set: programs written after the grader, apart from the issue's own tests
(tests/grading_programs/heldout.py: other tasks, other spellings of each class). A wrong program
rewarded or an honest one refused here reopens issue 45. Each program also runs through the plain
judge: every disagreement must be allowed by the contract (tests/contract.py). As root and as a
non-root user."""

from __future__ import annotations

import json
import os
import sys

import pytest

from tests.contract import run_both, violations
from tests.grading_programs.heldout import cases
from tests.sandbox_utils import run_runner, system_user


def run_all(ctx: dict) -> dict:
    from tseeds_jax.rewards import _pool

    # each program through the grader and the plain judge (tests/contract.py)
    out = {"uid": os.getuid(), "scores": run_both(cases())}
    _pool.restart_shared(None)
    return out


def _check(out: dict) -> None:
    assert len(out["scores"]) == len(cases())
    bad = violations(cases(), out["scores"])
    assert not bad, bad


@pytest.fixture(scope="module")
def user():
    if os.geteuid() != 0:
        yield None  # this user is the non-root trainer
        return
    with system_user(f"tsgh{os.getpid() % 100000}") as pw:
        yield pw


@pytest.mark.skipif(os.geteuid() != 0, reason="the root trainer's run needs root")
def test_heldout_set_as_root():
    out = run_runner("tests.test_grading_heldout", {}, timeout=600)
    assert out["uid"] == 0
    _check(out)


def test_heldout_set_as_non_root(user):
    out = run_runner("tests.test_grading_heldout", {}, user, timeout=600)
    assert out["uid"] != 0
    _check(out)


if __name__ == "__main__":
    print(json.dumps(run_all(json.loads(sys.argv[1]))))
