"""Run-dir files on a remote (gs://) run root: metrics and TensorBoard events written to a local
mirror, copied to the run dir after each checkpoint, pulled back on resume on a fresh host.

GCS is not reachable here: a local folder stands in for the remote root (`remote=True`), so the
copies go through the same `etils.epath` calls a gs:// path takes, minus the GCS backend."""

import json
import os

from tests.test_readme_claims import read_scalars
from tseeds_jax.rl.run import run_files
from tseeds_jax.rl.run.metrics import MetricsWriter, read_metrics


def _tb_steps(tb_dir, tag):
    return sorted(step for (t, step) in read_scalars(str(tb_dir)) if t == tag)


def test_url_run_dirs_get_a_stable_private_mirror(tmp_path, monkeypatch):
    monkeypatch.setenv(run_files.MIRROR_ENV, str(tmp_path / "m"))
    assert run_files.is_remote("gs://bucket/runs/a") and not run_files.is_remote("/runs/a")
    a, b = run_files.local_dir("gs://bucket/runs/a"), run_files.local_dir("gs://bucket/runs/b")
    assert a == run_files.local_dir("gs://bucket/runs/a") and a != b
    assert a.startswith(str(tmp_path / "m"))
    assert run_files.local_dir("/runs/a") == "/runs/a"  # a local run dir is its own mirror


def test_remote_metrics_follow_checkpoints_and_resume_on_a_fresh_host(tmp_path, monkeypatch):
    remote = tmp_path / "bucket" / "run"
    monkeypatch.setenv(run_files.MIRROR_ENV, str(tmp_path / "host_a"))
    w = MetricsWriter(str(remote), remote=True)
    for step in range(4):
        w.write(step, {"reward": float(step)})
    assert not (remote / "metrics.jsonl").exists()  # nothing reaches the remote before a sync
    w.sync()  # the checkpoint after step 3
    w.write(4, {"reward": 4.0})  # written after the last checkpoint: lost with host A
    synced = [json.loads(x)["step"] for x in (remote / "metrics.jsonl").read_text().splitlines()]
    assert synced == [0, 1, 2, 3]
    assert _tb_steps(remote / "tb", "reward") == [0, 1, 2, 3]

    # Host A is gone (preempted); host B starts with an empty mirror and resumes from step 4.
    monkeypatch.setenv(run_files.MIRROR_ENV, str(tmp_path / "host_b"))
    w2 = MetricsWriter(str(remote), remote=True)
    assert os.path.exists(w2.path) and w2.path != w.path
    w2.truncate_after(4)
    for step in range(4, 6):
        w2.write(step, {"reward": float(step)})
    w2.close()
    assert [r["step"] for r in read_metrics(str(remote))] == [0, 1, 2, 3, 4, 5]
    assert _tb_steps(remote / "tb", "reward") == [0, 1, 2, 3, 4, 5]
    w.close()


def test_a_stale_mirror_is_not_taken_for_the_run(tmp_path, monkeypatch):
    remote = tmp_path / "bucket" / "fresh"
    monkeypatch.setenv(run_files.MIRROR_ENV, str(tmp_path / "m"))
    mirror = run_files.local_dir(str(remote), remote=True)
    os.makedirs(mirror)
    with open(os.path.join(mirror, "metrics.jsonl"), "w") as f:
        f.write(json.dumps({"step": 0, "reward": 9.0}) + "\n")  # an earlier run of this name
    w = MetricsWriter(str(remote), remote=True, tensorboard=False)
    w.write(0, {"reward": 1.0})
    w.close()
    assert read_metrics(str(remote)) == [{"step": 0, "reward": 1.0}]


def test_local_run_dirs_are_written_in_place(tmp_path):
    w = MetricsWriter(str(tmp_path / "run"), tensorboard=False)
    w.write(0, {"reward": 1.0})
    w.close()
    assert w.path == str(tmp_path / "run" / "metrics.jsonl")
    assert read_metrics(str(tmp_path / "run")) == [{"step": 0, "reward": 1.0}]
