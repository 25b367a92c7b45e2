"""Run one untrusted Python program with limits and isolation (see docs/sandbox.md).

`run_program` must be called from a single-threaded process (it forks): the reward worker processes
of `_pool` are such processes; `tseeds_jax.rewards.code` sends work there. Process tree per run:

    worker (root) -> setup child (root; new mount/net/pid/ipc namespaces, mounts) -> program
                                                     (pid 1 of its pid namespace, unprivileged uid)

The worker talks to the program through pipes (stdin fed from the test input, stdout/stderr read
with caps), enforces the wall-clock limit, and on exit or timeout kills the program's pid namespace
and every process of the sandbox uid. The uid is unique per worker (UID_BASE + worker pid), so
RLIMIT_NPROC and the kill sweep never touch another sandbox's processes.

The mounts are planned here, on the host's view of the paths (`_mounts.plan`: the interpreter may
live under /tmp or a hidden directory), and made in the setup child (`_children`, `_mounts.apply`).
Every setup step that fails is reported as `RunResult.error` (step and OS error), never silently.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import math
import os
import select
import shutil
import signal
import sys
import tempfile
import time
import warnings
from pathlib import Path

from tseeds_jax.rewards import _mounts
from tseeds_jax.rewards._children import SAFE_PATH, setup_child
from tseeds_jax.rewards._mounts import SetupError, step

UID_BASE = 1_500_000_000  # + worker pid (pid_max <= 2**22): a uid range no real account uses
_PROJECT = Path(__file__).resolve().parents[2]
PROJECT_ROOT = str(_PROJECT) if (_PROJECT / "pyproject.toml").exists() else None


@dataclasses.dataclass(frozen=True)
class SandboxLimits:
    """Per-run limits. Seconds, mebibytes, bytes, counts."""

    cpu_s: float = 2.0  # RLIMIT_CPU (SIGKILL one second after the soft limit)
    wall_s: float = 4.0  # wall clock from fork to kill
    memory_mb: int = 1024  # RLIMIT_AS (virtual address space) per process
    nproc: int = 16  # RLIMIT_NPROC: processes + threads of the sandbox uid (root mode only)
    fsize_mb: int = 16  # RLIMIT_FSIZE: largest file the program may write
    nofile: int = 64  # RLIMIT_NOFILE
    output_bytes: int = 1 << 20  # stdout cap; exceeding it kills the program
    stderr_bytes: int = 1 << 16  # stderr cap (kept tail is shorter)
    tmpfs_mb: int = 64  # size of the private /tmp holding the working directory (mount mode)

    def __post_init__(self):
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if not isinstance(v, (int, float)) or isinstance(v, bool) or v <= 0:
                raise ValueError(f"SandboxLimits.{f.name} must be a positive number, got {v!r}")


@dataclasses.dataclass
class RunResult:
    """Outcome of one run. status: ok | exit_nonzero | timeout | cpu_limit | memory | output_limit |
    killed | sandbox_error. error (sandbox_error only): {"step", "errno", "errno_name", "error"} —
    which setup step failed (which mount, which exec) and the OS error."""

    status: str
    exit_code: int | None
    stdout: str
    stderr_tail: str
    wall_s: float
    cpu_s: float
    isolation: dict
    error: dict | None = None


def _hidden_paths(extra: tuple[str, ...]) -> list[str]:
    paths = ["/root", "/home", "/dev/shm", "/var/tmp", "/run/lock"]
    if PROJECT_ROOT:
        paths.append(PROJECT_ROOT)
    paths += list(extra)
    out = []
    for p in paths:
        rp = os.path.realpath(p)
        if rp != "/" and os.path.isdir(rp) and rp not in out:
            out.append(rp)
    return out


def _reachable_by_others(path: str) -> bool:
    """True if a foreign uid can exec `path`: every directory on the way (through each symlink met)
    o+x and the file itself o+x."""
    real, links = _mounts.resolve(path)
    for p in [real] + [loc for loc, _ in links]:
        if any(not os.stat(d).st_mode & 0o001 for d in Path(p).parents):
            return False
    return bool(os.stat(real).st_mode & 0o001)


def interpreter_paths() -> list[str]:
    """What the interpreter's startup reads, as it names it: the executable (a venv's symlink
    chain included), the prefixes, a venv's base interpreter and `home` (pyvenv.cfg)."""
    paths = [sys.executable, sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix,
             getattr(sys, "_base_executable", "")]
    cfg = Path(sys.prefix, "pyvenv.cfg")
    if cfg.is_file():
        for line in cfg.read_text(errors="replace").splitlines():
            key, _, value = line.partition("=")
            if key.strip() == "home" and value.strip():
                paths.append(value.strip())
    return [p for p in dict.fromkeys(paths) if p and os.path.isabs(p) and os.path.exists(p)]


