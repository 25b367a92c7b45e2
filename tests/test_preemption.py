"""Preemption pieces in-process: signal flags and their agreement, time-based checkpoints, the
GCE metadata watcher against a local stand-in server, broken and partial checkpoints, metrics
rebuilt after a resume. (End-to-end runs killed and resumed: tests/test_preemption_kill.py.)"""

import glob
import http.server
import json
import os
import signal
import struct
import threading

import numpy as np
import pytest

from tseeds_jax import checkpoint
from tseeds_jax.rl.run import preemption
from tseeds_jax.rl.run.hosts import Hosts
from tseeds_jax.rl.run.metrics import MetricsWriter
from tseeds_jax.rl.run.state_io import CheckpointError, RunCheckpointer
from tseeds_jax.seeds import SeedCache


def read_scalars(tb_dir) -> dict[str, list[tuple[int, float]]]:
    """tag -> [(step, value)] of every TensorBoard event file under `tb_dir`, in file order.

    Reads the TFRecord framing (u64 length, u32 crc, payload, u32 crc) with tensorboardX's Event
    proto: written here from the format, not by tensorboardX's writer."""
    from tensorboardX.proto import event_pb2

    out: dict[str, list[tuple[int, float]]] = {}
    for path in sorted(glob.glob(os.path.join(str(tb_dir), "**", "events.*"), recursive=True)):
        data = open(path, "rb").read()
        i = 0
        while i < len(data):
            (n,) = struct.unpack("<Q", data[i : i + 8])
            ev = event_pb2.Event.FromString(data[i + 12 : i + 12 + n])
            i += 12 + n + 4
            for v in ev.summary.value:
                out.setdefault(v.tag, []).append((int(ev.step), float(v.simple_value)))
    return out


# ---------------------------------------------------------------- signals and agreement


def test_sigterm_and_sigint_raise_flags_and_handlers_are_restored():
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    with preemption.PreemptionGuard(Hosts(0, 1), watch=False) as guard:
        assert guard.agree() == (preemption.NONE, False)
        os.kill(os.getpid(), signal.SIGINT)
        assert guard.agree()[0] == preemption.INTERRUPT
        os.kill(os.getpid(), signal.SIGTERM)  # the stronger code wins: resume
        code, timed = guard.agree()
        assert code == preemption.PREEMPT and not timed
        exc = guard.preempted(6, code, "/run/ckpt/6")
        assert exc.exit_code == preemption.EXIT_RESUME == 75 and exc.step == 6
        assert "SIGTERM" in exc.reason
        with pytest.raises(KeyboardInterrupt):  # a second Ctrl-C does not wait
            os.kill(os.getpid(), signal.SIGINT)
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before


def test_sigint_alone_exits_130():
    with preemption.PreemptionGuard(Hosts(0, 1), watch=False) as guard:
        os.kill(os.getpid(), signal.SIGINT)
        code, _ = guard.agree()
    exc = guard.preempted(3, code, None)
    assert exc.exit_code == 130
    assert isinstance(exc, KeyboardInterrupt)  # callers that stop on Ctrl-C still do


def test_time_based_checkpoints_are_host_0s_decision():
    now = [0.0]
    guard = preemption.PreemptionGuard(Hosts(0, 1), every_minutes=2, clock=lambda: now[0],
                                       watch=False)
    now[0] = 119.0
    assert guard.agree() == (0, False)
    now[0] = 120.0
    assert guard.agree() == (0, True)
    guard.saved()
    now[0] = 200.0
    assert guard.agree() == (0, False)
    # another host's clock never decides (its row is not row 0)
    other = preemption.PreemptionGuard(Hosts(1, 1), every_minutes=2, clock=lambda: now[0],
                                       watch=False)
    now[0] = 10_000.0
    assert other.agree() == (0, False)
    off = preemption.PreemptionGuard(Hosts(0, 1), every_minutes=0, clock=lambda: now[0],
                                     watch=False)
    now[0] = 1e9
    assert off.agree() == (0, False)
    with pytest.raises(ValueError, match="every_minutes"):
        preemption.PreemptionGuard(Hosts(0, 1), every_minutes=-1)


def test_checkpoint_every_minutes_is_validated_and_on_by_default():
    from tseeds_jax.rl.config import ConfigValueError, TrainConfig, tiny_config

    c = tiny_config()
    assert c.checkpoint_every_minutes > 0
    c.checkpoint_every_minutes = -1.0
    with pytest.raises(ConfigValueError, match="checkpoint_every_minutes=-1"):
        TrainConfig.from_config(c)


