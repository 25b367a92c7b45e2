"""`tseeds doctor [--python PATH] [--strict]`: can the code sandbox run programs here?

Runs one tiny program (a + b from stdin) through the "code" reward exactly as training does (a
reward worker process, the sandbox, the program) and prints the interpreter, the isolation layers
obtained and, on failure, the failing setup step and OS error (docs/sandbox.md).

Exit codes: 0 the sandbox runs programs; 1 it cannot (every code reward would score 0);
2 bad arguments; 3 (`--strict` only) it runs, but without every isolation layer.
"""

from __future__ import annotations

import argparse
import sys

PROGRAM = "a, b = map(int, input().split())\nprint(a + b)\n"
REFERENCE = {"stdin_stdout": [["2 3\n", "5\n"]]}

_LAYERS = (
    ("mount", "mount namespace", "private /tmp; home directories and the checkout hidden; read-only"),
    ("pid", "pid namespace", "no process outlives the program"),
    ("net", "network namespace", "no interfaces but a downed loopback"),
    ("seccomp", "seccomp filter", "socket families other than AF_UNIX refused"),
)


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
    from tseeds_jax import rewards
    from tseeds_jax.rewards import _pool

    if args.python:
        _pool.restart_shared(args.python)
    try:
        res = rewards.score_result("code", PROGRAM, REFERENCE)
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
        else:
            print(f"  details            {res.details}")
        print("sandbox FAILED: code rewards cannot be graded here (docs/sandbox.md)")
        return 1
    missing = []
    for key, name, what in _LAYERS:
        on = bool(iso.get(key))
        print(f"  {name:<19}{'active' if on else 'NOT active'}: {what}")
        missing += [] if on else [name]
    writable = iso.get("writable_mounts") or []
    if writable:
        print(f"  left writable      {writable} (the kernel refused a read-only remount)")
    if missing:
        print(f"sandbox OK, but without: {', '.join(missing)} (docs/sandbox.md, 'Fallbacks')")
        return 3 if args.strict else 0
    print("sandbox OK: every isolation layer active")
    return 0


if __name__ == "__main__":
    sys.exit(main())
