"""Sandbox: hostile programs score 0 within their limits, leave no process behind, cannot reach the
network, the project, the home directories or the rest of /tmp, and the reward machinery keeps
working afterwards.

Every test runs three times, with the reward workers (and so the sandboxed programs) on three
interpreters: this one; a venv under /tmp; a venv under the (hidden) home directory when running as
root. The venvs hold nothing but the project's path and their interpreter is a symlink chain to the
base one (issue 19: a venv under /tmp made every program a sandbox_error).

Runs through the public "code" reward (reward worker processes). Assertions that depend on kernel
namespaces check the isolation the sandbox reports and are skipped, with the reason, where the system
refuses them (see docs/sandbox.md)."""

import dataclasses
import os
import shutil
import socket
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.sandbox_utils import make_venv, sandbox_processes, workers
from tseeds_jax import rewards
from tseeds_jax.rewards.sandbox import PROJECT_ROOT

ADD = "a, b = map(int, input().split())\nprint(a + b)\n"
ADD_REF = {"stdin_stdout": [["1 2\n", "3\n"], ["10 -4", "6"]]}
MARGIN_S = 3.0


@dataclasses.dataclass
class Setting:
    python: str  # the workers' interpreter
    prefix: str  # its sys.prefix
    beside: str  # a directory next to it, on the host (for files the program must not see)


@pytest.fixture(scope="module", params=["host", "venv_under_tmp", "venv_under_home"], autouse=True)
def setting(request):
    if request.param == "host":
        with workers(None):
            yield Setting(sys.executable, sys.prefix, tempfile.gettempdir())
        return
    if request.param == "venv_under_home" and os.geteuid() != 0:
        pytest.skip("a venv under a hidden home directory is checked when running as root")
    base = "/tmp" if request.param == "venv_under_tmp" else str(Path.home())
    d = tempfile.mkdtemp(dir=base, prefix="tseeds_sbx_venv_")
    try:
        python = make_venv(Path(d, "venv"))
        with workers(python):
            yield Setting(python, str(Path(d, "venv")), d)
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _assert_no_leftovers():
    deadline = time.monotonic() + 2.0  # an exited zombie may take a moment to be reaped
    while sandbox_processes() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sandbox_processes() == []


def _run(program, ref=ADD_REF, **limits):
    t0 = time.monotonic()
    res = rewards.score_result("code", program, ref, **limits)
    return res, time.monotonic() - t0


def _isolation():
    res, _ = _run(ADD)
    assert res.score == 1.0, res
    return res.details["isolation"]


def test_issue_19_snippet_scores_correct(setting):
    res = rewards.score_result("code", ADD, {"stdin_stdout": [["1 2\n", "3\n"]]})
    assert (res.score, res.reason) == (1.0, "correct"), res
    assert res.details["isolation"]["python"] == setting.python  # the workers' own interpreter ran it
    # and the program runs in its environment: a venv stays a venv (its sys.prefix)
    prefix_ref = {"stdin_stdout": [["", setting.prefix]]}
    res = rewards.score_result("code", "import sys\nprint(sys.prefix)\n", prefix_ref)
    assert res.reason == "correct", res


def test_correct_programs_pass_stdin_stdout_and_asserts():
    fenced = "Here you go:\n```python\n" + ADD + "```\nand an unrelated\n```\nprint(0)\n```"
    assert rewards.score("code", fenced, ADD_REF) == 1.0
    src = "def add(a, b):\n    return a + b\n"
    assert rewards.score("code", src, {"asserts": "assert add(2, 3) == 5\nassert add(-1, 1) == 0"}) == 1.0
    both = src + "import sys\nd = sys.stdin.read().split()\nif d: print(add(int(d[0]), int(d[1])))\n"
    assert (
        rewards.score(
            "code", both, {"stdin_stdout": ADD_REF["stdin_stdout"], "asserts": ["assert add(1, 1) == 2"]}
        )
        == 1.0
    )
    # wrong answers: all-or-nothing by default, fraction on request
    half = "a, b = map(int, input().split())\nprint(3)\n"
    assert rewards.score_result("code", half, ADD_REF).reason == "wrong"
    assert rewards.score("code", half, ADD_REF) == 0.0
    assert rewards.score("code", half, ADD_REF, mode="fraction") == 0.5
    assert rewards.score("code", src, {"asserts": "assert add(2, 2) == 5"}) == 0.0
    # whitespace-normalised comparison
    assert rewards.score("code", "print(' 1   2 ')\nprint()\n", {"stdin_stdout": [["", "1 2"]]}) == 1.0


