"""`tseeds train` subprocesses stopped by SIGKILL, SIGTERM and SIGINT resume bitwise.

A tiny seeded Thinking Seeds run (refresh every 3 steps, checkpoint every 2, so checkpoints land
inside refresh cycles with seeds cached) is trained once without interruption (the reference),
then again with interruptions and restarts; the final checkpoint (parameters, optimizer state,
seed cache, loss-family state), metrics.jsonl and the TensorBoard events must equal the
reference's bitwise (timing metrics aside). Processes share a JAX compilation cache, which only
skips compile time: the cached executables are the ones a cold start compiles.
"""

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from tests.test_preemption import read_scalars
from tests.xla_env import child_xla_flags

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STEPS = 8
# `tseeds train`'s main, after registering a reward with variance inside groups (the task's own
# reward is ~0 for a random model, which would leave the parameters unchanged) and, with a save
# delay (the first argument, seconds), the observer that announces and holds every checkpoint
# write (tests/checkpoint_hooks.py).
LAUNCH = """
import sys
from tests.checkpoint_hooks import announce_and_wait
from tseeds_jax.rewards.registry import register

announce_and_wait(float(sys.argv.pop(1)))

@register("test_parity", isolation="inline")
def parity(response, reference, **options):
    return float(len(response) % 2)

from tseeds_jax.rl import train_cli
sys.exit(train_cli.main(sys.argv[1:]))
"""
TIMING = ("time_", "tokens_per_second")


def _args(run_dir):
    return [f"--config={ROOT}/configs/tiny_seeds_ratio.py", f"--config.run_dir={run_dir}",
            "--config.progress=False", "--config.model.arch.num_hidden_layers=1",
            "--config.model.arch.hidden_size=32", "--config.model.arch.intermediate_size=64",
            "--config.rollout.max_response_len=20", "--config.seeds.refresh_interval=3",
            f"--config.steps={STEPS}", "--config.checkpoint_every=2",
            "--config.checkpoint_every_minutes=0", "--config.reward=test_parity"]


