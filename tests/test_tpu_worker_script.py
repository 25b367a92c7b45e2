"""tpu_scripts/worker.sh run locally, as each TPU worker runs it: the trainer started in the
background with the run's shared id, its log and exit code copied to the run's log folder (a fake
`gcloud storage` writes gs:// into a local folder), and whether the kernel's out-of-memory killer
stopped it."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tests.test_tpu_scripts import OVERRIDE, RUN_DIR, RUN_ID, run

LOG_DIR = "gs://tseeds-logs/runs/exp-42/logs"

FAKE_STORAGE = r"""#!/usr/bin/env bash
# Fake `gcloud storage cp|rm`: gs://X is $FAKE_GCS/X.
[[ $1 == storage ]] || exit 97
sub=$2
shift 2
paths=()
for arg in "$@"; do
  [[ $arg == --* ]] && continue
  paths+=("${arg/#gs:\/\//$FAKE_GCS/}")
done
case $sub in
  cp) mkdir -p "$(dirname "${paths[-1]}")" && cp "${paths[@]}" ;;
  rm) rm "${paths[@]}" ;;
  *) exit 96 ;;
esac
"""

FAKE_TRAINER = r"""#!/usr/bin/env bash
printf 'argv:'; printf ' %s' "$@"; printf '\n'
echo "env: run_id=$TSEEDS_RUN_ID worker=$TSEEDS_WORKER_ID"
echo "a line on stderr" >&2
exit "${FAKE_RC:-0}"
"""


def worker_home(tmp_path: Path, trainer_script: str) -> tuple[Path, str, Path]:
    """A worker's home with a venv whose `tseeds` is `trainer_script` and a config file; returns
    it, a PATH whose `gcloud` is FAKE_STORAGE, and the folder standing in for gs://."""
    home = tmp_path / "home"
    (home / "venv" / "bin").mkdir(parents=True)
    trainer = home / "venv" / "bin" / "tseeds"
    trainer.write_text(trainer_script)
    trainer.chmod(0o755)
    (home / "cfg.py").write_text("def get_config():\n    return None\n")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "gcloud").write_text(FAKE_STORAGE)
    (bindir / "gcloud").chmod(0o755)
    return home, f"{bindir}{os.pathsep}{os.environ['PATH']}", tmp_path / "gcs"


def test_worker_start_runs_trainer_in_background_with_shared_run_id(tmp_path):
    home, path, gcs = worker_home(tmp_path, FAKE_TRAINER)
    workers = ((0, 0), (1, 3))  # (worker id, the trainer's exit code)
    for worker, rc in workers:
        env = {"HOME": str(home), "FAKE_GCS": str(gcs), "TSEEDS_WORKER_ID": str(worker),
               "TSEEDS_HOME": str(home / f"state{worker}"), "FAKE_RC": str(rc)}
        proc = run("worker.sh", "start", "--run-id", RUN_ID, "--run-dir", RUN_DIR,
                   "--log-dir", LOG_DIR, "--attempt", "a1", "--config", "cfg.py",
                   "--venv", str(home / "venv"), *OVERRIDE, path=path, extra_env=env, timeout=30)
        assert proc.returncode == 0, proc.stderr
    logs = gcs / "tseeds-logs/runs/exp-42/logs"
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not all((logs / f"worker-{w}.exitcode").exists()
                                                  for w, _ in workers):
        time.sleep(0.1)
    for worker, rc in workers:
        why = {0: "finished", 3: "error"}[rc]
        assert (logs / f"worker-{worker}.exitcode").read_text().strip() == f"{rc} {why}"
        log = (logs / "a1" / f"worker-{worker}.log").read_text()
        assert f"env: run_id={RUN_ID} worker={worker}" in log
        assert (f"argv: train --config {home / 'cfg.py'} --config.run_dir={RUN_DIR} "
                "--config.seeds.ratio=0.5") in log
        assert "a line on stderr" in log and f"train exited with code {rc}" in log


# The trainer stand-in killed by SIGKILL; with FAKE_OOM=1 the kernel log (a file here) says the OOM
# killer did it, naming the trainer's pid as the kernel does.
FAKE_KILLED_TRAINER = r"""#!/usr/bin/env bash
if [[ ${FAKE_OOM:-0} == 1 ]]; then
  echo "[ 812.3] oom-kill:constraint=CONSTRAINT_NONE,task=tseeds,pid=$$,uid=1000" >>"$TSEEDS_KERNEL_LOG"
  echo "[ 812.3] Out of memory: Killed process $$ (tseeds) total-vm:99999kB" >>"$TSEEDS_KERNEL_LOG"
fi
echo "[ 812.4] Out of memory: Killed process 1$$ (other)" >>"$TSEEDS_KERNEL_LOG"
kill -KILL $$
"""


@pytest.mark.parametrize("oom, why", [(True, "oom-killer"), (False, "killed")])
def test_worker_records_whether_the_oom_killer_stopped_the_trainer(oom, why, tmp_path):
    home, path, gcs = worker_home(tmp_path, FAKE_KILLED_TRAINER)
    env = {"HOME": str(home), "FAKE_GCS": str(gcs), "TSEEDS_WORKER_ID": "0",
           "TSEEDS_HOME": str(home / "state"), "FAKE_OOM": str(int(oom)),
           "TSEEDS_KERNEL_LOG": str(tmp_path / "kern.log")}
    proc = run("worker.sh", "start", "--run-id", RUN_ID, "--run-dir", RUN_DIR, "--log-dir",
               LOG_DIR, "--attempt", "a1", "--config", "cfg.py", "--venv", str(home / "venv"),
               path=path, extra_env=env, timeout=30)
    assert proc.returncode == 0, proc.stderr
    code = gcs / "tseeds-logs/runs/exp-42/logs/worker-0.exitcode"
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not code.exists():
        time.sleep(0.1)
    assert code.read_text().strip() == f"137 {why}"
    log = (gcs / "tseeds-logs/runs/exp-42/logs/a1/worker-0.log").read_text()
    assert ("out-of-memory killer" in log) == oom, log