@pytest.mark.parametrize(
    "name,program,limits,reasons",
    [
        ("infinite_loop", "while True:\n    pass\n", dict(cpu_s=1, wall_s=3), {"cpu_limit", "timeout"}),
        ("sleeper", "import time\ntime.sleep(1000)\n", dict(cpu_s=1, wall_s=1), {"timeout"}),
        (
            "fork_bomb",
            "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n",
            dict(cpu_s=1, wall_s=1.5),
            {"timeout", "cpu_limit", "killed"},
        ),
        ("memory_bomb", "x = bytearray(8 << 30)\n", dict(cpu_s=2, wall_s=3), {"memory"}),
        # touching pages costs CPU time: on a loaded machine a limit may trip before the memory one
        (
            "memory_creep",
            "a = []\nwhile True:\n    a.append(bytearray(20 << 20))\n",
            dict(cpu_s=2, wall_s=3, memory_mb=256),
            {"memory", "cpu_limit", "timeout"},
        ),
        (
            "output_flood",
            "import sys\nsys.stdout.write('x' * (100 << 20))\n",
            dict(cpu_s=2, wall_s=5),
            {"output_limit"},
        ),
    ],
)
def test_hostile_program_is_contained(name, program, limits, reasons):
    res, elapsed = _run(program, **limits)
    assert res.score == 0.0 and res.reason in reasons, res
    assert elapsed < limits["wall_s"] + MARGIN_S, elapsed
    _assert_no_leftovers()


def test_daemonised_children_do_not_survive():
    prog = (
        "import os, time\nif os.fork() == 0:\n    os.setsid()\n"
        "    if os.fork() == 0:\n        time.sleep(300)\n    os._exit(0)\n" + ADD
    )
    res, elapsed = _run(prog)
    assert res.score == 1.0, res  # the answer is right; its stray processes are still killed
    _assert_no_leftovers()


def test_no_network():
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    srv.settimeout(0.5)
    port = srv.getsockname()[1]
    prog = (
        "import socket\nok = 0\n"
        f"for fam, addr in [(socket.AF_INET, ('127.0.0.1', {port})), (socket.AF_INET6, ('::1', {port}))]:\n"
        "    try:\n        s = socket.socket(fam, socket.SOCK_STREAM)\n        s.settimeout(1)\n"
        "        s.connect(addr)\n        ok += 1\n    except OSError:\n        pass\nprint(ok)\n"
    )
    try:
        res, elapsed = _run(prog, {"stdin_stdout": [["", "0"]]})
        assert res.score == 1.0, res  # every connection attempt failed inside the sandbox
        with pytest.raises(socket.timeout):
            srv.accept()
    finally:
        srv.close()
    assert elapsed < 4 + MARGIN_S


def test_cannot_write_outside_workdir(tmp_path, setting):
    iso = _isolation()
    tag = f"tseeds_sbx_probe_{os.getpid()}"
    # the interpreter's prefix is bound into the sandbox read-only; /tmp there is the program's own
    # tmpfs (writes to it may succeed, and must not reach the host's /tmp)
    targets = [str(tmp_path / tag), "../" + tag, os.path.join(setting.prefix, tag)]
    if PROJECT_ROOT:
        targets.append(os.path.join(PROJECT_ROOT, tag))
    if iso["mount"]:
        targets.append(os.path.join(tempfile.gettempdir(), tag))  # world-writable on the host
    prog = (
        f"for p in {targets!r}:\n    try:\n        open(p, 'w').write('x')\n"
        "    except OSError:\n        pass\nopen('inside.txt', 'w').write('fine')\nprint('done')\n"
    )
    res, _ = _run(prog, {"stdin_stdout": [["", "done"]]})
    assert res.score == 1.0, res  # the program ran to its end
    for t in targets:
        assert not os.path.exists(t if os.path.isabs(t) else os.path.join(tempfile.gettempdir(), tag)), t


def test_cannot_read_project_home_or_other_tmp(setting):
    iso = _isolation()
    made, readable = [], []
    try:
        dirs = [d for d in (PROJECT_ROOT, str(Path.home())) if d]
        for d in dirs:  # private (0600) files: unreadable with or without a mount namespace
            fd, path = tempfile.mkstemp(dir=d, prefix=".tseeds_sbx_secret_")
            os.write(fd, b"secret")
            os.close(fd)
            made.append(path)
        if iso["mount"]:  # world-readable on the host: hidden only by the mount namespace
            if PROJECT_ROOT:
                readable.append(os.path.join(PROJECT_ROOT, "pyproject.toml"))
            # beside the interpreter's directory (bound back), in /tmp and in the home directory
            for d in {setting.beside, "/tmp", str(Path.home())}:
                fd, path = tempfile.mkstemp(dir=d, prefix="tseeds_sbx_public_")
                os.write(fd, b"public")
                os.close(fd)
                os.chmod(path, 0o644)
                made.append(path)
        paths = made + readable
        prog = (
            f"n = 0\nfor p in {paths!r}:\n    try:\n        open(p).read()\n        n += 1\n"
            "    except OSError:\n        pass\nprint(n)\n"
        )
        res, _ = _run(prog, {"stdin_stdout": [["", "0"]]})
        assert res.score == 1.0, res
    finally:
        for p in made:
            os.unlink(p)
    if not iso["mount"]:
        pytest.skip("no mount namespace here: world-readable project files stay readable (docs/sandbox.md)")


def test_caller_keeps_working_after_hostile_batch():
    hostile = [
        "while True:\n    pass\n",
        "x = bytearray(8 << 30)\n",
        "import os\nos.kill(os.getppid(), 9)\n",
        ADD,
    ]
    res = rewards.score_batch("code", hostile, [ADD_REF] * 4, max_workers=2, cpu_s=1, wall_s=2)
    assert [r.score for r in res] == [0.0, 0.0, 0.0, 1.0], res
    assert rewards.score("code", ADD, ADD_REF) == 1.0
    _assert_no_leftovers()
