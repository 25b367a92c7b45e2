"""A `tseeds train` subprocess with partial rollouts in flight, killed by SIGKILL and relaunched,
ends bitwise equal to the uninterrupted run: the pool of interrupted responses (tokens, sampler
and learner log-probs, versions) is saved with every checkpoint (`PartialRollouts.state`, the
loss-family extras beside the seed cache) and restored on resume."""

import json
import os
import signal

import numpy as np
import pytest

from tests import test_preemption_kill as kill

STEPS = 6


def _args(run_dir):
    return [f"--config={kill.ROOT}/configs/tiny_seeds_ratio.py", f"--config.run_dir={run_dir}",
            "--config.progress=False", "--config.model.arch.num_hidden_layers=1",
            "--config.model.arch.hidden_size=32", "--config.model.arch.intermediate_size=64",
            "--config.rollout.max_response_len=20", "--config.seeds.refresh_interval=1",
            "--config.stale.partial_tokens=5", "--config.stale.max_staleness=2",
            f"--config.steps={STEPS}", "--config.checkpoint_every=2",
            "--config.checkpoint_every_minutes=0", "--config.reward=test_parity"]


class Proc(kill.Proc):
    def __init__(self, run_dir, cache_dir):
        real = kill._args
        kill._args = _args  # the base class builds its command line from the module's _args
        try:
            super().__init__(run_dir, cache_dir)
        finally:
            kill._args = real


def _metrics(run_dir):
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        recs = [json.loads(line) for line in f]
    return [{k: v for k, v in r.items() if not k.startswith(kill.TIMING)} for r in recs]


@pytest.mark.slow  # ~60 s: a reference run, a killed run and its relaunch
def test_sigkill_with_partial_rollouts_in_flight_resumes_exactly(tmp_path):
    cache = tmp_path / "jax_cache"
    ref_dir, run_dir = tmp_path / "reference", tmp_path / "run"
    ref = Proc(ref_dir, cache)
    assert ref.finish() == 0, ref.stderr[-3000:]
    want = _metrics(ref_dir)
    assert all(r["partial_responses_in_flight"] > 0 for r in want[1:])  # in flight at saves
    assert max(r["group_staleness_max"] for r in want) == 2

    p = Proc(run_dir, cache)
    # killed while step 3 or 4 runs: after the checkpoint of step 2 was requested
    p.wait_for(lambda: p.metric_lines() >= 3)
    p.wait_for(lambda: kill._latest(run_dir) is not None and kill._latest(run_dir) >= 2)
    os.kill(p.p.pid, signal.SIGKILL)
    p.finish()
    resumed_from = kill._latest(run_dir)
    again = Proc(run_dir, cache)
    assert again.finish() == 0, again.stderr[-3000:]
    assert f"resumed from step {resumed_from}" in again.out
    step, meta, state = kill._final_state(run_dir)
    ref_step, ref_meta, ref_state = kill._final_state(ref_dir)
    assert step == ref_step == STEPS and meta["data"] == ref_meta["data"]
    assert sorted(state) == sorted(ref_state)
    assert any(k.startswith("host-0000.extra.npz/partial/") for k in state)  # the pool is saved
    for k, v in ref_state.items():
        if isinstance(v, np.ndarray):
            np.testing.assert_array_equal(state[k], v, err_msg=k)
        else:
            assert state[k] == v, k
    assert _metrics(run_dir) == want