# ------------------------------------------------------------ GCE metadata, local stand-in


class _Metadata(http.server.BaseHTTPRequestHandler):
    answers: dict[str, str] = {}

    def do_GET(self):  # noqa: N802 (http.server's name)
        name = self.path.rsplit("/", 1)[-1]
        if self.headers.get("Metadata-Flavor") != "Google" or name not in self.answers:
            self.send_response(404)
            self.end_headers()
            return
        body = self.answers[name].encode()
        self.send_response(200)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def metadata_server():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Metadata)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/computeMetadata/v1/instance", _Metadata
    server.shutdown()


def test_metadata_watcher_raises_the_flag_on_notice(metadata_server):
    url, handler = metadata_server
    guard = preemption.PreemptionGuard(Hosts(0, 1), watch=False)
    watcher = preemption.MetadataWatcher(guard, base_url=url)
    handler.answers = {"preempted": "FALSE", "maintenance-event": "MIGRATE_ON_HOST_MAINTENANCE"}
    assert watcher.check_once() is None and guard.local_code == preemption.NONE
    handler.answers = {"preempted": "FALSE", "maintenance-event": "TERMINATE_ON_HOST_MAINTENANCE"}
    assert "TERMINATE_ON_HOST_MAINTENANCE" in watcher.check_once()
    assert guard.agree()[0] == preemption.PREEMPT
    guard = preemption.PreemptionGuard(Hosts(0, 1), watch=False)
    handler.answers = {"preempted": "TRUE", "maintenance-event": "NONE"}
    assert "preempted=TRUE" in preemption.MetadataWatcher(guard, base_url=url).check_once()
    assert guard.agree()[0] == preemption.PREEMPT


def test_metadata_watcher_thread_via_environment(metadata_server, monkeypatch):
    url, handler = metadata_server
    handler.answers = {"preempted": "TRUE", "maintenance-event": "NONE"}
    monkeypatch.setenv("TSEEDS_METADATA_URL", url)
    monkeypatch.setenv("TSEEDS_METADATA_POLL_S", "0.05")
    monkeypatch.setenv("TSEEDS_PREEMPTION_WATCH", "1")
    with preemption.PreemptionGuard(Hosts(0, 1)) as guard:
        guard._watcher._thread.join(timeout=10)
        assert guard.agree()[0] == preemption.PREEMPT
    monkeypatch.setenv("TSEEDS_PREEMPTION_WATCH", "sometimes")
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(ValueError, match="TSEEDS_PREEMPTION_WATCH"):
        preemption.PreemptionGuard(Hosts(0, 1)).__enter__()
    assert signal.getsignal(signal.SIGTERM) is before


def test_unreachable_metadata_server_is_ignored():
    guard = preemption.PreemptionGuard(Hosts(0, 1), watch=False)
    watcher = preemption.MetadataWatcher(guard, base_url="http://127.0.0.1:9/none",
                                         timeout_s=0.5)
    assert watcher.check_once() is None and guard.local_code == preemption.NONE


# ------------------------------------------------------- broken and partial checkpoints


class _Prompts:
    def __init__(self, pos):
        self.pos = pos

    def get_state(self):
        return {"pos": self.pos}


def _state(seed):
    rng = np.random.default_rng(seed)
    return {"w": rng.normal(size=(16, 8)).astype(np.float32), "n": np.int32(seed)}


def _run(tmp_path, steps=(2, 4), **kw):
    ck = RunCheckpointer(str(tmp_path), keep_last=3, response_width=4, **kw)
    for s in steps:
        ck.save(s, _state(s), SeedCache(cycle_start=s), _Prompts(s))
    return ck


def _data_file(step_dir):
    """The array data file the restore reads (the OCDBT store merged from every process; the
    per-process copies under ocdbt.process_*/ are not read back)."""
    return max(glob.glob(os.path.join(step_dir, "state", "d", "*")), key=os.path.getsize)


