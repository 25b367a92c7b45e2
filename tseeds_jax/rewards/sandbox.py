"""Run one untrusted Python program with limits and isolation (see docs/sandbox.md).

`run_program` must be called from a single-threaded process (it forks): the reward worker processes
of `_pool` are such processes; `tseeds_jax.rewards.code` sends work there. Process tree per run:

    worker (root) -> setup child (root; new mount/net/pid/ipc namespaces, mounts) -> program
                                                     (pid 1 of its pid namespace, unprivileged uid)

The worker talks to the program through pipes (stdin fed from the test input, stdout/stderr read
with caps), enforces the wall-clock limit, and on exit or timeout kills the program's pid namespace
and every process of the sandbox uid. The uid is unique per worker (UID_BASE + worker pid), so
RLIMIT_NPROC and the kill sweep never touch another sandbox's processes.
"""

from __future__ import annotations

import dataclasses
import errno
import math
import os
import resource
import select
import shutil
import signal
import sys
import tempfile
import time
import warnings
from pathlib import Path

from tseeds_jax.rewards import _linux as lx

UID_BASE = 1_500_000_000  # + worker pid (pid_max <= 2**22): a uid range no real account uses
_PROJECT = Path(__file__).resolve().parents[2]
PROJECT_ROOT = str(_PROJECT) if (_PROJECT / "pyproject.toml").exists() else None
SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"


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
    killed | sandbox_error."""

    status: str
    exit_code: int | None
    stdout: str
    stderr_tail: str
    wall_s: float
    cpu_s: float
    isolation: dict


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


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _accessible_to_others(path: str) -> bool:
    """True if every ancestor directory is o+x and the file o+x (a foreign uid can exec it)."""
    p = Path(path)
    for d in [*p.parents]:
        if not os.stat(d).st_mode & 0o001:
            return False
    return bool(os.stat(p).st_mode & 0o001)


def _python_for(mount_ns: bool, foreign_uid: bool) -> str:
    exe = os.path.realpath(sys.executable)
    if mount_ns or not foreign_uid or _accessible_to_others(exe):
        return exe
    # Without a mount namespace the interpreter under e.g. /root/.pyenv is unreachable for the
    # sandbox uid; a system interpreter is the only way to run the program at all.
    for d in SAFE_PATH.split(":"):
        cand = os.path.join(d, "python3")
        if os.path.exists(cand) and _accessible_to_others(os.path.realpath(cand)):
            return cand
    return exe


_WARNED: set[str] = set()


def _warn_once(msg: str) -> None:
    if msg not in _WARNED:
        _WARNED.add(msg)
        warnings.warn(msg, RuntimeWarning, stacklevel=3)


def _unshare(root: bool) -> dict:
    """In the setup child: enter as many new namespaces as the system allows."""
    got = {"user": False, "mount": False, "net": False, "pid": False, "ipc": False}
    if os.environ.get("TSEEDS_SANDBOX_NO_NAMESPACES") == "1":  # exercise/force the fallback path
        return got
    before = os.stat("/proc/self/ns/mnt").st_ino
    if not root:
        uid, gid = os.getuid(), os.getgid()
        try:
            lx.unshare(lx.CLONE_NEWUSER)
            Path("/proc/self/setgroups").write_text("deny")
            Path("/proc/self/uid_map").write_text(f"{uid} {uid} 1")
            Path("/proc/self/gid_map").write_text(f"{gid} {gid} 1")
            got["user"] = True
        except OSError:
            return got
    flags = {"mount": lx.CLONE_NEWNS, "net": lx.CLONE_NEWNET, "pid": lx.CLONE_NEWPID, "ipc": lx.CLONE_NEWIPC}
    try:
        lx.unshare(sum(flags.values()))
        got.update({k: True for k in flags})
    except OSError:
        for k, f in flags.items():
            try:
                lx.unshare(f)
                got[k] = True
            except OSError:
                pass
    # Never mount anything unless the mount namespace is verifiably a new one.
    got["mount"] = got["mount"] and os.stat("/proc/self/ns/mnt").st_ino != before
    return got


def _mount_flags(opts: str) -> int:
    table = {"nosuid": lx.MS_NOSUID, "nodev": lx.MS_NODEV, "noexec": lx.MS_NOEXEC}
    return sum(table.get(o, 0) for o in set(opts.split(",")))


def _setup_mounts(hide: list[str], keep: list[str], tmpfs_mb: int) -> None:
    """In the setup child's private mount namespace: everything read-only, fresh tmpfs over /tmp and
    the hidden paths, interpreter directories bound back read-only where a hidden path covers them."""
    lx.mount(None, "/", None, lx.MS_REC | lx.MS_PRIVATE)
    keep_fds = [(k, os.open(k, os.O_PATH | os.O_DIRECTORY)) for k in keep if any(_under(k, h) for h in hide)]
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        mp, opts = fields[4].replace("\\040", " "), fields[5]
        if any(_under(mp, p) for p in ("/proc", "/sys", "/dev")) or "ro" in opts.split(","):
            continue
        try:
            lx.mount(None, mp, None, lx.MS_REMOUNT | lx.MS_BIND | lx.MS_RDONLY | _mount_flags(opts))
        except OSError:
            pass  # best effort: a mount we cannot remount stays as it is (documented)
    lx.mount("tmpfs", "/tmp", "tmpfs", lx.MS_NOSUID | lx.MS_NODEV, f"size={tmpfs_mb}m,mode=755")
    for h in hide:
        if _under(h, "/tmp"):  # e.g. a checkout under /tmp: already hidden by the fresh /tmp
            continue
        lx.mount("tmpfs", h, "tmpfs", lx.MS_NOSUID | lx.MS_NODEV, "size=1m,mode=755")
    for target, fd in keep_fds:
        os.makedirs(target, exist_ok=True)
        lx.mount(f"/proc/self/fd/{fd}", target, None, lx.MS_BIND | lx.MS_REC)
        lx.mount(None, target, None, lx.MS_REMOUNT | lx.MS_BIND | lx.MS_RDONLY | lx.MS_NOSUID | lx.MS_NODEV)
        os.close(fd)


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


def _program_child(cfg: dict, fds: dict) -> None:
    """Runs in the program process (pid 1 of its namespace when available); never returns."""
    iso, limits = cfg["isolation"], cfg["limits"]
    if iso["mount"] and iso["pid"]:
        lx.mount("proc", "/proc", "proc", lx.MS_NOSUID | lx.MS_NODEV | lx.MS_NOEXEC)
    os.dup2(fds["stdin"], 0)
    os.dup2(fds["stdout"], 1)
    os.dup2(fds["stderr"], 2)
    status_fd = fds["status"]
    os.closerange(3, status_fd)
    os.closerange(status_fd + 1, 4096)
    rl = [
        # soft == hard: the kernel then sends SIGKILL at the limit (SIGXCPU is ignored by a pid-1 program)
        (resource.RLIMIT_CPU, math.ceil(limits.cpu_s), math.ceil(limits.cpu_s)),
        (resource.RLIMIT_AS, limits.memory_mb << 20, limits.memory_mb << 20),
        (resource.RLIMIT_FSIZE, limits.fsize_mb << 20, limits.fsize_mb << 20),
        (resource.RLIMIT_NOFILE, limits.nofile, limits.nofile),
        (resource.RLIMIT_CORE, 0, 0),
    ]
    if cfg["uid"] is not None:
        rl.append((resource.RLIMIT_NPROC, limits.nproc, limits.nproc))
    for what, soft, hard in rl:
        resource.setrlimit(what, (soft, hard))
    if cfg["uid"] is not None:
        os.setgroups([])
        os.setresgid(cfg["uid"], cfg["uid"], cfg["uid"])
        os.setresuid(cfg["uid"], cfg["uid"], cfg["uid"])
    lx.set_no_new_privs()
    lx.set_parent_death_signal(signal.SIGKILL)  # after setuid: a credential change clears it
    if iso["seccomp"]:
        lx.install_socket_filter()
    os.chdir(cfg["workdir"])
    env = {"PATH": SAFE_PATH, "HOME": cfg["workdir"], "TMPDIR": cfg["workdir"], "LANG": "C.UTF-8"}
    os.execve(cfg["python"], [cfg["python"], "-I", "-B", "main.py"], env)


def _setup_child(cfg: dict, fds: dict) -> None:
    """Runs in the setup child (root or the calling user); never returns."""
    code = 1
    try:
        os.setsid()
        lx.set_parent_death_signal(signal.SIGKILL)  # a killed worker takes its sandbox with it
        lx.set_child_subreaper()  # without a pid namespace, orphans come back here to be reaped
        root = os.geteuid() == 0
        iso = _unshare(root)
        iso["seccomp"] = cfg["seccomp"] and lx.seccomp_supported()
        uid = cfg["sandbox_uid"] if root else None
        if iso["mount"]:
            _setup_mounts(cfg["hide"], cfg["keep"], cfg["limits"].tmpfs_mb)
            workdir = "/tmp/work"
            os.mkdir(workdir, 0o700)
        else:
            workdir = cfg["fallback_workdir"]
        Path(workdir, "main.py").write_text(cfg["source"])
        if uid is not None:
            os.chown(workdir, uid, uid)
        child_cfg = dict(cfg, isolation=iso, uid=uid, workdir=workdir)
        child_cfg["python"] = _python_for(iso["mount"], uid is not None)
        pid = os.fork()
        if pid == 0:
            try:
                _program_child(child_cfg, fds)
            except BaseException as e:  # noqa: BLE001 - report any setup failure, then die
                os.write(fds["status"], f"err program setup: {e!r}\n".encode())
            os._exit(127)
        for k in ("stdin", "stdout", "stderr"):
            os.close(fds[k])
        os.write(
            fds["status"],
            f"pid {pid} {int(iso['net'])}{int(iso['mount'])}{int(iso['pid'])}"
            f"{int(iso['seccomp'])}\n".encode(),
        )
        _, wstatus, ru = os.wait4(pid, 0)
        os.write(fds["status"], f"exit {wstatus} {ru.ru_utime + ru.ru_stime:.4f}\n".encode())
        while True:  # reap stray descendants as the worker's uid sweep kills them
            try:
                os.wait()
            except ChildProcessError:
                break
        code = 0
    except BaseException as e:  # noqa: BLE001
        try:
            os.write(fds["status"], f"err sandbox setup: {e!r}\n".encode())
        except OSError:
            pass
    finally:
        os._exit(code)


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
    root = os.geteuid() == 0
    uid = UID_BASE + os.getpid() if root else None
    fallback_dir = tempfile.mkdtemp(prefix="tseeds_sbx_")
    os.chmod(fallback_dir, 0o711)
    workdir = os.path.join(fallback_dir, "work")
    os.mkdir(workdir, 0o700)
    keep = sorted(
        {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, os.path.dirname(sys.executable))}
    )
    cfg = {
        "source": source,
        "limits": limits,
        "sandbox_uid": uid,
        "seccomp": seccomp,
        "hide": _hidden_paths(tuple(extra_hidden)),
        "keep": keep,
        "fallback_workdir": workdir,
    }
    r_in, w_in = os.pipe()
    r_out, w_out = os.pipe()
    r_err, w_err = os.pipe()
    r_st, w_st = os.pipe2(os.O_CLOEXEC)
    t0 = time.monotonic()
    setup_pid = os.fork()
    if setup_pid == 0:
        for fd in (w_in, r_out, r_err, r_st):
            os.close(fd)
        _setup_child(cfg, {"stdin": r_in, "stdout": w_out, "stderr": w_err, "status": w_st})
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
                        status = status or "sandbox_error"
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
        if os.waitpid(setup_pid, os.WNOHANG)[0] != 0:
            break
        time.sleep(0.005)
    else:
        _kill(setup_pid)
        os.waitpid(setup_pid, 0)
    if uid is not None:
        _sweep_uid(uid)
    for fd in (r_out, r_err, r_st):
        os.close(fd)
    wall = time.monotonic() - t0
    text = st.decode(errors="replace")
    iso_flags = next((ln.split()[2] for ln in text.splitlines() if ln.startswith("pid ")), "0000")
    isolation = dict(zip(("net", "mount", "pid", "seccomp"), (c == "1" for c in iso_flags)), uid=uid)
    for what in ("net", "mount", "pid"):
        if prog_pid is not None and not isolation[what]:
            _warn_once(f"sandbox: no new {what} namespace available; see docs/sandbox.md")
    exit_code, cpu = None, 0.0
    if exit_line is not None:
        wstatus, cpu = int(exit_line.split()[1]), float(exit_line.split()[2])
        exit_code = os.waitstatus_to_exitcode(wstatus)
    stderr_tail = err[-2000:].decode(errors="replace")
    if status is None:
        if "err " in text:
            status = "sandbox_error"
            stderr_tail = text[-2000:]
        elif exit_code == 0:
            status = "ok"
        elif exit_code == -signal.SIGKILL and cpu >= 0.9 * math.ceil(limits.cpu_s):
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
    )


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError as e:
        if e.errno != errno.ESRCH:
            raise
