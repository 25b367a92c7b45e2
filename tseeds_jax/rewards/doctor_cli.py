"""`tseeds doctor [--python PATH] [--strict]`: can the code sandbox run programs here?

Runs one tiny program (a + b from stdin) through the "code" reward exactly as training does (a
reward worker process, the sandbox, the program) and prints the interpreter, the isolation layers
obtained and, on failure, the failing setup step, OS error and missing layer (docs/sandbox.md);
then what a program can see: the read-only binds, the hidden site-packages, and a probe program's
own listing of its root, /tmp and its identity.

Exit codes: 0 the sandbox grades with every layer; 1 it refuses or cannot (every code reward
would be a sandbox_error); 2 bad arguments; 3 (`--strict` only) it grades, but with the weaker
isolation the switch `sandbox_allow_weak_isolation` allowed.
"""

from __future__ import annotations

import argparse
import sys

PROGRAM = "a, b = map(int, input().split())\nprint(a + b)\n"
REFERENCE = {"stdin_stdout": [["2 3\n", "5\n"]]}

_LAYERS = (
    ("allowlisted_root", "allowlisted root", "only /usr, the interpreter, /proc, /dev (a 16 MiB /dev/shm), a "
                                             "private /tmp, the CPU count (4)"),
    ("user", "user namespace", "only the program's own uid and gid mapped"),
    ("mount", "mount namespace", "the host's mounts out of reach"),
    ("pid", "pid namespace", "no process outlives the program"),
    ("net", "network namespace", "no interfaces but a downed loopback"),
    ("seccomp", "seccomp filter", "sockets but AF_UNIX, io_uring, keyring, SysV IPC, memfd, namespaces, "
                                  "ptrace refused"),
)
# What the seccomp filter must refuse, tried from the inside: (name, syscall numbers (x86-64,
# aarch64), arguments). Each line of the probe's output: NAME ERRNO (0: the call succeeded).
KERNEL_PROBE = """import ctypes, os
l = ctypes.CDLL(None, use_errno=True)
l.syscall.restype = ctypes.c_long
arm = os.uname().machine == "aarch64"
for name, x86, a64, args in [
        ("keyring (keyctl)", 250, 219, (0, -3, 0)),
        ("keyring (add_key)", 248, 217, (b"user", b"tseeds_doctor", b"x", 1, -3)),
        ("SysV shared memory (shmget)", 29, 194, (0, 1 << 20, 0o1000 | 0o600)),
        ("SysV semaphores (semget)", 64, 190, (0, 1, 0o1000 | 0o600)),
        ("SysV messages (msgget)", 68, 186, (0, 0o1000 | 0o600)),
        ("memfd_create", 319, 279, (b"x", 0)),
        ("new user namespace (unshare)", 272, 97, (0x10000000,)),
        ("ptrace", 101, 117, (0, 0, 0, 0)),
]:
    r = l.syscall(a64 if arm else x86, *[ctypes.c_long(a) if isinstance(a, int) else a for a in args])
    print(name + "|" + str(ctypes.get_errno() if r < 0 else 0))
"""
# The grading protocol, end to end: a wrong program that ends before the tests (the issue 34
# attack) must score 0 on split asserts, an always-equal object (issue 45: an assert form the
# splitter leaves to the checker) 0 there, and the honest versions 1.
GRADING_REFERENCE = {"asserts": "assert add(1, 2) == 3\nassert add(10, -4) == 6"}
CHECKED_REFERENCE = {"asserts": "assert add(1, 2) == 3 and add(10, -4) == 6"}
GRADING_WRONG = "import os\ndef add(a, b):\n    return 0\nos._exit(0)\n"
CHECKED_WRONG = ("class Yes:\n    def __eq__(self, other):\n        return True\n"
                 "def add(a, b):\n    return Yes()\n")
GRADING_HONEST = "import sys\ndef add(a, b):\n    return a + b\nif __name__ == '__main__':\n    sys.exit(3)\n"
# What the program sees, from the inside (run by `main` in this process: it is single-threaded).
PROBE = """import os
print("uid", os.getuid(), "gid", os.getgid(), "groups", os.getgroups(), "cpus", os.cpu_count())
for top in ("/", "/tmp", "/dev"):
    for name in sorted(os.listdir(top)):
        p = os.path.join(top, name)
        kind = "-> " + os.readlink(p) if os.path.islink(p) else ("dir" if os.path.isdir(p) else "file")
        print(p, kind, "writable" if os.access(p, os.W_OK) else "read-only")
for d, _, files in os.walk("/sys"):
    for name in sorted(files):
        p = os.path.join(d, name)
        print(p, "file", "writable" if os.access(p, os.W_OK) else "read-only")
"""