class Proc:
    """A `tseeds train` subprocess whose stderr lines are collected as they come."""

    def __init__(self, run_dir, cache_dir, save_delay_s: float = 0.0, args=None):
        """args: `tseeds train`'s arguments (default: `_args(run_dir)`)."""
        full = {k: v for k, v in os.environ.items() if not k.startswith(("TSEEDS_", "XLA_"))}
        full.update(JAX_PLATFORMS="cpu", PYTHONPATH=ROOT,
                    XLA_FLAGS=child_xla_flags(devices=1),
                    JAX_COMPILATION_CACHE_DIR=str(cache_dir),
                    JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
                    JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0")
        self.run_dir = run_dir
        self.p = subprocess.Popen([sys.executable, "-c", LAUNCH, str(save_delay_s),
                                   *(args or _args(run_dir))], cwd=ROOT, env=full,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        self.out = ""
        self._t = threading.Thread(target=self._read, daemon=True)
        self._t.start()

    def _read(self):
        for line in self.p.stderr:
            self.lines.append(line)

    def wait_for(self, pred, timeout=240.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if pred():
                return True
            if self.p.poll() is not None:
                assert pred(), f"exited with {self.p.returncode}: {self.stderr[-3000:]}"
                return True
            time.sleep(0.02)
        raise AssertionError(f"timed out; stderr: {''.join(self.lines)[-3000:]}")

    def metric_lines(self):
        return self.lines_in(self.run_dir)

    @staticmethod
    def lines_in(run_dir):
        try:
            with open(os.path.join(run_dir, "metrics.jsonl")) as f:
                return sum(1 for line in f if line.endswith("\n"))
        except FileNotFoundError:
            return 0

    def finish(self, timeout=300):
        # Not communicate(): it would read stderr too, racing the reader thread for the lines.
        # stdout holds a few lines: it cannot fill its pipe while we wait.
        self.p.wait(timeout=timeout)
        self._t.join(timeout=30)
        self.out = self.p.stdout.read()
        return self.p.returncode

    @property
    def stderr(self):
        return "".join(self.lines)


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("jax_cache")


@pytest.fixture(scope="module")
def reference(tmp_path_factory, cache_dir):
    run_dir = tmp_path_factory.mktemp("reference")
    p = Proc(run_dir, cache_dir)
    assert p.finish() == 0, p.stderr[-3000:]
    return run_dir


def _latest(run_dir):
    steps = [int(d) for d in os.listdir(os.path.join(run_dir, "ckpt")) if d.isdigit()]
    return max(steps) if steps else None


def _final_state(run_dir):
    from tseeds_jax import checkpoint

    step = _latest(run_dir)
    tree, meta = checkpoint.Checkpoints(os.path.join(run_dir, "ckpt"), keep_last=None).restore(
        step)
    out = {f"orbax/{i}": np.asarray(x) for i, x in enumerate(
        __import__("jax").tree_util.tree_leaves(tree))}
    seed_dir = os.path.join(run_dir, "seed_cache", str(step))
    for name in sorted(os.listdir(seed_dir)):
        path = os.path.join(seed_dir, name)
        if name.endswith(".npz"):
            with np.load(path) as z:
                out.update({f"{name}/{k}": z[k] for k in z.files})
        else:
            with open(path) as f:
                out[name] = json.load(f)
    return step, meta, out


def _metrics(run_dir):
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        recs = [json.loads(line) for line in f]
    return [{k: v for k, v in r.items() if not k.startswith(TIMING)} for r in recs]


def assert_same_run(run_dir, reference):
    step, meta, state = _final_state(run_dir)
    ref_step, ref_meta, ref_state = _final_state(reference)
    assert step == ref_step == STEPS
    assert meta["data"] == ref_meta["data"]
    assert sorted(state) == sorted(ref_state)
    assert any(k.startswith("seed") or "host-0000" in k for k in state)
    for k, ref in ref_state.items():
        if isinstance(ref, np.ndarray):
            assert state[k].dtype == ref.dtype, k
            np.testing.assert_array_equal(state[k], ref, err_msg=k)  # bitwise
        else:
            assert state[k] == ref, k
    got, want = _metrics(run_dir), _metrics(reference)
    assert [r["step"] for r in got] == list(range(STEPS))  # no step twice, none missing
    assert got == want
    assert any(r["loss"] != 0 for r in want)  # the reference run learns something
    tb, ref_tb = read_scalars(os.path.join(run_dir, "tb")), read_scalars(
        os.path.join(reference, "tb"))
    assert [s for s, _ in tb["loss"]] == list(range(STEPS))
    assert tb["loss"] == ref_tb["loss"] and tb["reward"] == ref_tb["reward"]


# Where the save-delay observer's announcements (TSEEDS_TEST_SAVE ..., stderr) put a kill.
MARKS = {
    # a step's seed-cache files written, its Orbax step not started
    "seed-cache-written": re.compile(r"TSEEDS_TEST_SAVE seed-cache-written step="),
    # a refresh: the behavior snapshot pi_b written to its temporary directory, not committed
    "behavior-uncommitted": re.compile(r"orbax-uncommitted \S*/historical/behavior-\d+\.orbax"),
    # a step's Orbax checkpoint written to its temporary directory, not committed
    "step-uncommitted": re.compile(r"orbax-uncommitted \S*/ckpt/\d+\.orbax-checkpoint-tmp"),
}


@pytest.mark.manual  # ~70 s; CI keeps the SIGKILL-during-async-save, SIGTERM and SIGINT resumes (CI time)
def test_random_sigkills_resume_bitwise(tmp_path, cache_dir, reference):
    """Five SIGKILLs at seeded random moments, three of them inside a checkpoint write (the
    save-delay hook holds each write for 2 s), then a run to the end."""
    rng = np.random.default_rng(15)
    run_dir = tmp_path / "run"
    plans = ["steps", "seed-cache-written", "behavior-uncommitted", "step-uncommitted", "steps"]
    for plan in plans:
        delay = 2.0 if plan != "steps" else 0.0
        # lines the killed attempt left (a resumed run first drops those past its checkpoint)
        latest = _latest(run_dir) if (run_dir / "ckpt").exists() else None
        start = max(Proc.lines_in(run_dir), latest or 0)
        p = Proc(run_dir, cache_dir, save_delay_s=delay)
        if plan == "steps":
            # after a random number of further steps, a random fraction of a second later
            target = min(start + int(rng.integers(1, 3)), STEPS - 1)
            p.wait_for(lambda t=target, p=p: p.metric_lines() >= t)
            time.sleep(float(rng.uniform(0.0, 1.0)))
        else:
            p.wait_for(lambda m=MARKS[plan], p=p: any(m.search(x) for x in p.lines))
            time.sleep(float(rng.uniform(0.1, 1.5)))  # inside the 2 s delay
        assert p.p.poll() is None, f"{plan}: the run ended before the kill:\n{p.stderr[-2000:]}"
        p.p.send_signal(signal.SIGKILL)
        assert p.finish() == -signal.SIGKILL
        if plan == "step-uncommitted":  # the kill left Orbax's temporary step behind
            assert any("orbax-checkpoint-tmp" in d for d in os.listdir(run_dir / "ckpt"))
        if plan == "behavior-uncommitted":
            assert any("orbax-checkpoint-tmp" in d
                       for d in os.listdir(run_dir / "ckpt" / "historical"))
    p = Proc(run_dir, cache_dir)
    assert p.finish() == 0, p.stderr[-3000:]
    assert "resumed from step" in p.out
    assert not any("orbax-checkpoint-tmp" in d for d in os.listdir(run_dir / "ckpt"))
    assert_same_run(run_dir, reference)


@pytest.mark.slow
def test_sigterm_mid_step_checkpoints_exits_75_and_resumes_bitwise(tmp_path, cache_dir, reference):
    run_dir = tmp_path / "run"
    p = Proc(run_dir, cache_dir)
    p.wait_for(lambda: p.metric_lines() >= 3)  # step 3 is under way
    p.p.send_signal(signal.SIGTERM)
    assert p.finish() == 75, p.stderr[-3000:]
    (line,) = [x for x in p.stderr.splitlines() if "checkpoint written at step" in x]
    step = int(line.split("checkpoint written at step ")[1].split()[0])
    assert "SIGTERM" in line and 3 <= step < STEPS
    assert _latest(run_dir) == step
    assert p.metric_lines() == step
    p = Proc(run_dir, cache_dir)
    assert p.finish() == 0, p.stderr[-3000:]
    assert f"resumed from step {step}" in p.out
    assert_same_run(run_dir, reference)


@pytest.mark.slow
def test_sigint_leaves_a_checkpoint_at_the_step_it_reports(tmp_path, cache_dir, reference):
    run_dir = tmp_path / "run"
    p = Proc(run_dir, cache_dir)
    p.wait_for(lambda: p.metric_lines() >= 1)
    p.p.send_signal(signal.SIGINT)
    assert p.finish() == 130, p.stderr[-3000:]
    (line,) = [x for x in p.stderr.splitlines() if "checkpoint written at step" in x]
    step = int(line.split("checkpoint written at step ")[1].split()[0])
    assert line.startswith("interrupted (SIGINT)") and 1 <= step < STEPS
    assert _latest(run_dir) == step and p.metric_lines() == step
    # the checkpoint holds the state that the reference run had after the same steps
    from tseeds_jax import checkpoint

    meta = checkpoint.Checkpoints(os.path.join(run_dir, "ckpt"), keep_last=None).read_meta(step)
    assert meta["step"] == step and meta["tag"] == ""
    assert _metrics(run_dir) == _metrics(reference)[:step]


@pytest.mark.slow
def test_sigkill_during_an_async_save_resumes_from_the_previous_committed_step(
        tmp_path, cache_dir, reference):
    """Asynchronous saves (config.checkpoint_async, on by default): the write of step 4 is held
    in Orbax's background thread (the save-delay hook, 4 s) while training goes on; a SIGKILL
    after the next step leaves step 4 uncommitted, and the run resumes from step 2, bitwise."""
    run_dir = tmp_path / "run"
    p = Proc(run_dir, cache_dir, save_delay_s=4.0)
    mark = re.compile(r"orbax-uncommitted \S*/ckpt/4\.orbax-checkpoint-tmp")
    p.wait_for(lambda: any(mark.search(x) for x in p.lines))
    # the step after the save ran while step 4 was being written
    p.wait_for(lambda: p.metric_lines() >= 5)
    assert p.p.poll() is None, p.stderr[-2000:]
    p.p.send_signal(signal.SIGKILL)
    assert p.finish() == -signal.SIGKILL
    assert _latest(run_dir) == 2, os.listdir(run_dir / "ckpt")
    assert any(d.startswith("4.orbax-checkpoint-tmp") for d in os.listdir(run_dir / "ckpt"))
    p = Proc(run_dir, cache_dir)
    assert p.finish() == 0, p.stderr[-3000:]
    assert "resumed from step 2" in p.out
    assert_same_run(run_dir, reference)
