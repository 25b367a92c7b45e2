"""Issue 34: a code grader that a policy cannot fool.

For each attack class found (early exit in 7 forms, always-equal objects, patched builtins and
modules, reading the tests from its own source or anything else it can reach, the `__main__` idiom,
fraction mode) a wrong program scores 0 and the honest version of the same program scores 1,
through `rewards.score_result` and through a 2-step code-reward training run, as root and as a
non-root user (root creates one; the same runner, `python -m tests.test_grading_integrity CTX`,
runs as both). The runner also holds a key in its session keyring (as a trainer would) that a
hostile program must neither read nor change, and checks that 1 GiB of SysV shared memory, memfd or
tmpfs memory cannot be held under a 128 MiB limit.

Expected scores here are the task's own truth (the honest program is correct on every case, the
wrong one on none), not values read back from the grader.
"""

from __future__ import annotations

import ctypes
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.sandbox_utils import as_user, system_user, workers
from tseeds_jax import rewards
from tseeds_jax.rewards import _mounts, _pool, assert_split, grading, health, sandbox
from tseeds_jax.rewards.sandbox import UID_BASE

ROOT = Path(__file__).resolve().parents[1]
ADD = "def add(a, b):\n    return a + b\n"
WRONG = "def add(a, b):\n    return 0\n"
ADD_REF = {"asserts": "assert add(1, 2) == 3\nassert add(10, -4) == 6, 'negative'"}
HUMANEVAL_REF = {"asserts": "METADATA = {'author': 'x'}\n\n\ndef check(candidate):\n"
                            "    assert candidate(1, 2) == 3\n    assert candidate(10, -4) == 6\n"
                            "\ncheck(add)\n"}
# not splittable (a loop): run by the in-sandbox checker
CHECKED_REF = {"asserts": "def check(candidate):\n    for a in range(1, 4):\n"
                          "        assert candidate(a, a) == 2 * a\n\ncheck(add)\n"}
AREA = "def area(r):\n    return 3.14159265 * r * r\n"
AREA_REF = {"asserts": "import math\nassert abs(area(1.0) - 3.14159) < 1e-3\n"
                       "assert math.isclose(area(2.0), 12.56637, rel_tol=1e-4)"}
FRACTION_REF = {"asserts": ["assert add(1, 2) == 3", "assert add(10, -4) == 6", "assert add(2, 5) == 7",
                            "assert add(-3, -3) == -6"]}

EXITS = {  # the seven ways to end before appended asserts could run (issue 34)
    "os_exit": "import os\nos._exit(0)\n",
    "sys_exit": "import sys\nsys.exit(0)\n",
    "exit_builtin": "exit()\n",
    "raise_systemexit": "raise SystemExit\n",
}
HOOKS = {  # harmless to a correct program, so its honest version keeps them at the top level
    "atexit": "import atexit, os\natexit.register(os._exit, 0)\n",
    "excepthook": "import os, sys\nsys.excepthook = lambda *a: os._exit(0)\n",
    "settrace": ("import os, sys\ndef _t(frame, event, arg):\n"
                 "    if event == 'exception' and issubclass(arg[0], AssertionError):\n"
                 "        os._exit(0)\n    return _t\nsys.settrace(_t)\n"),
}
ALWAYS_EQUAL = ("class Yes:\n    def __eq__(self, other):\n        return True\n"
                "    def __ne__(self, other):\n        return False\n    __hash__ = object.__hash__\n"
                "def add(a, b):\n    return Yes()\n")
INT_EQUAL = ("class Yes(int):\n    def __eq__(self, other):\n        return True\n"
             "def add(a, b):\n    return Yes(0)\n")
PATCHES = ("import builtins, math\nbuiltins.abs = lambda x: 0\nmath.isclose = lambda *a, **k: True\n"
           "builtins.AssertionError = type('Nothing', (Exception,), {})\n")
