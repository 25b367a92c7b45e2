"""Asynchronous checkpoints and restore errors, in-process: a save returns while Orbax writes, the
seed cache keeps its commit order, transient read errors are retried and never set a step aside,
data errors still fall back, continuous checkpointing and the preemption notice's window.
(Processes killed during an asynchronous write: tests/test_preemption_kill.py; a notice on two
processes: tests/test_preemption_window.py.)"""

import errno
import json
import os
import signal

import numpy as np
import pytest

from tests.checkpoint_hooks import delay_observer
from tests.test_preemption import _Prompts, _state
from tests.test_preemption import _run as _saved_run
from tseeds_jax import checkpoint
from tseeds_jax.rl.run import preemption
from tseeds_jax.rl.run.hosts import Hosts
from tseeds_jax.rl.run.state_io import (
    CheckpointError,
    CheckpointUnavailableError,
    RunCheckpointer,
    transient_reason,
)
from tseeds_jax.seeds import SeedCache


def _run(tmp_path, steps=(2, 4), **kw):
    ck = _saved_run(tmp_path, steps, **kw)
    ck.finish()
    ck.ckpts.close()  # Orbax's background threads of an asynchronous manager
    return ck


def _listing(tmp_path):
    return sorted(os.path.relpath(os.path.join(d, f), tmp_path)
                  for d, _, files in os.walk(tmp_path) for f in files)


# ------------------------------------------------------------------ error classes


@pytest.mark.parametrize("exc, kind", [
    (MemoryError(), "memory"),
    (TimeoutError("read timed out"), "timeout"),
    (PermissionError(errno.EACCES, "denied"), "auth"),
    (ConnectionResetError(errno.ECONNRESET, "reset by peer"), "I/O"),
    (OSError(errno.EIO, "Input/output error"), "I/O"),
    (OSError(errno.ENOMEM, "Cannot allocate memory"), "memory"),
    (ValueError("UNAVAILABLE: Error reading gs://b/x: HTTP 503"), "UNAVAILABLE"),
    (ValueError("DEADLINE_EXCEEDED: read of chunk"), "DEADLINE_EXCEEDED"),
    (RuntimeError("RESOURCE_EXHAUSTED: Out of memory allocating 4096 bytes"),
     "RESOURCE_EXHAUSTED"),
    (RuntimeError("request failed with HTTP error 503"), "HTTP error 503"),
    (type("RefreshError", (Exception,), {})("token expired"), "RefreshError"),
])
def test_storage_and_machine_errors_are_transient(exc, kind):
    assert transient_reason(exc) == kind
    # wrapped by a library that re-raises with its own type: the cause still counts
    try:
        try:
            raise exc
        except BaseException as inner:
            raise ValueError("Orbax: restore failed") from inner
    except ValueError as outer:
        assert transient_reason(outer) == kind


@pytest.mark.parametrize("exc", [
    FileNotFoundError(errno.ENOENT, "no such file", "/r/seed_cache/4/host-0000.npz"),
    ValueError("/r/ckpt/4: array ['train']['w'] has shape (3, 3) on disk; expected (16, 8)"),
    ValueError("DATA_LOSS: Error reading local file: Unexpected end of data"),
    json.JSONDecodeError("Expecting value", "{", 1),
    KeyError("data"),
])
def test_data_errors_are_not_transient(exc):
    assert transient_reason(exc) is None


def _flaky_restore(monkeypatch, failures):
    """The first `failures` reads of the Orbax step raise an I/O error; later ones read."""
    calls = []
    real = checkpoint.Checkpoints.restore

    def restore(self, step=None, target=None):
        calls.append(step)
        if len(calls) <= failures:
            raise OSError(errno.EIO, "Input/output error", str(self.directory / str(step)))
        return real(self, step, target)

    monkeypatch.setattr(checkpoint.Checkpoints, "restore", restore)
    return calls


