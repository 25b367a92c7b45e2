"""Issue 45's held-out set: programs written after the grader, apart from the issue's own tests
(tests/grading_programs/heldout.py: other tasks, other spellings of each class). A wrong program
rewarded or an honest one refused here reopens issue 45. As root and as a non-root user."""

from __future__ import annotations

import json
import os
import sys

import pytest

from tests.grading_programs.heldout import cases
from tests.sandbox_utils import run_runner, system_user


def run_all(ctx: dict) -> dict:
    from tseeds_jax import rewards
    from tseeds_jax.rewards import _pool

    out = {"uid": os.getuid(), "scores": {}}
    for opts in ({}, {"wall_s": 1.0}):  # grouped by reward options
        picked = [c for c in cases() if c[3] == opts]
        res = rewards.score_batch("code", [c[1] for c in picked], [c[2] for c in picked], max_workers=2,
                                  **opts)
        out["scores"].update({c[0]: [r.score, r.reason, r.details.get("stderr_tail", "")[-200:]]
                              for c, r in zip(picked, res)})
    _pool.restart_shared(None)
    return out


def _check(out: dict) -> None:
    assert len(out["scores"]) == len(cases())
    bad = {name: out["scores"][name] for name, *_, want in cases() if out["scores"][name][0] != want}
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