# looks for the tests everywhere a program can look, and answers from what it found. Each file is
# searched as it is read (only matches are kept: a venv under /tmp holds gigabytes), and the Python
# installation the sandbox binds back read-only is not walked (a venv under /tmp would take longer
# than the program's time; the grader writes nothing there)
READER = r'''import os, re, sys
_PATTERN = re.compile(r"(?:add|candidate)\((-?\d+), (-?\d+)\) == (-?\d+)")
_PYTHON = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix)}
def _found():
    found = []
    paths = [__file__, "/proc/self/cmdline", "/proc/self/environ"]
    for d, dirs, fs in os.walk("/tmp"):
        dirs[:] = [x for x in dirs if os.path.realpath(os.path.join(d, x)) not in _PYTHON]
        paths += [os.path.join(d, f) for f in fs]
    for pid in [p for p in os.listdir("/proc") if p.isdigit()]:
        paths += [f"/proc/{pid}/{n}" for n in ("cmdline", "environ", "mem")]
    for p in paths:
        try:
            with open(p, "rb") as f:
                found += _PATTERN.findall(f.read(1 << 20).decode("latin-1"))
        except OSError:
            pass
    for fd in range(3, 64):
        try:
            found += _PATTERN.findall(os.pread(fd, 1 << 20, 0).decode("latin-1"))
        except OSError:
            pass
    return found
FOUND = _found()
TABLE = {(int(a), int(b)): int(c) for a, b, c in FOUND}
def add(a, b):
    return TABLE.get((a, b), 0)
'''
# writes result frames of its own (on the harness's fd 3, through the checker's /proc) and leaves
FORGER = ("import os\nfor frame in (b\"R['ok', ['i', '3']]\\n\", b\"R['pass', '00']\\n\"):\n"
          "    for how in (lambda: os.write(3, frame), lambda: open('/proc/1/fd/3', 'wb').write(frame)):\n"
          "        try:\n            how()\n        except OSError:\n            pass\nos._exit(0)\n")
MAIN_IDIOM_HONEST = ADD + "import sys\ndef main():\n    print('usage: add A B')\n    return 2\n" \
                          "if __name__ == '__main__':\n    sys.exit(main())\n"
MAIN_IDIOM_WRONG = WRONG + ("import sys\ndef main():\n    return 0\n"
                           "if __name__ == '__main__':\n    sys.exit(main())\n")
SLOW_ADD = "import time\ndef add(a, b):\n    time.sleep(0.5)\n    return a + b\n"
# the reader's control: the answers planted in a file of its own under /tmp, which it must find (so
# that its 0 elsewhere means there was nothing to find, not that it cannot search)
PLANTED = ("import os\nos.makedirs('planted', exist_ok=True)\n"  # in its working directory, under /tmp
           "open('planted/notes.txt', 'w').write('add(1, 2) == 3; add(10, -4) == 6; "
           "add(1, 1) == 2; add(2, 2) == 4; add(3, 3) == 6')\n")


def _guarded(trick: str) -> str:
    return "if __name__ == '__main__':\n" + "".join("    " + ln + "\n" for ln in trick.splitlines())