def test_transient_error_is_retried_restores_newest_and_moves_nothing(tmp_path, monkeypatch,
                                                                      capsys):
    ck = _run(tmp_path)
    before = _listing(tmp_path)
    sleeps = []
    ck = RunCheckpointer(str(tmp_path), keep_last=3, response_width=4, sleep=sleeps.append,
                         backoff_s=0.5)
    calls = _flaky_restore(monkeypatch, failures=1)
    step, state, cache, data = ck.restore_latest(_state(0))
    assert step == 4 and data == {"pos": 4} and cache.cycle_start == 4
    np.testing.assert_array_equal(np.asarray(state["w"]), _state(4)["w"])
    assert calls == [4, 4] and sleeps == [0.5]
    assert _listing(tmp_path) == before and not (tmp_path / "ckpt" / "corrupt").exists()
    err = capsys.readouterr().err
    assert "attempt 1/4" in err and "Input/output error" in err


def test_persistent_transient_error_fails_clearly_and_moves_nothing(tmp_path, monkeypatch):
    ck = _run(tmp_path)
    before = _listing(tmp_path)
    sleeps = []
    ck = RunCheckpointer(str(tmp_path), keep_last=3, response_width=4, sleep=sleeps.append,
                         retries=3, backoff_s=1.0)
    calls = _flaky_restore(monkeypatch, failures=100)
    with pytest.raises(CheckpointUnavailableError) as e:
        ck.restore_latest(_state(0))
    msg = str(e.value)
    assert str(tmp_path / "ckpt" / "4") in msg and "after 3 attempts" in msg
    assert "nothing was set aside" in msg and "I/O" in msg
    assert calls == [4, 4, 4] and sleeps == [1.0, 2.0]  # exponential backoff
    assert _listing(tmp_path) == before and ck.ckpts.steps() == [2, 4]
    assert isinstance(e.value, CheckpointError)
    with pytest.raises(ValueError, match="retries=0"):
        RunCheckpointer(str(tmp_path), response_width=4, retries=0)