def _fallback_python() -> str:
    """The interpreter when there is no mount namespace and the program runs as a foreign uid."""
    if _reachable_by_others(sys.executable):
        return sys.executable
    # e.g. a venv or pyenv under /root: unreachable for the sandbox uid; a system interpreter is
    # the only way to run the program at all.
    for d in SAFE_PATH.split(":"):
        cand = os.path.join(d, "python3")
        if os.path.exists(cand) and _reachable_by_others(cand):
            return cand
    return sys.executable


_WARNED: set[str] = set()


def _warn_once(msg: str) -> None:
    if msg not in _WARNED:
        _WARNED.add(msg)
        warnings.warn(msg, RuntimeWarning, stacklevel=3)


def _sweep_uid(uid: int) -> None:
    """Kill every process of `uid`: kill(-1) as that uid reaches exactly its own processes. The
    kernel sends it under the tasklist lock and a fork with a fatal signal pending fails, so one pass
    leaves no survivor; a second pass costs nothing and covers a racing exec."""
    pid = os.fork()
    if pid == 0:
        try:
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
            for _ in range(2):
                os.kill(-1, signal.SIGKILL)  # never ESRCH while other processes exist
        finally:
            os._exit(0)
    os.waitpid(pid, 0)


def _setup_failed(err: SetupError, t0: float) -> RunResult:
    return RunResult("sandbox_error", None, "", f"sandbox setup failed: {err}", time.monotonic() - t0,
                     0.0, {}, err.as_dict())


def run_program(
    source: str,
    stdin: str = "",
    limits: SandboxLimits = SandboxLimits(),
    *,
    extra_hidden: tuple[str, ...] = (),
    seccomp: bool = True,
) -> RunResult:
    """Run Python `source` with `stdin` in the sandbox; never raises for program misbehaviour.

    Must be called from a single-threaded process (see module docstring).
    """
    if not isinstance(source, str) or not isinstance(stdin, str):
        raise TypeError(f"source and stdin must be str, got {type(source).__name__}/{type(stdin).__name__}")
    t0 = time.monotonic()
    root = os.geteuid() == 0
    uid = UID_BASE + os.getpid() if root else None
    try:
        # Planned here, on the host's view: inside the new namespace these paths may be covered.
        plan = step("plan mounts", _mounts.plan, _hidden_paths(tuple(extra_hidden)), interpreter_paths())
        fallback_python = step("find an interpreter", _fallback_python) if root else sys.executable
        fallback_dir = step("make work directory", tempfile.mkdtemp, prefix="tseeds_sbx_")
    except SetupError as e:
        return _setup_failed(e, t0)
    os.chmod(fallback_dir, 0o711)
    workdir = os.path.join(fallback_dir, "work")
    os.mkdir(workdir, 0o700)
    cfg = {
        "source": source,
        "limits": limits,
        "sandbox_uid": uid,
        "seccomp": seccomp,
        "plan": plan,
        "refused": list(plan.refused),
        "python": sys.executable,
        "fallback_python": fallback_python,
        "fallback_workdir": workdir,
    }
    r_in, w_in = os.pipe()
    r_out, w_out = os.pipe()
    r_err, w_err = os.pipe()
    r_st, w_st = os.pipe2(os.O_CLOEXEC)
    setup_pid = os.fork()
    if setup_pid == 0:
        for fd in (w_in, r_out, r_err, r_st):
            os.close(fd)
        setup_child(cfg, {"stdin": r_in, "stdout": w_out, "stderr": w_err, "status": w_st})
    for fd in (r_in, w_out, w_err, w_st):
        os.close(fd)
    try:
        return _supervise(setup_pid, uid, limits, stdin.encode(), w_in, r_out, r_err, r_st, t0)
    finally:
        shutil.rmtree(fallback_dir, ignore_errors=True)