def cases() -> list[tuple[str, str, dict, dict, float]]:
    """(name, program, reference, options, the score the task's truth gives it)."""
    out = []
    for ref_name, ref in (("asserts", ADD_REF), ("humaneval", HUMANEVAL_REF), ("checked", CHECKED_REF)):
        for name, trick in EXITS.items():
            out.append((f"exit_{name}_{ref_name}_wrong", WRONG + trick, ref, {}, 0.0))
            out.append((f"exit_{name}_{ref_name}_honest", ADD + _guarded(trick), ref, {}, 1.0))
        for name, trick in HOOKS.items():
            out.append((f"exit_{name}_{ref_name}_wrong", WRONG + trick, ref, {}, 0.0))
            out.append((f"exit_{name}_{ref_name}_honest", ADD + trick, ref, {}, 1.0))
        out += [
            (f"always_equal_{ref_name}_wrong", ALWAYS_EQUAL, ref, {}, 0.0),
            (f"int_equal_{ref_name}_wrong", INT_EQUAL, ref, {}, 0.0),
            (f"always_equal_{ref_name}_honest", ADD + "class Yes:\n    pass\n", ref, {}, 1.0),
            (f"read_source_{ref_name}_wrong", READER, ref, {}, 0.0),
            (f"read_source_{ref_name}_honest", READER + ADD, ref, {}, 1.0),
            (f"read_source_{ref_name}_control", PLANTED + READER, ref, {}, 1.0),
            (f"forge_frames_{ref_name}_wrong", WRONG + FORGER, ref, {}, 0.0),
            (f"forge_frames_{ref_name}_honest", ADD + _guarded(FORGER), ref, {}, 1.0),
            (f"main_idiom_{ref_name}_wrong", MAIN_IDIOM_WRONG, ref, {}, 0.0),
            (f"main_idiom_{ref_name}_honest", MAIN_IDIOM_HONEST, ref, {}, 1.0),
        ]
    shadows = "def range(*a):\n    return []\ndef all(*a):\n    return True\n"
    out += [
        # in the checker, the program's names are proxies; builtins it redefines are not
        ("shadow_builtins_checked_wrong", WRONG + shadows, CHECKED_REF, {}, 0.0),
        ("shadow_builtins_checked_honest", ADD + shadows, CHECKED_REF, {}, 1.0),
        ("patched_builtins_wrong", PATCHES + "def area(r):\n    return 0.0\n", AREA_REF, {}, 0.0),
        ("patched_builtins_honest", PATCHES + AREA, AREA_REF, {}, 1.0),
        ("fraction_early_exit_wrong", WRONG + HOOKS["atexit"] + EXITS["os_exit"], FRACTION_REF,
         {"mode": "fraction"}, 0.0),
        ("fraction_always_equal_wrong", ALWAYS_EQUAL, FRACTION_REF, {"mode": "fraction"}, 0.0),
        ("fraction_honest", ADD + HOOKS["atexit"], FRACTION_REF, {"mode": "fraction"}, 1.0),
        ("fraction_three_of_four", "def add(a, b):\n    return 0 if a == 10 else a + b\n", FRACTION_REF,
         {"mode": "fraction"}, 0.75),
        # each assert of one source is its own test with its own limit: 4 x 0.5 s under 1.5 s each
        ("fraction_slow_but_correct", SLOW_ADD, {"asserts": "\n".join(FRACTION_REF["asserts"])},
         {"mode": "fraction", "wall_s": 1.5}, 1.0),
    ]
    return out


def training_cases() -> list[tuple[str, str, dict, dict, float]]:
    """Every attack class once (top-level asserts; the checker through the shadowing pair): the
    training runs stay short, `score_result` covers every form."""
    return [c for c in cases() if not any(f in c[0] for f in ("_humaneval_", "_checked_"))
            or c[0].startswith("shadow_")]


# --- the runner: one process, as root or as the created user ---

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
KEYCTL_JOIN_SESSION_KEYRING, KEYCTL_UPDATE, KEYCTL_READ, KEYCTL_SEARCH = 1, 2, 11, 10
KEY_SPEC_SESSION_KEYRING = -3
_NR = {"x86_64": {"add_key": 248, "keyctl": 250},
       "aarch64": {"add_key": 217, "keyctl": 219}}[os.uname().machine]


def _keyctl(*args) -> int:
    return _libc.syscall(_NR["keyctl"], *[ctypes.c_long(a) if isinstance(a, int) else a for a in args])


def _read_key(key: int) -> bytes | None:
    buf = ctypes.create_string_buffer(256)
    n = _keyctl(KEYCTL_READ, key, buf, 256)
    return buf.raw[:n] if n >= 0 else None


def keyring_program(key: int) -> str:
    """Reads, overwrites and plants keys; prints 'contained' only if every attempt failed."""
    return f'''import ctypes
l = ctypes.CDLL(None, use_errno=True)
l.syscall.restype = ctypes.c_long
buf = ctypes.create_string_buffer(256)
tries = [l.syscall({_NR["keyctl"]}, {KEYCTL_READ}, {key}, buf, 256),
         l.syscall({_NR["keyctl"]}, {KEYCTL_UPDATE}, {key}, b"owned", 5),
         l.syscall({_NR["add_key"]}, b"user", b"tseeds_planted", b"x", 1, {KEY_SPEC_SESSION_KEYRING}),
         l.syscall({_NR["keyctl"]}, 0, {KEY_SPEC_SESSION_KEYRING}, 0)]
import sys
print("contained" if all(t < 0 for t in tries) else "ESCAPED")
print(tries, file=sys.stderr)
'''


