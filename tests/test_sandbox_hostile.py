"""Hostile programs against the code sandbox, as root AND as a non-root trainer (issue 25).

As root, the test creates a user in a group that owns a root-owned unix socket under /run, and a
world-readable secret file outside every directory the old sandbox hid; it then runs the same
attacks twice through `rewards.score_result("code", ...)`: as root, and as that user (setpriv),
both with the soft process limit raised to the hard one (the project's interpreter lives under
/root, so the user's run gets a private mount namespace in which /root holds only .pyenv).
Each run first checks, outside the sandbox, that the runner itself CAN read the secret and (as
the user) connect to the socket, so a contained attack means the sandbox stopped it. Not root:
the attacks run as the current user against a secret and a socket it owns.

`python -m tests.test_sandbox_hostile CTX_JSON` is the runner (prints one JSON line).
"""

from __future__ import annotations

import grp
import json
import os
import pwd
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.sandbox_utils import another_process_sandbox, as_user, no_outer_limit, sandbox_processes
from tseeds_jax.rewards.sandbox import UID_BASE

ROOT = Path(__file__).resolve().parents[1]
OK = {"stdin_stdout": [["", "contained"]]}


def _probe(body: str) -> str:
    """A program that prints ESCAPED if `body` (indented into a try) runs to its end."""
    lines = "\n".join("    " + ln for ln in body.strip().splitlines())
    return (f"import os, socket\ntry:\n{lines}\n    print('ESCAPED')\n"
            "except Exception:\n    print('contained')\n")


def attacks(ctx: dict) -> list[tuple[str, str, dict, set[str]]]:
    """(name, program, limits, reasons a contained run may end with)."""
    fork_count = (
        "import os, time\nn = 0\nfor _ in range(100):\n    try:\n        if os.fork() == 0:\n"
        "            time.sleep(5)\n            os._exit(0)\n        n += 1\n"
        "    except OSError:\n        break\n"
        "print('contained' if n < 100 else 'ESCAPED')\n"
    )
    return [
        ("read_secret", _probe(f"open({ctx['secret']!r}).read()"), {}, {"correct"}),
        ("read_checkout", _probe(f"open({str(ROOT / 'pyproject.toml')!r}).read()"), {}, {"correct"}),
        ("connect_socket", _probe(f"s = socket.socket(socket.AF_UNIX)\ns.connect({ctx['socket']!r})"), {},
         {"correct"}),
        ("list_run", _probe("os.listdir('/run')"), {}, {"correct"}),
        ("tcp_localhost", _probe(f"s = socket.create_connection(('127.0.0.1', {ctx['port']}), 1)"), {},
         {"correct"}),
        ("write_home", _probe(f"open({ctx['home'] + '/tseeds_probe'!r}, 'w').write('x')"), {}, {"correct"}),
        ("write_rundir", _probe(f"open({ctx['rundir'] + '/tseeds_probe'!r}, 'w').write('x')"), {},
         {"correct"}),
        ("fork_count", fork_count, {"wall_s": 3}, {"correct"}),
        ("fork_bomb", "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n"
         "        pass\n", {"cpu_s": 1, "wall_s": 1.5}, {"timeout", "cpu_limit", "killed"}),
        ("memory_bomb", "try:\n    x = bytearray(8 << 30)\n    print('ESCAPED')\nexcept MemoryError:\n"
         "    print('contained')\n", {}, {"correct"}),
        ("output_100mb", "import sys\nsys.stdout.write('x' * (100 << 20))\n", {"wall_s": 5},
         {"output_limit"}),
    ]


def run_all(ctx: dict) -> dict:
    """The runner: controls outside the sandbox, then every attack through the code reward."""
    from tseeds_jax import rewards
    from tseeds_jax.rewards import _pool

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    srv.settimeout(0.2)
    ctx = dict(ctx, port=srv.getsockname()[1])
    controls = {"secret_readable": False, "socket_connectable": False}
    try:
        controls["secret_readable"] = Path(ctx["secret"]).read_text() == ctx["secret_text"]
    except OSError:
        pass
    try:
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(ctx["socket"])
            controls["socket_connectable"] = True
    except OSError:
        pass
    out = {"uid": os.getuid(), "groups": os.getgroups(), "controls": controls,
           "nproc_limit": resource.getrlimit(resource.RLIMIT_NPROC), "attacks": {}}
    for name, prog, limits, _ in attacks(ctx):
        t0 = time.monotonic()
        res = rewards.score_result("code", prog, OK, **limits)
        iso = res.details.get("isolation") or {}
        out["attacks"][name] = {"reason": res.reason, "seconds": round(time.monotonic() - t0, 2),
                                "allowlisted_root": iso.get("allowlisted_root"),
                                "error": res.details.get("sandbox_error")}
    try:
        srv.accept()
        out["tcp_accepted"] = True
    except OSError:
        out["tcp_accepted"] = False
    srv.close()
    out["written"] = [p for p in (ctx["home"] + "/tseeds_probe", ctx["rundir"] + "/tseeds_probe")
                      if os.path.exists(p)]
    _pool.restart_shared(None)  # workers gone: whatever is left of our uid is a sandbox's stray
    who = None if os.geteuid() == 0 else os.getuid()
    deadline = time.monotonic() + 3.0  # killed processes may take a moment to be reaped
    while sandbox_processes(who, zombies=False) and time.monotonic() < deadline:
        time.sleep(0.05)
    out["leftovers"] = []
    for p in sandbox_processes(who, zombies=False):
        try:
            out["leftovers"].append(Path(f"/proc/{p}/cmdline").read_bytes().decode(errors="replace")[:100])
        except OSError:
            pass  # gone meanwhile
    return out