def _supervise(setup_pid, uid, limits, data, w_in, r_out, r_err, r_st, t0) -> RunResult:
    os.set_blocking(w_in, False)
    out, err, st = bytearray(), bytearray(), bytearray()
    open_fds = {r_out, r_err, r_st}
    if data:
        pending = memoryview(data)
    else:
        os.close(w_in)
        w_in, pending = None, None
    status, prog_pid, exit_line, deadline = None, None, None, t0 + limits.wall_s
    st_pos = 0
    while open_fds:
        now = time.monotonic()
        if exit_line is not None and now > deadline + 1.0:
            break  # program gone; something (a stray child) still holds the pipes
        if exit_line is None and now >= deadline:
            status = "timeout"
            break
        wfds = [w_in] if w_in is not None else []
        r, w, _ = select.select(list(open_fds), wfds, [], max(0.0, deadline - now) + 0.01)
        if w:
            try:
                n = os.write(w_in, pending[:65536])
                pending = pending[n:]
            except (BrokenPipeError, BlockingIOError) as e:
                if isinstance(e, BrokenPipeError):
                    pending = pending[:0]
            if not pending:
                os.close(w_in)
                w_in = None
        for fd in r:
            chunk = os.read(fd, 65536)
            if not chunk:
                open_fds.discard(fd)
                continue
            if fd == r_out:
                out += chunk
            elif fd == r_err:
                err += chunk
            else:
                st += chunk
                lines = bytes(st[st_pos:]).decode(errors="replace").split("\n")
                st_pos = len(st) - len(lines[-1].encode())
                for line in lines[:-1]:
                    if line.startswith("pid "):
                        prog_pid = int(line.split()[1])
                    elif line.startswith("exit "):
                        exit_line = line
                        deadline = min(deadline, time.monotonic() + 1.0)
                        if uid is not None:
                            _sweep_uid(uid)  # background children die with the program
                    elif line.startswith("err "):
                        deadline = min(deadline, time.monotonic() + 1.0)
        if len(out) > limits.output_bytes or len(err) > limits.stderr_bytes:
            status = "output_limit"
            break
    if w_in is not None:
        os.close(w_in)
    if exit_line is None and prog_pid is not None:
        _kill(prog_pid)  # pid 1 of its namespace: the kernel kills the rest of the namespace
    if uid is not None:
        _sweep_uid(uid)
    # Let the setup child reap the program and strays (a zombie handed to the system init may
    # linger and count against RLIMIT_NPROC), then make sure it is gone.
    for _ in range(400):
        done, setup_status = os.waitpid(setup_pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.005)
    else:
        _kill(setup_pid)
        _, setup_status = os.waitpid(setup_pid, 0)
    if uid is not None:
        _sweep_uid(uid)
    for fd in (r_out, r_err, r_st):
        os.close(fd)
    wall = time.monotonic() - t0
    lines = st.decode(errors="replace").splitlines()
    iso = next((json.loads(ln[4:]) for ln in lines if ln.startswith("iso ")), {})
    info = next((json.loads(ln.split(" ", 2)[2]) for ln in lines if ln.startswith("pid ")), {})
    isolation = {k: bool(iso.get(k)) for k in ("net", "mount", "pid", "seccomp")}
    isolation.update(uid=uid, python=info.get("python"), writable_mounts=info.get("writable_mounts", []))
    for what in ("net", "mount", "pid"):
        if prog_pid is not None and not isolation[what]:
            _warn_once(f"sandbox: no new {what} namespace available; see docs/sandbox.md")
    exit_code, cpu = None, 0.0
    if exit_line is not None:
        wstatus, cpu = int(exit_line.split()[1]), float(exit_line.split()[2])
        exit_code = os.waitstatus_to_exitcode(wstatus)
    stderr_tail = err[-2000:].decode(errors="replace")
    error = next((json.loads(ln[4:]) for ln in lines if ln.startswith("err ")), None)
    if error is None and status is None and exit_line is None:
        # The setup child died without a word (killed, or it crashed before reporting).
        error = {"step": "sandbox setup", "errno": None, "errno_name": None,
                 "error": f"setup process ended with status {os.waitstatus_to_exitcode(setup_status)}"}
    if error is None and status is None:
        error = _interpreter_failure(exit_code, stderr_tail, isolation["python"])
    if error is not None:
        status = "sandbox_error"
        stderr_tail = f"sandbox setup failed: {error['step']}: {error['error']}\n{stderr_tail}"[:2000]
    elif status is None:
        if exit_code == 0:
            status = "ok"
        # The kernel enforces RLIMIT_CPU on tick-sampled CPU time, while rusage reports the
        # precise run time; on a loaded machine the kill came at 0.83 s of rusage for a 1 s limit.
        elif exit_code == -signal.SIGKILL and cpu >= 0.5 * math.ceil(limits.cpu_s):
            status = "cpu_limit"
        elif "MemoryError" in stderr_tail:
            status = "memory"
        elif exit_code is not None and exit_code < 0:
            status = "killed"
        else:
            status = "exit_nonzero"
    return RunResult(
        status,
        exit_code,
        out[: limits.output_bytes].decode(errors="replace"),
        stderr_tail,
        wall,
        cpu,
        isolation,
        error,
    )


# How an interpreter that cannot start (missing stdlib or shared library) fails before running a
# line of the program. A program can print these too; it then scores 0 as sandbox_error instead
# of runtime_error, and a training run stops only if *every* response of a step does it.
_STARTUP_FAILURES = (
    "Fatal Python error: init",
    "Could not find platform",
    "error while loading shared libraries",
)


def _interpreter_failure(exit_code, stderr_tail: str, python) -> dict | None:
    first = stderr_tail.lstrip().split("\n", 1)[0]
    if exit_code in (1, 127) and any(m in first for m in _STARTUP_FAILURES):
        return {"step": f"start interpreter {python}", "errno": None, "errno_name": None,
                "error": first[:300]}
    return None


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError as e:
        if e.errno != errno.ESRCH:
            raise