MEMORY_PROGRAM = r'''import ctypes, os
l = ctypes.CDLL(None, use_errno=True)
l.syscall.restype = ctypes.c_long
l.shmat.restype = ctypes.c_void_p
l.shmat.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
held = {}
chunk = 64 << 20
n = 0
for _ in range(16):  # 16 x 64 MiB detached SysV segments: 1 GiB counted toward no process
    shm = l.syscall(29 if os.uname().machine == "x86_64" else 194, 0, chunk, 0o1000 | 0o600)
    if shm < 0:
        break
    addr = l.shmat(shm, None, 0)
    if addr in (None, ctypes.c_void_p(-1).value):
        break
    ctypes.memset(addr, 1, chunk)
    l.shmdt(ctypes.c_void_p(addr))
    n += chunk
held["sysv"] = n
for where in ("memfd", "/dev/shm/x", "/tmp/x"):
    n = 0
    try:
        fd = os.memfd_create("x") if where == "memfd" else os.open(where, os.O_CREAT | os.O_WRONLY)
        block = b"x" * (1 << 20)
        for _ in range(1024):
            n += os.write(fd, block)
    except OSError:
        pass
    held[where] = n
print("contained" if all(v < (256 << 20) for v in held.values()) else "ESCAPED")
print(held, file=os.sys.stderr)
'''
CONTAINED = {"stdin_stdout": [["", "contained"]]}
# reads the memory of its parent (the weak backend's setup process, forked from the worker) and
# grandparent (the reward worker), which hold the expected value, and answers with what it found;
# the trainer above them is out of the grading code's reach (docs/sandbox.md, known limits)
ANCESTOR_READER = r'''import os, re
def _ppid(pid):
    return int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
found, pid = None, os.getpid()
for _ in range(2):
    pid = _ppid(pid)
    if pid <= 1 or found:
        break
    try:
        maps = open(f"/proc/{pid}/maps").read().splitlines()
        mem = open(f"/proc/{pid}/mem", "rb")
    except OSError:
        continue
    for line in maps:
        lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
        if line.split()[1].startswith("rw") and hi - lo < 1 << 28:
            try:
                mem.seek(lo)
                m = re.search(rb"tseeds-unique-[0-9]{6}", mem.read(hi - lo))
            except (OSError, ValueError, OverflowError):
                continue
            if m:
                found = m.group(0).decode()
                break
def f():
    return found
'''
UNIQUE_REF = {"asserts": "assert f() == 'tseeds-unique-" + "739155'"}