def _parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="tseeds doctor", description=__doc__.split("\n\n")[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--python", help="run the reward workers with this interpreter (default: this one)")
    p.add_argument("--strict", action="store_true", help="exit 3 unless every isolation layer is active")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    try:
        args = _parse(list(sys.argv[1:] if argv is None else argv))
    except SystemExit as e:
        return int(e.code or 0)
    import tseeds_jax.rewards._pool as _pool  # noqa: F401 - code_reward registers "code"
    import tseeds_jax.rewards.code_reward as code_reward  # noqa: F401 - code_reward registers "code"
    import tseeds_jax.rewards.registry as registry  # noqa: F401 - code_reward registers "code"

    if args.python:
        _pool.restart_shared(args.python)
    try:
        res = registry.score_result("code", PROGRAM, REFERENCE)
    finally:
        if args.python:
            _pool.restart_shared(None)
    iso = res.details.get("isolation") or {}
    print("tseeds doctor: code sandbox")
    print(f"  interpreter        {iso.get('python') or args.python or sys.executable}")
    uid = iso.get("uid")
    print(f"  program uid        {uid if uid is not None else 'the caller (not root: no uid switch)'}")
    print(f"  test program       {res.score:.1f} {res.reason} ({res.details.get('seconds', 0.0):.2f} s)")
    if res.reason != "correct":
        err = res.details.get("sandbox_error")
        if err:
            errno_txt = f" (errno {err.get('errno')} {err.get('errno_name')})" if err.get("errno") else ""
            print(f"  failing step       {err.get('step')}{errno_txt}")
            print(f"  error              {err.get('error')}")
            if err.get("layer"):
                print(f"  missing layer      {err.get('layer')}")
        else:
            print(f"  details            {res.details}")
        print("sandbox FAILED: code rewards cannot be graded here (docs/sandbox.md); a missing layer"
              " may be excused with sandbox_allow_weak_isolation=True")
        return 1
    missing = []
    for key, name, what in _LAYERS:
        on = bool(iso.get(key))
        print(f"  {name:<19}{'active' if on else 'NOT active'}: {what}")
        missing += [] if on else [name]
    if iso.get("weak"):
        print(f"  WEAK isolation     allowed by sandbox_allow_weak_isolation: {iso.get('missing_layer')} "
              f"unavailable ({iso.get('why')})")
    writable = iso.get("writable_mounts") or []
    if writable:
        print(f"  left writable      {writable} (the kernel refused a read-only remount)")
    missing += _show_kernel_layers() + _show_grading()
    _show_view()
    if missing:
        print(f"sandbox grades, but without: {', '.join(missing)} (docs/sandbox.md, 'Weaker isolation')")
        return 3 if args.strict else 0
    print("sandbox OK: every isolation layer active")
    return 0


def _show_kernel_layers() -> list[str]:
    """Each call the filter must refuse, tried inside the sandbox; the ones that went through."""
    import errno

    import tseeds_jax.rewards.sandbox as sandbox

    res = sandbox.run_program(KERNEL_PROBE, "")
    if res.status != "ok":
        print(f"  kernel probe       {res.status}: {res.stderr_tail.strip()[-300:]}")
        return ["kernel probe"]
    allowed = []
    for line in res.stdout.splitlines():
        name, _, err = line.rpartition("|")
        refused = err.isdigit() and int(err) != 0
        how = f"refused ({errno.errorcode.get(int(err), err)})" if refused else "ALLOWED"
        print(f"  {name:<34}{how}")
        allowed += [] if refused else [name]
    return allowed


def _show_grading() -> list[str]:
    import tseeds_jax.rewards.health as health
    import tseeds_jax.rewards.registry as registry

    wrong = registry.score_result("code", GRADING_WRONG, GRADING_REFERENCE)
    honest = registry.score_result("code", GRADING_HONEST, GRADING_REFERENCE)
    wrong_c = registry.score_result("code", CHECKED_WRONG, CHECKED_REFERENCE)
    honest_c = registry.score_result("code", GRADING_HONEST, CHECKED_REFERENCE)
    ok = wrong.score == 0.0 and honest.score == 1.0 and wrong_c.score == 0.0 and honest_c.score == 1.0
    print(f"  grading protocol   {'active' if ok else 'FAILED'}: asserts split, expected values kept "
          f"outside; an early-exit wrong program scored {wrong.score:.0f} ({wrong.reason}), its honest "
          f"version {honest.score:.0f} ({honest.reason}); in the checker an always-equal object scored "
          f"{wrong_c.score:.0f} ({wrong_c.reason}), the honest version {honest_c.score:.0f} "
          f"({honest_c.reason})")
    failed = health.sweep_failures()
    print(f"  uid sweeps failed  {len(failed)}" + (f": {failed[-1]}" if failed else ""))
    return [] if ok else ["grading protocol"]


def _show_view() -> None:
    import tseeds_jax.rewards._bwrap as _bwrap
    import tseeds_jax.rewards.sandbox as sandbox

    print("what a program can see (this interpreter):")
    try:
        view = _bwrap.plan_view(sandbox.configured_binds())
    except Exception as e:  # noqa: BLE001 - the probe below still says what it can
        print(f"  (cannot plan the sandbox's root: {e})")
    else:
        for src, dest in view.binds:
            print(f"  read-only bind     {dest}" + (f" (from {src})" if src != dest else ""))
        for loc, target in view.links:
            print(f"  symlink            {loc} -> {target}")
        for h in view.hide:
            print(f"  hidden (empty)     {h}")
    res = sandbox.run_program(PROBE, "")
    if res.status != "ok":
        print(f"  probe program      {res.status}: {res.stderr_tail.strip()[-300:]}")
        return
    for line in res.stdout.splitlines():
        print(f"  seen               {line}")


if __name__ == "__main__":
    sys.exit(main())
