"""What runs in the sandbox's forked processes: the setup child and the program (see `sandbox`).

Status lines to the worker (one per line on the status pipe): `iso {json}` — the namespaces
obtained; `pid N {json}` — the program's pid, interpreter and mounts left writable; `exit WSTATUS
CPU_S`; `err {json}` — the failing step and OS error (`_mounts.SetupError.as_dict`).
"""

from __future__ import annotations

import json
import math
import os
import resource
import signal
from pathlib import Path

import tseeds_jax.rewards._linux as lx
import tseeds_jax.rewards._mounts as _mounts
from tseeds_jax.rewards._common import sandbox_process_limits
from tseeds_jax.rewards._mounts import SetupError, step

SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"


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


def _report_error(fd: int, e: BaseException, default_step: str) -> None:
    err = e if isinstance(e, SetupError) else SetupError(default_step, e)
    try:
        os.write(fd, f"err {json.dumps(err.as_dict())}\n".encode())
    except OSError:
        pass


def _program_child(cfg: dict, fds: dict) -> None:
    """Runs in the program process (pid 1 of its namespace when available); never returns."""
    iso, limits = cfg["isolation"], cfg["limits"]
    if iso["mount"] and iso["pid"]:
        step("mount proc on /proc", lx.mount, "proc", "/proc", "proc",
             lx.MS_NOSUID | lx.MS_NODEV | lx.MS_NOEXEC)
    os.dup2(fds["stdin"], 0)
    os.dup2(fds["stdout"], 1)
    os.dup2(fds["stderr"], 2)
    status_fd = fds["status"]
    if cfg.get("harness"):
        # the harness's result pipe on fd 3 and its spec on fd 6 (through high numbers: the status
        # fd may be either); the status fd stays close-on-exec
        os.dup2(fds["result"], 1000)
        os.dup2(fds["spec"], 1001)
        status_fd = fds["status"] = os.dup2(status_fd, 1002, inheritable=False)
        os.dup2(1000, 3)
        os.dup2(1001, 6)
        for lo, hi in ((4, 6), (7, status_fd), (status_fd + 1, 4096)):
            os.closerange(lo, hi)
    else:
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
    if cfg["uid"] is not None or iso.get("user"):
        # counted per user namespace: without one (and without a uid of its own) the limit would
        # count every process of the trainer's user, so it is left to the caller's
        rl.append((resource.RLIMIT_NPROC, limits.nproc, limits.nproc))
    for what, soft, hard in rl:
        step(f"setrlimit {what}", resource.setrlimit, what, (soft, hard))
    step("stack limit and CPU affinity", sandbox_process_limits)
    if cfg["uid"] is not None:
        step("setgroups", os.setgroups, [])
        step(f"setresgid {cfg['uid']}", os.setresgid, cfg["uid"], cfg["uid"], cfg["uid"])
        step(f"setresuid {cfg['uid']}", os.setresuid, cfg["uid"], cfg["uid"], cfg["uid"])
    step("prctl no_new_privs", lx.set_no_new_privs)
    # after setuid: a credential change clears it
    step("prctl parent-death signal", lx.set_parent_death_signal, signal.SIGKILL)
    if iso["seccomp"]:
        step("install seccomp filter", lx.install_filter)
    step(f"chdir {cfg['workdir']}", os.chdir, cfg["workdir"])
    env = {"PATH": SAFE_PATH, "HOME": cfg["workdir"], "TMPDIR": cfg["workdir"], "LANG": "C.UTF-8"}
    python = cfg["python"]
    if os.environ.get(_mounts.FAIL_ENV) == "exec":
        python = "/nonexistent/tseeds-sandbox-test-hook/python3"
    try:
        if cfg.get("harness"):  # RLIMIT_NPROC is ours to set (above), not the harness's (nproc 0)
            os.execve(python, [python, "-I", "-B", *cfg["harness"]], env)
        os.execve(python, [python, "-I", "-B", "main.py"], env)
    except OSError as e:
        hint = f" (needed directories that are themselves hidden: {cfg['refused']})" if cfg["refused"] else ""
        raise SetupError(f"exec {python}", OSError(e.errno, f"{e.strerror}: {python!r}{hint}")) from e


def setup_child(cfg: dict, fds: dict) -> None:
    """Runs in the setup child (root or the calling user); never returns."""
    code = 1
    try:
        os.setsid()
        lx.set_dumpable()  # the worker is not (see _worker); writing our uid_map needs it
        lx.set_parent_death_signal(signal.SIGKILL)  # a killed worker takes its sandbox with it
        lx.set_child_subreaper()  # without a pid namespace, orphans come back here to be reaped
        root = os.geteuid() == 0
        iso = _unshare(root)
        # this process holds a copy of the worker's memory (the expected values): without a pid
        # namespace the program, same uid, could read it through /proc
        lx.set_dumpable(False)
        iso["seccomp"] = cfg["seccomp"] and lx.seccomp_supported()
        os.write(fds["status"], f"iso {json.dumps(iso)}\n".encode())
        uid = cfg["sandbox_uid"] if root else None
        writable: list[str] = []
        if iso["mount"]:
            writable = _mounts.apply(cfg["plan"], cfg["limits"].tmpfs_mb)
            workdir = os.path.join(cfg["plan"].tmp, "work")
            step(f"mkdir {workdir}", os.mkdir, workdir, 0o700)
            python = cfg["python"]
        else:
            workdir = cfg["fallback_workdir"]
            python = cfg["fallback_python"] if uid is not None else cfg["python"]
        step(f"write {workdir}/main.py", Path(workdir, "main.py").write_text, cfg["source"])
        if uid is not None:
            step(f"chown {workdir}", os.chown, workdir, uid, uid)
        child_cfg = dict(cfg, isolation=iso, uid=uid, workdir=workdir, python=python)
        pid = step("fork program", os.fork)
        if pid == 0:
            try:
                _program_child(child_cfg, fds)
            except BaseException as e:  # noqa: BLE001 - report any setup failure, then die
                _report_error(fds["status"], e, "program setup")
            os._exit(127)
        for k in ("stdin", "stdout", "stderr"):
            os.close(fds[k])
        info = {"python": python, "writable_mounts": writable}
        os.write(fds["status"], f"pid {pid} {json.dumps(info)}\n".encode())
        _, wstatus, ru = os.wait4(pid, 0)
        os.write(fds["status"], f"exit {wstatus} {ru.ru_utime + ru.ru_stime:.4f}\n".encode())
        while True:  # reap stray descendants as the worker's uid sweep kills them
            try:
                os.wait()
            except ChildProcessError:
                break
        code = 0
    except BaseException as e:  # noqa: BLE001
        _report_error(fds["status"], e, "sandbox setup")
    finally:
        os._exit(code)
