"""Helpers for the sandbox tests: throw-away venvs holding nothing but the project's path, reward
workers restarted with another interpreter or environment, and (as root) a throw-away user and the
command prefix that runs a grader as that user."""

from __future__ import annotations

import contextlib
import os
import pwd
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import tseeds_jax
from tseeds_jax.rewards import _pool
from tseeds_jax.rewards.sandbox import UID_BASE

PROJECT_PATH = str(Path(tseeds_jax.__file__).resolve().parents[1])  # the checkout being tested


def _parent(pid: int) -> int | None:
    try:  # the command name in /proc/PID/stat may hold spaces and ")": the fields follow the last ")"
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def _descends_from(pid: int, ancestor: int) -> bool:
    seen = set()
    while pid and pid not in seen:
        if pid == ancestor:
            return True
        seen.add(pid)
        pid = _parent(pid)
    return False


def another_process_sandbox(uid: int) -> bool:
    """A sandbox uid is UID_BASE + the pid of the reward worker that ran it (`_common.UID_BASE`).
    True when that worker is alive and not a descendant of this process: the sandbox belongs to
    another test process (the other pytest-xdist worker grading at the same moment), so a check for
    this process's leftovers must not count it. A leftover whose worker is gone counts."""
    worker = uid - UID_BASE
    return Path(f"/proc/{worker}").exists() and not _descends_from(worker, os.getpid())


def sandbox_processes(uid: int | None = None, *, zombies: bool = True) -> list[int]:
    """This process's sandboxed processes still alive: those of `uid` (a non-root grader's own
    user) or, with uid None, of the sandbox uid range (root) less other test processes' sandboxes
    (`another_process_sandbox`). Never this process; `zombies=False` leaves out exited processes
    waiting to be reaped (they run nothing)."""
    out = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit() or int(p.name) == os.getpid():
            continue
        try:
            status = (p / "status").read_text()
            u = int(status.split("Uid:")[1].split()[0])
        except (OSError, IndexError):
            continue
        if not zombies and "\nState:\tZ" in status:
            continue
        if u == uid if uid is not None else (UID_BASE <= u < UID_BASE + (1 << 22)
                                             and not another_process_sandbox(u)):
            out.append(int(p.name))
    return out


def make_venv(where: Path, project: str = PROJECT_PATH) -> str:
    """A venv at `where` (no pip, nothing installed) whose only addition is `project` on its path;
    returns its interpreter (a symlink to the base interpreter, as `python -m venv` makes it)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True, timeout=120)
    python = str(where / "bin" / "python")
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True, timeout=60,
    ).stdout.strip()
    Path(purelib, "tseeds_project.pth").write_text(project + "\n")
    return python


@contextlib.contextmanager
def workers(python: str | None = None, **env: str):
    """Reward workers started with `python` and `env` added to the environment, for the block."""
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    _pool.restart_shared(python)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        _pool.restart_shared(None)


def no_outer_limit() -> list[str]:
    """prlimit raising the soft process limit to the hard one (unlimited where root may)."""
    hard = resource.getrlimit(resource.RLIMIT_NPROC)[1]
    n = "unlimited" if hard == resource.RLIM_INFINITY else str(hard)
    return ["prlimit", f"--nproc={n}:{n}"]


@contextlib.contextmanager
def system_user(tag: str, groups: tuple[str, ...] = ()):
    """(root only) A throw-away user `{tag}u` with a home, in `groups`; yields its pwd entry and
    removes it (and its home) afterwards."""
    user = f"{tag}u"
    extra = ["-G", ",".join(groups)] if groups else []
    subprocess.run(["useradd", "-m", *extra, "-s", "/bin/sh", user], check=True)
    pw = pwd.getpwnam(user)
    try:
        yield pw
    finally:
        deadline = time.monotonic() + 5.0  # userdel refuses while the user's workers are exiting
        while _processes_of(pw.pw_uid) and time.monotonic() < deadline:
            time.sleep(0.05)
        subprocess.run(["userdel", "-f", "-r", user], check=False, capture_output=True)


def _processes_of(uid: int) -> list[int]:
    out = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                if int((p / "status").read_text().split("Uid:")[1].split()[0]) == uid:
                    out.append(int(p.name))
            except (OSError, IndexError):
                pass
    return out


@contextlib.contextmanager
def as_user(pw):
    """(root only) A command prefix running as `pw`'s user with the soft process limit raised to
    the hard one. /root is 0700: in a private mount namespace, /root holds only the interpreter's
    .pyenv (so this interpreter runs, and nothing else of root's home is there)."""
    stage = tempfile.mkdtemp(prefix="tseeds_sbx_stage_")
    top = next((p for p in Path(sys.executable).resolve().parents if p.parent == Path("/root")), None)
    shell = [
        "unshare", "--mount", "--propagation", "private", "sh", "-ec",
        (f"mount --bind {top} {stage} && mount -t tmpfs -o mode=755,size=1m tmpfs /root && "
         f"mkdir /root/{top.name} && mount --move {stage} /root/{top.name} && exec \"$@\"")
        if top else 'exec "$@"', "sh",
        *no_outer_limit(), "setpriv", f"--reuid={pw.pw_uid}", f"--regid={pw.pw_gid}",
        "--init-groups", "--inh-caps=-all", "--reset-env",
        # --reset-env drops the suite's JAX_PLATFORMS=cpu: without it JAX would probe libtpu
        # (installed for the compile-only tests), which aborts the child when another test
        # process holds libtpu's lock file
        "env", f"HOME={pw.pw_dir}", "JAX_PLATFORMS=cpu",
    ]
    opened = _open_checkout_to_others()
    try:
        yield shell
    finally:
        for path, mode in reversed(opened):
            os.chmod(path, mode)
        os.rmdir(stage)


def _open_checkout_to_others() -> list[tuple[Path, int]]:
    """The user's child runs `python -m tests...` from the checkout, which it must read: a clone
    into `mktemp -d` (mode 0700, as CI makes one) is closed to other users. Adds o+rx to the
    checkout and o+x to its closed ancestors below /root's level, for the test's duration;
    returns (path, old mode) to restore. /root itself is handled by the mount namespace above."""
    root = Path(__file__).resolve().parents[1]
    opened = []
    for path, bits in [(root, 0o005)] + [(a, 0o001) for a in root.parents]:
        if path == Path("/") or path == Path("/root"):
            continue
        mode = path.stat().st_mode & 0o7777
        if mode & bits != bits:
            opened.append((path, mode))
            os.chmod(path, mode | bits)
    return opened


def run_runner(module: str, ctx: dict, user=None, timeout: int = 300) -> dict:
    """`python -m MODULE CTX` (a test file's own runner) as this user, or (root only) as `user`'s
    pwd entry; returns the JSON its last stdout line holds."""
    import json

    root = Path(__file__).resolve().parents[1]

    def run(prefix: list[str]) -> dict:
        proc = subprocess.run(prefix + [sys.executable, "-m", module, json.dumps(ctx)], cwd=root,
                              capture_output=True, text=True, timeout=timeout,
                              env=dict(os.environ, PYTHONPATH=str(root)))
        assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-4000:])
        return json.loads(proc.stdout.strip().splitlines()[-1])

    if user is None:
        return run([])
    with as_user(user) as prefix:
        return run(prefix)
