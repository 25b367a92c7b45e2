"""What both sandbox backends share: limits, results, the interpreter's paths, uid sweeps.

`SandboxLimits` and `RunResult` are the public types (re-exported by `sandbox`); the rest is used by
the bubblewrap backend (`_bwrap`) and the weaker namespace backend (`weak_isolation`).
"""

from __future__ import annotations

import dataclasses
import errno
import os
import resource
import signal
import sys
import warnings
from pathlib import Path

import tseeds_jax.rewards._mounts as _mounts

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
    result: bytes = b""  # what the harness (assert tests) sent on its result channel



# The stack: a judge's (Codeforces: 256 MiB). The interpreter starts with 8 MiB soft (glibc takes
# that as every thread's stack: 20 threads fit under RLIMIT_AS) and its first line raises the soft
# limit to STACK_MB (the main thread's deep recursion: 1e5 memoised levels), `raise_stack`.
STACK_START_MB, STACK_MB = 8, 256
SANDBOX_CPUS = 4  # what the program sees: os.cpu_count() (/sys) and its CPU affinity


def sandbox_process_limits() -> None:
    """In a launcher, before exec: the stack's start and hard limits, and the CPU affinity (the
    first SANDBOX_CPUS CPUs this process may use, as the CPU count the sandbox shows)."""
    hard = resource.getrlimit(resource.RLIMIT_STACK)[1]
    if os.geteuid() == 0:
        hard = STACK_MB << 20
    elif hard != resource.RLIM_INFINITY:
        hard = min(hard, STACK_MB << 20)
    else:
        hard = STACK_MB << 20
    resource.setrlimit(resource.RLIMIT_STACK, (min(STACK_START_MB << 20, hard), hard))
    try:
        os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:SANDBOX_CPUS])
    except OSError:  # a kernel without affinity control: the host's CPUs stay visible
        pass


_HERE = Path(__file__).parent
_HARNESS = (_HERE / "sandbox_harness.py", (_HERE / "sandbox_server.py", _HERE / "sandbox_checker.py"), {})


def harness_args(mode: str, nproc: int) -> list[str]:
    """`-c SOURCE MODE` running `sandbox_harness` in `mode` ("steps", or "check" with
    `sandbox_server` and `sandbox_checker` appended); nproc 0: the harness leaves RLIMIT_NPROC
    alone (the weak backend without a user namespace of its own)."""
    if mode not in ("steps", "check"):
        raise ValueError(f"harness mode must be 'steps' or 'check', got {mode!r}")
    harness, checker, cache = _HARNESS
    if mode not in cache:
        parts = [harness, *(checker if mode == "check" else ())]
        text = "\n".join(p.read_text() for p in parts)
        cache[mode] = text + f"\n_main({mode!r})\n"
    return ["-c", cache[mode].replace("_NPROC = 16", f"_NPROC = {int(nproc)}", 1), mode]


class Dialog:
    """What a harness run exchanges with the worker while it runs (`grading` makes them; both
    backends' supervisors drive them): `outgoing` bytes to write to the harness's fd 6, `received`
    with each chunk of its result channel (fd 3, the start byte removed), `deadline` (monotonic
    seconds) of what it waits for now, `finished` once it needs nothing more (the run is then
    ended), and `ended(status)` once the run is over, with the supervisor's status for it;
    `restart()` before it is used again (the weak backend after bubblewrap failed)."""

    outgoing: bytearray
    deadline: float = float("inf")
    finished: bool = False

    def received(self, data: bytes) -> None:
        raise NotImplementedError

    def ended(self, status: str | None) -> None:
        raise NotImplementedError

    def restart(self) -> None:
        raise NotImplementedError


def reachable_by_others(path: str) -> bool:
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



_WARNED: set[str] = set()


def warn_once(msg: str) -> None:
    if msg not in _WARNED:
        _WARNED.add(msg)
        warnings.warn(msg, RuntimeWarning, stacklevel=3)


def sweep_uid(uid: int) -> None:
    """Kill every process of `uid`: kill(-1) as that uid reaches exactly its own processes. The
    kernel sends it under the tasklist lock and a fork with a fatal signal pending fails, so one pass
    leaves no survivor; a second pass costs nothing and covers a racing exec. OSError when the
    sweeping child could not become `uid` (not root) or died."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
            for _ in range(2):
                os.kill(-1, signal.SIGKILL)  # never ESRCH while other processes exist
            code = 0
        except BaseException:  # noqa: BLE001 - reported through the exit status
            pass
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise OSError(errno.EPERM, f"cannot become uid {uid} to sweep it (status {status})")



# How an interpreter that cannot start (missing stdlib or shared library) fails before running a
# line of the program. A program can print these too; it then scores 0 as sandbox_error instead
# of runtime_error, and a training run stops only if *every* response of a step does it.
_STARTUP_FAILURES = (
    "Fatal Python error: init",
    "Could not find platform",
    "error while loading shared libraries",
)


def interpreter_failure(exit_code, stderr_tail: str, python) -> dict | None:
    first = stderr_tail.lstrip().split("\n", 1)[0]
    if exit_code in (1, 127) and any(m in first for m in _STARTUP_FAILURES):
        return {"step": f"start interpreter {python}", "errno": None, "errno_name": None,
                "error": first[:300]}
    return None


def kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError as e:
        if e.errno != errno.ESRCH:
            raise