def test_injected_truncation_still_falls_back_after_async_saves(tmp_path, capsys):
    ck = _run(tmp_path, async_save=True)
    step_dir = tmp_path / "ckpt" / "4" / "state" / "d"
    victim = max((step_dir / f for f in os.listdir(step_dir)), key=os.path.getsize)
    with open(victim, "r+b") as f:
        f.truncate(os.path.getsize(victim) // 2)
    sleeps = []
    ck = RunCheckpointer(str(tmp_path), keep_last=3, response_width=4, sleep=sleeps.append)
    step, state, _, _ = ck.restore_latest(_state(0))
    assert step == 2 and sleeps == []  # a data error: no retry
    np.testing.assert_array_equal(np.asarray(state["w"]), _state(2)["w"])
    assert (tmp_path / "ckpt" / "corrupt" / "4").is_dir() and ck.ckpts.steps() == [2]
    assert "WARNING" in capsys.readouterr().err


# --------------------------------------------------------- asynchronous saves, commit order


def test_async_save_returns_before_the_write_commits_and_keeps_commit_order(tmp_path,
                                                                            monkeypatch, capsys):
    monkeypatch.setattr(checkpoint, "WRITE_OBSERVERS", [delay_observer(1.0)])  # writes take >= 1 s
    ck = RunCheckpointer(str(tmp_path), keep_last=1, response_width=4, async_save=True)
    seeds = tmp_path / "seed_cache"
    ck.save(2, _state(2), SeedCache(cycle_start=2), _Prompts(2))
    # the step is being written: not listed yet, its seed cache is already on disk
    assert ck.saving() and ck.ckpts.steps() == []
    assert (seeds / "2" / "host-0000.npz").exists()
    ck.save(4, _state(4), SeedCache(cycle_start=4), _Prompts(4))  # waits for step 2 first
    assert "waited" in capsys.readouterr().err
    assert ck.ckpts.steps() == [2] and ck.saving()
    # step 2 is the only committed step: its seed cache stays while step 4 is written
    assert (seeds / "2" / "host-0000.npz").exists() and (seeds / "4" / "host-0000.npz").exists()
    assert ck.finish("test") >= 0.0 and not ck.saving()
    assert ck.ckpts.steps() == [4] and not (seeds / "2" / "host-0000.npz").exists()
    assert ck.estimate_save_s() >= 1.0  # the background write was timed
    assert ck.restore_latest(_state(0))[0] == 4
    ck.ckpts.close()


def test_async_historical_snapshot_is_written_in_the_background(tmp_path, monkeypatch):
    monkeypatch.setattr(checkpoint, "WRITE_OBSERVERS", [delay_observer(0.5)])
    ck = checkpoint.Checkpoints(tmp_path / "ck", async_save=True)
    ck.save_historical("behavior-00000003", _state(3), {"step": 3})
    assert ck.historical_names() == []  # still being written: not listed
    assert ck.wait() > 0.0
    assert ck.historical_names() == ["behavior-00000003"]
    tree, meta = ck.restore_historical("behavior-00000003", target=_state(0))
    np.testing.assert_array_equal(tree["w"], _state(3)["w"])
    assert meta == {"step": 3} and int(tree["n"]) == 3
    with pytest.raises(FileExistsError, match="behavior-00000003"):
        ck.save_historical("behavior-00000003", _state(4))
    ck.save_historical("behavior-00000003", _state(4), overwrite=True)
    ck.close()
    np.testing.assert_array_equal(ck.restore_historical("behavior-00000003")[0]["w"],
                                  _state(4)["w"])


def test_config_turns_async_saves_on():
    from tseeds_jax.rl.config import ConfigValueError, TrainConfig, tiny_config

    c = tiny_config()
    assert c.checkpoint_async is True and c.preemption_window_s == 30.0
    cfg = TrainConfig.from_config(c)
    assert cfg.checkpoint_async is True
    for field, value in (("checkpoint_async", "yes"), ("checkpoint_continuous_s", -1.0),
                         ("preemption_window_s", 0.0)):
        d = tiny_config().to_dict()
        d[field] = value
        with pytest.raises(ConfigValueError, match=f"{field}="):
            TrainConfig.from_config(d)


def test_run_checkpointer_reads_async_from_the_run_config(tmp_path):
    assert RunCheckpointer(str(tmp_path / "a"), response_width=4,
                           config_json={"checkpoint_async": True}).async_save is True
    assert RunCheckpointer(str(tmp_path / "b"), response_width=4).async_save is False


# ------------------------------------------------- continuous checkpoints, the notice window


def test_continuous_checkpoint_is_due_only_when_no_write_runs():
    now = [0.0]
    guard = preemption.PreemptionGuard(Hosts(0, 1), continuous_s=10, clock=lambda: now[0],
                                       watch=False)
    now[0] = 9.0
    assert guard.agree(idle=True) == (0, False)
    now[0] = 10.0
    assert guard.agree(idle=False) == (0, False)  # a write is running: not yet
    assert guard.agree(idle=True) == (0, True)
    guard.saved()
    now[0] = 15.0
    assert guard.agree(idle=True) == (0, False)
    with pytest.raises(ValueError, match="continuous_s"):
        preemption.PreemptionGuard(Hosts(0, 1), continuous_s=-1)
    with pytest.raises(ValueError, match="window_s"):
        preemption.PreemptionGuard(Hosts(0, 1), window_s=0)


def test_notice_window_decides_whether_a_final_save_fits():
    now = [100.0]
    guard = preemption.PreemptionGuard(Hosts(0, 1), window_s=30, clock=lambda: now[0],
                                       watch=False)
    guard.agree(save_s=50.0)
    assert guard.fits_window  # no notice: no deadline
    with guard:
        os.kill(os.getpid(), signal.SIGTERM)  # the notice, at t = 100
    now[0] = 110.0
    assert guard.agree(save_s=19.0)[0] == preemption.PREEMPT and guard.fits_window
    assert guard.agree(save_s=21.0)[0] == preemption.PREEMPT and not guard.fits_window
    now[0] = 131.0
    guard.agree(save_s=0.0)
    assert not guard.fits_window  # past the window: nothing fits
    # Ctrl-C sets no deadline: the final save is always written
    ctrl_c = preemption.PreemptionGuard(Hosts(0, 1), window_s=1, clock=lambda: now[0],
                                        watch=False)
    ctrl_c.request(preemption.INTERRUPT, "SIGINT")
    now[0] = 1e5
    assert ctrl_c.agree(save_s=100.0)[0] == preemption.INTERRUPT and ctrl_c.fits_window