def test_truncated_checkpoint_is_named_and_the_previous_one_loads(tmp_path, capsys):
    ck = _run(tmp_path)
    victim = _data_file(tmp_path / "ckpt" / "4")
    with open(victim, "r+b") as f:
        f.truncate(os.path.getsize(victim) // 2)
    step, state, cache, data = ck.restore_latest(_state(0))
    assert step == 2 and data == {"pos": 2} and cache.cycle_start == 2
    np.testing.assert_array_equal(np.asarray(state["w"]), _state(2)["w"])
    err = capsys.readouterr().err
    assert "WARNING" in err and f"{tmp_path / 'ckpt' / '4'}:" in err and "step 2" in err
    # set aside, never the latest again; the run saves step 4 anew
    assert ck.ckpts.steps() == [2] and (tmp_path / "ckpt" / "corrupt" / "4").is_dir()
    ck.save(4, _state(4), SeedCache(cycle_start=4), _Prompts(4))
    assert ck.restore_latest(_state(0))[0] == 4


def test_missing_seed_cache_and_tree_mismatch(tmp_path, capsys):
    ck = _run(tmp_path)
    os.remove(tmp_path / "seed_cache" / "4" / "host-0000.npz")
    assert ck.restore_latest(_state(0))[0] == 2
    assert "seed cache of checkpoint step 4" in capsys.readouterr().err
    # a model that does not match any checkpoint: an error naming every path, nothing moved
    with pytest.raises(CheckpointError) as e:
        ck.restore_latest({"w": np.zeros((3, 3), np.float32), "n": np.int32(0)})
    assert str(tmp_path / "ckpt" / "2") in str(e.value)
    assert ck.ckpts.steps() == [2]


def test_partial_checkpoint_directories_are_ignored(tmp_path):
    ck = _run(tmp_path, steps=(2,))
    # what a kill mid-write leaves: Orbax's temporary step, and that step's seed-cache files
    (tmp_path / "ckpt" / "4.orbax-checkpoint-tmp-1700000000").mkdir()
    (tmp_path / "seed_cache" / "4").mkdir()
    (tmp_path / "seed_cache" / "4" / "host-0000.npz").write_bytes(b"torn")
    ck = RunCheckpointer(str(tmp_path), keep_last=3, response_width=4)
    assert ck.restore_latest(_state(0))[0] == 2
    assert not (tmp_path / "ckpt" / "4.orbax-checkpoint-tmp-1700000000").exists()  # cleaned up
    ck.save(4, _state(4), SeedCache(cycle_start=4), _Prompts(4))  # overwrites the torn file
    assert ck.restore_latest(_state(0))[0] == 4


def test_commit_file_regime_of_gs_ignores_uncommitted_steps(tmp_path):
    """gs:// has no atomic rename: Orbax writes commit_success.txt last. Same regime, local."""
    ck = _run(tmp_path, steps=(2, 4), commit_file=True)
    assert (tmp_path / "ckpt" / "4" / "commit_success.txt").exists()
    os.remove(tmp_path / "ckpt" / "4" / "commit_success.txt")  # as if killed before the commit
    ck = RunCheckpointer(str(tmp_path), keep_last=3, response_width=4, commit_file=True)
    assert ck.ckpts.steps() == [2] and ck.restore_latest(_state(0))[0] == 2
    ck.ckpts.save_historical("behavior-00000002", _state(1))
    (tmp_path / "ckpt" / "historical" / "behavior-00000003").mkdir()  # uncommitted
    assert ck.ckpts.historical_names() == ["behavior-00000002"]


def test_gs_paths_stay_urls():
    assert str(checkpoint._path("gs://bucket/runs/x/ckpt")) == "gs://bucket/runs/x/ckpt"
    assert checkpoint._committed(checkpoint.epath.Path("/x/4.orbax-checkpoint-tmp-1"), False) \
        is False


# ---------------------------------------------------------------- metrics after a resume


def test_metrics_truncate_drops_torn_lines_and_rebuilds_tensorboard(tmp_path):
    w = MetricsWriter(str(tmp_path))
    for s in range(5):
        w.write(s, {"loss": float(s) / 8, "reward_reasons": {"x": 1}})
    w.close()
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write('{"step": 5, "loss": 0.1')  # a kill mid-line
    w = MetricsWriter(str(tmp_path))  # a resumed run from the checkpoint at step 3
    w.truncate_after(3)
    for s in range(3, 6):
        w.write(s, {"loss": float(s) / 8})
    w.close()
    lines = [json.loads(x) for x in open(tmp_path / "metrics.jsonl")]
    assert [x["step"] for x in lines] == [0, 1, 2, 3, 4, 5]
    scalars = read_scalars(tmp_path / "tb")
    assert scalars["loss"] == [(s, s / 8) for s in range(6)]