def _training(ctx: dict, programs: list[tuple[str, str, dict, dict, float]]) -> dict:
    """A 2-step code-reward run whose reward function grades `programs` (cycled over the sampled
    texts) with the trainer's own code reward; returns what each program scored and the steps."""
    from tests.trainer_utils import tiny_cd
    from tseeds_jax.rl import setup
    from tseeds_jax.rl.config import TrainConfig
    from tseeds_jax.rl.setup import make_trainer

    code_reward = setup.make_reward_fn("code")
    seen: dict[str, list[float]] = {}
    offset = [0]

    def reward_fn(texts, refs):
        picked = [programs[(offset[0] + i) % len(programs)] for i in range(len(texts))]
        offset[0] += len(texts)
        out = [None] * len(texts)
        plain = [i for i, p in enumerate(picked) if not p[3]]
        for i, res in zip(plain, code_reward([picked[i][1] for i in plain], [picked[i][2] for i in plain])):
            out[i] = res
        for i, p in enumerate(picked):
            if p[3]:  # reward options (fraction mode): the registry's batch form, as setup's does
                r = rewards.score_batch("code", [p[1]], [p[2]], **p[3])[0]
                out[i] = (r.score, r.reason)
        for p, (score, _) in zip(picked, out):
            seen.setdefault(p[0], []).append(score)
        return out

    group = 4
    prompts = -(-len(programs) // (2 * group))  # two steps see every program
    prompts += prompts % 2  # a batch divisible by the test mesh's 8 devices
    cfg = TrainConfig.from_config(tiny_cd(ctx["run_dir"], steps=2, reward="code",
                                          **{"rollout.batch_prompts": prompts, "rollout.group_size": group}))
    trainer = make_trainer(cfg, checkpoints=False, env_overrides={"reward_fn": reward_fn})
    trainer.run()
    return {"step": trainer.step, "seen": seen}


def run_all(ctx: dict) -> dict:
    from tseeds_jax.rewards import _pool as pool

    _keyctl(KEYCTL_JOIN_SESSION_KEYRING, None)  # a session keyring of our own, as a trainer's
    token = f"tseeds-token-{os.getpid()}".encode()
    key = _libc.syscall(_NR["add_key"], b"user", b"tseeds_trainer_secret", token, len(token),
                        ctypes.c_long(KEY_SPEC_SESSION_KEYRING))
    out: dict = {"uid": os.getuid(), "key_readable_outside": key > 0 and _read_key(key) == token}
    if ctx.get("weak_without_namespaces"):
        # the weakest mode there is: no namespace, the program runs as the trainer's own uid
        from tests.sandbox_utils import workers
        from tseeds_jax.rewards import _mounts

        env = {"TSEEDS_SANDBOX_NO_NAMESPACES": "1", _mounts.FAIL_ENV: "userns", sandbox.WEAK_ENV: "1"}
        with workers(None, **env):
            got = {name: rewards.score_result("code", prog, UNIQUE_REF)
                   for name, prog in (("reader", ANCESTOR_READER), ("honest", "def f():\n    return "
                                                                    "'tseeds-unique-739155'\n"))}
        out["weak"] = {k: [r.score, r.reason, (r.details.get("isolation") or {}).get("weak")]
                       for k, r in got.items()}
        return out
    if ctx.get("train"):
        out["training"] = _training(ctx, training_cases())
    else:
        out["scores"] = {}
        for name, prog, ref, opts, _ in cases():
            r = rewards.score_result("code", prog, ref, **opts)
            out["scores"][name] = [r.score, r.reason, r.details.get("stderr_tail", "")[-200:]]
    r = rewards.score_result("code", keyring_program(key), CONTAINED)
    out["keyring"] = [r.reason, r.details.get("stderr_tail", "")[-300:]]
    out["key_after"] = (_read_key(key) or b"").decode()
    out["key_token"] = token.decode()
    out["planted"] = _keyctl(KEYCTL_SEARCH, KEY_SPEC_SESSION_KEYRING, b"user", b"tseeds_planted", 0)
    r = rewards.score_result("code", MEMORY_PROGRAM, CONTAINED, memory_mb=128, wall_s=8, cpu_s=4)
    out["memory"] = [r.reason, r.details.get("stderr_tail", "")[-300:]]
    out["sweep_failures"] = health.sweep_failures()
    pool.restart_shared(None)
    return out


def _run_runner(ctx: dict, prefix: list[str] | None = None, timeout: int = 300) -> dict:
    cmd = (prefix or []) + [sys.executable, "-m", "tests.test_grading_integrity", json.dumps(ctx)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-4000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _check_common(out: dict) -> None:
    assert out["key_readable_outside"], out  # the trainer itself can read its key
    assert out["keyring"][0] == "correct", out["keyring"]  # every keyring call refused inside
    assert out["key_after"] == out["key_token"] and out["planted"] < 0, out
    assert out["memory"][0] in ("correct", "memory"), out["memory"]  # refused, or stopped by the limit
    assert out["sweep_failures"] == [], out


def _check_scores(out: dict) -> None:
    _check_common(out)
    bad = {name: out["scores"][name] for name, *_, want in cases() if out["scores"][name][0] != want}
    assert not bad, bad


def _check_training(out: dict) -> None:
    _check_common(out)
    t = out["training"]
    assert t["step"] == 2, t
    bad = {name: t["seen"].get(name) for name, *_, want in training_cases()
           if not t["seen"].get(name) or any(s != want for s in t["seen"][name])}
    assert not bad, bad


@pytest.fixture(scope="module")
def user():
    if os.geteuid() != 0:
        yield None  # this user is the non-root trainer
        return
    with system_user(f"tsgi{os.getpid() % 100000}") as pw:
        yield pw


def _as(user, ctx: dict, timeout: int = 300) -> dict:
    if user is None:
        return _run_runner(ctx, timeout=timeout)
    with as_user(user) as prefix:
        return _run_runner(ctx, prefix, timeout=timeout)


def _run_dir(user) -> str:
    d = tempfile.mkdtemp(prefix="tseeds_gi_run_")
    if user is not None:
        os.chown(d, user.pw_uid, user.pw_gid)
    return d


@pytest.mark.skipif(os.geteuid() != 0, reason="the root trainer's run needs root")
def test_attacks_score_zero_and_honest_programs_one_as_root():
    out = _run_runner({})
    assert out["uid"] == 0
    _check_scores(out)


def test_attacks_score_zero_and_honest_programs_one_as_non_root(user):
    out = _as(user, {})
    assert out["uid"] != 0
    _check_scores(out)


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="the root trainer's run needs root")
def test_two_step_code_reward_run_as_root():
    out = _run_runner({"train": True, "run_dir": _run_dir(None)}, timeout=600)
    _check_training(out)


@pytest.mark.slow
def test_two_step_code_reward_run_as_non_root(user):
    out = _as(user, {"train": True, "run_dir": _run_dir(user)}, timeout=600)
    assert out["uid"] != 0
    _check_training(out)


def test_weak_isolation_keeps_the_grading_protocol():
    """Under the switch (a machine without user namespaces, made by the test hook), the harness
    runs in the weak backend with the same protocol: split asserts and the checker both hold."""
    picked = {"exit_os_exit_asserts_wrong", "exit_os_exit_asserts_honest", "always_equal_humaneval_wrong",
              "main_idiom_humaneval_honest", "exit_sys_exit_checked_wrong", "read_source_checked_honest",
              "read_source_asserts_control", "patched_builtins_wrong", "fraction_three_of_four"}
    with workers(None, **{_mounts.FAIL_ENV: "userns", sandbox.WEAK_ENV: "1"}):
        got = {name: (rewards.score_result("code", prog, ref, **opts), want)
               for name, prog, ref, opts, want in cases() if name in picked}
    assert len(got) == len(picked)
    bad = {n: (r.score, r.reason, want) for n, (r, want) in got.items()
           if r.score != want or not r.details["isolation"].get("weak")}
    assert not bad, bad


def test_weak_backend_without_namespaces_hides_the_expected_values_in_memory(user):
    """As the trainer's own uid with no namespace at all, a program reading the memory of the
    reward worker and of the setup process (both hold the expected value) finds nothing: both are
    non-dumpable."""
    out = _as(user, {"weak_without_namespaces": True})
    assert out["weak"] == {"reader": [0.0, "wrong", True], "honest": [1.0, "correct", True]}, out


# --- the splitter and the outside comparison, without a sandbox ---


def test_split_keeps_expected_values_out_of_what_enters_the_sandbox():
    sp = assert_split.split("import math\nX = [1, 2]\nY = 99\nassert f(X) == Y\n"
                            "assert 7 == g(1)\nassert abs(h(2) - 0.5) <= 1e-6\n"
                            "assert math.isclose(h(3), 2.5, abs_tol=0.1)\nassert not p(4)\n"
                            "assert q() is None\n")
    setup = [s.code for s in sp.steps if s.kind == "exec"]
    tests = [s for s in sp.steps if s.kind == "eval"]
    assert setup == ["import math", "X = [1, 2]"]  # Y (an expected value) stays outside
    assert [t.code for t in tests] == ["f(X)", "g(1)", "h(2)", "h(3)", "p(4)", "q()"]
    assert [t.check.kind for t in tests] == ["eq", "eq", "abs_le", "close", "falsy", "is"]
    assert [t.check.expected for t in tests][:4] == [99, 7, 0.5, 2.5]
    assert tests[3].check.abs_tol == 0.1 and tests[2].check.abs_tol == 1e-6
    more = assert_split.split("assert True, 'debug'\nassert set(f(1)) == set((4, 5))\n"
                              "assert g(2) == float('inf')\n").steps
    assert [(t.code, t.check.expected) for t in more] == [("set(f(1))", {4, 5}), ("g(2)", float("inf"))]
    sent = json.dumps([s.code for s in sp.steps])
    assert "99" not in sent and "0.5" not in sent and "2.5" not in sent
    for src in ("for i in range(3):\n    assert f(i) == i\n", "assert f(1) == f(2)\n",
                "def helper():\n    return 1\nassert f(1) == helper()\n", "assert True\n", "x = f(1)\n"):
        with pytest.raises(assert_split.Unsplittable):
            assert_split.split(src)


def test_outside_comparison_follows_python_semantics_on_plain_values():
    eq = assert_split.Check("eq", [1, (2.0, "a")])
    assert grading.matches([1, (2, "a")], eq) and not grading.matches([1, [2, "a"]], eq)
    assert grading.matches(1, assert_split.Check("eq", True))  # 1 == True, as in Python
    assert not grading.matches(float("nan"), assert_split.Check("eq", float("nan")))
    assert grading.matches(0.30000000000000004, assert_split.Check("close", 0.3))
    assert not grading.matches(0.31, assert_split.Check("abs_lt", 0.3, abs_tol=0.01))
    assert grading.matches(0.3, assert_split.Check("abs_le", 0.31, abs_tol=0.01 + 1e-12))
    assert not grading.matches("0.3", assert_split.Check("close", 0.3))
    falsy = assert_split.Check("falsy")
    assert grading.matches(0, falsy) and not grading.matches([0], falsy)
    assert grading.matches(None, assert_split.Check("is", None))
    assert not grading.matches(1, assert_split.Check("is", True))


def test_only_one_well_formed_result_frame_per_step_counts():
    sp = assert_split.split("assert add(1, 2) == 3\nassert add(2, 2) == 4\n")

    def outcomes(*frames: bytes) -> list:
        d = grading.StepDialog(sp, wall_s=4, cpu_s=2, budget_end=time.monotonic() + 30, stop_early=False)
        for f in frames:
            d.received(f)
        d.ended("ok")
        return [o[0] for o in d.outcomes]

    assert outcomes(b"R[0, 'done']\n", b"R[1, 'ok', 3]\n", b"R[2, 'ok', 4]\n") == ["correct", "correct"]
    assert outcomes(b"R[0, 'done']\nR[1, 'ok', 3]\nR[2, 'ok', 4]\n") == ["correct", "correct"]  # one chunk
    start = [b"R[0, 'done']\n", b"R[1, 'ok', 3]\n"]
    # only the program could have written a frame the harness would not (issue 54: a tampering verdict);
    # a run that exits 0 with an answer outstanding ended itself early
    for frames, want in (([*start, b"R[1, 'ok', 3]\n"], ["correct", "tampering"]),  # a step answered twice
                         ([start[0], b"R[2, 'ok', 4]\n"], ["tampering", "no_result"]),  # out of turn
                         ([*start, b"R{'a': 1}\n"], ["correct", "tampering"]),  # not a frame
                         ([*start, b"Rnot a literal\n"], ["correct", "tampering"]),
                         ([*start, b"R[2, 'ok', 4]"], ["correct", "tampering"])):  # never ended
        assert outcomes(*frames) == want, frames


# --- the uid sweep after a killed worker (issue 34: it failed on every kill, silently) ---


@rewards.register("_test_sandboxed_sleeper", isolation="process", hard_timeout_s=3.0)
def _sandboxed_sleeper(response, reference):
    return sandbox.run_program("import time\ntime.sleep(60)\n", "",
                               sandbox.SandboxLimits(cpu_s=30, wall_s=30)).status


def test_sweep_command_runs():
    proc = subprocess.run(_pool.sweep_command(UID_BASE + 1), capture_output=True, text=True, timeout=60)
    if os.geteuid() == 0:
        assert proc.returncode == 0, proc.stderr
    else:  # the module ran and said why it could not sweep (not an ImportError)
        assert proc.returncode == 1 and "sweep of uid" in proc.stderr, proc.stderr


def test_a_failed_sweep_is_logged_and_counted(monkeypatch, caplog):
    before = len(health.sweep_failures())
    monkeypatch.setattr(_pool, "sweep_command", lambda uid: [sys.executable, "-c", "import sys; sys.exit(3)"])
    with caplog.at_level(logging.ERROR, logger="tseeds_jax.rewards"):
        assert _pool.sweep(UID_BASE + 7) is False
    assert len(health.sweep_failures()) == before + 1 and "exit 3" in health.sweep_failures()[-1]
    assert "sweep of its sandbox uid" in caplog.text
    assert health.status()["sweep_failures"] == health.sweep_failures()


@pytest.mark.skipif(os.geteuid() != 0, reason="the uid sweep runs for root trainers")
def test_killed_worker_is_swept_as_root():
    before = len(health.sweep_failures())
    t0 = time.monotonic()
    res = rewards.score_result("_test_sandboxed_sleeper", "", None)
    assert res.reason == "timeout" and time.monotonic() - t0 < 20, res
    assert health.sweep_failures()[before:] == []


if __name__ == "__main__":
    print(json.dumps(run_all(json.loads(sys.argv[1]))))