def _check(out: dict, ctx: dict, *, as_user: bool) -> None:
    assert out["controls"]["secret_readable"], out  # the secret is readable outside the sandbox
    if as_user:
        assert out["controls"]["socket_connectable"], out  # and the group opens the socket
        assert out["nproc_limit"][0] == out["nproc_limit"][1], out  # no outer process limit
    for name, _, limits, reasons in attacks(dict(ctx, port=0)):
        got = out["attacks"][name]
        assert got["reason"] in reasons, (name, got)
        assert got["allowlisted_root"], (name, got)
        assert got["seconds"] < limits.get("wall_s", 4.0) + 3.0, (name, got)
    assert not out["tcp_accepted"] and out["written"] == [] and out["leftovers"] == [], out


def _run_runner(ctx: dict, prefix: list[str] | None = None) -> dict:
    cmd = (prefix or []) + [sys.executable, "-m", "tests.test_sandbox_hostile", json.dumps(ctx)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=240,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-4000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def world():
    """Root: a user in a group owning a root-owned socket under /run, a world-readable secret
    outside every hidden directory, the user's home and a run directory it owns."""
    if os.geteuid() != 0:
        d = Path(tempfile.mkdtemp(prefix="tseeds_sbx_world_"))
        secret = d / "secret.txt"
        secret.write_text("the hidden tests")
        srv = socket.socket(socket.AF_UNIX)
        srv.bind(str(d / "tseeds.sock"))
        srv.listen(8)
        (d / "run").mkdir()
        yield {"secret": str(secret), "secret_text": "the hidden tests", "socket": str(d / "tseeds.sock"),
               "home": str(Path.home()), "rundir": str(d / "run")}
        srv.close()
        shutil.rmtree(d, ignore_errors=True)
        return
    tag = f"tsbx{os.getpid() % 100000}"
    user, group = f"{tag}u", f"{tag}g"
    subprocess.run(["groupadd", group], check=True)
    subprocess.run(["useradd", "-m", "-G", group, "-s", "/bin/sh", user], check=True)
    secret_dir = Path(f"/opt/{tag}_data")
    secret_dir.mkdir(mode=0o755)
    secret = secret_dir / "hidden_tests.txt"
    secret.write_text("the hidden tests")
    secret.chmod(0o644)
    sock_path = f"/run/{tag}.sock"
    srv = socket.socket(socket.AF_UNIX)
    srv.bind(sock_path)
    srv.listen(64)
    os.chown(sock_path, 0, grp.getgrnam(group).gr_gid)
    os.chmod(sock_path, 0o660)
    pw = pwd.getpwnam(user)
    rundir = Path(pw.pw_dir, "run")
    rundir.mkdir()
    os.chown(rundir, pw.pw_uid, pw.pw_gid)
    try:
        yield {"secret": str(secret), "secret_text": "the hidden tests", "socket": sock_path,
               "home": pw.pw_dir, "rundir": str(rundir), "user": user, "group": group}
    finally:
        srv.close()
        os.unlink(sock_path)
        shutil.rmtree(secret_dir, ignore_errors=True)
        deadline = time.monotonic() + 5.0  # userdel refuses while the user's workers are exiting
        while sandbox_processes(pw.pw_uid, zombies=False) and time.monotonic() < deadline:
            time.sleep(0.05)
        subprocess.run(["userdel", "-f", "-r", user], check=False, capture_output=True)
        subprocess.run(["groupdel", group], check=False, capture_output=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="the root trainer's run needs root")
def test_hostile_programs_contained_as_root(world):
    # no outer process limit: the sandbox's own RLIMIT_NPROC must stop the fork bomb
    out = _run_runner(world, no_outer_limit())
    assert out["uid"] == 0 and out["nproc_limit"][0] == out["nproc_limit"][1], out
    _check(out, world, as_user=False)


def test_hostile_programs_contained_as_non_root_user(world):
    if os.geteuid() != 0:  # CI-less machines: this user is the non-root trainer
        out = _run_runner(world)
        _check(out, world, as_user=False)
        return
    pw = pwd.getpwnam(world["user"])
    with as_user(pw) as prefix:
        out = _run_runner(world, prefix)
    assert out["uid"] == pw.pw_uid and grp.getgrnam(world["group"]).gr_gid in out["groups"], out
    _check(out, world, as_user=True)


if __name__ == "__main__":
    print(json.dumps(run_all(json.loads(sys.argv[1]))))


def test_leftover_check_counts_this_process_sandboxes_and_not_another_process():
    """The leftover checks above must still see this process's own strays while the other
    pytest-xdist worker grades at the same moment (its sandbox uids are its workers' pids)."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert not another_process_sandbox(UID_BASE + child.pid)  # a worker of this process
    finally:
        child.kill()
        child.wait()
    assert not another_process_sandbox(UID_BASE + child.pid)  # its worker gone: a stray still counts
    assert another_process_sandbox(UID_BASE + os.getppid())  # alive, not below this process
