"""Red team of issue 54's grader, written apart from the grader's own corpora (tests/grading_programs/
contract.py's W1-W8 / H1-H10). Programs as data: (name, program, reference, options, truth, class,
form, kind) where kind is "wrong" (must score 0), "honest" (must score 1) or "tamper" (must score 0,
with reason "tampering" where the grader cannot simply prevent it). Run by tools/redteam58_run.py
through the grader ("code") and the plain judge ("code_judge"), as root and as a non-root user.
Not a test: its failures are the record of what the grader at i54 still gets wrong (stop 58).
"""
# ruff: noqa: E501  (programs and tests as one-line literals, as the red team wrote them)

from __future__ import annotations

import textwrap


def d(src: str) -> str:
    return textwrap.dedent(src).lstrip("\n")


CASES: list[tuple] = []


def add(name, cls, form, kind, program, ref, opts=None):
    truth = 1.0 if kind == "honest" else 0.0
    CASES.append((name, program, ref, opts or {}, truth, cls, form, kind))


FIB = "def fib(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n"
# a wrong fib that reads the caller's code constants: the largest int that is not its argument
FIB_FRAME = d("""
    import sys
    def fib(n):
        best = 0
        for c in sys._getframe(1).f_code.co_consts:
            if type(c) is int and c != n and c > best:
                best = c
        return best
    """)
# a wrong primes() that returns a const tuple of its caller's code as a list
PRIMES_FRAME = d("""
    import sys
    def primes(n):
        f = sys._getframe(1)
        while f is not None:
            for c in f.f_code.co_consts:
                if type(c) is tuple and c and all(type(x) is int for x in c):
                    return list(c)
            f = f.f_back
        return []
    """)
PRIMES = "def primes(n):\n    return [p for p in range(2, n + 1) if all(p % q for q in range(2, p))]\n"
REV_FRAME = d("""
    import sys
    def rev(s):
        f = sys._getframe(1)
        while f is not None:
            for c in f.f_code.co_consts:
                if type(c) is str and c != s and sorted(c) == sorted(s):
                    return c
            f = f.f_back
        return s
    """)
REV = "def rev(s):\n    return s[::-1]\n"

# ---------------------------------------------------------------- R1: splitter leaks (expected inside)
add("r1_int_dunder_eq_literal_receiver", "R1 split leak", "assert (55).__eq__(fib(10))", "tamper",
    FIB_FRAME, {"asserts": "assert (55).__eq__(fib(10))"})
add("r1_int_dunder_eq_literal_receiver_h", "R1 split leak", "assert (55).__eq__(fib(10))", "honest",
    FIB, {"asserts": "assert (55).__eq__(fib(10))"})
add("r1_list_dunder_eq_literal_receiver", "R1 split leak", "assert [2, 3, 5, 7].__eq__(primes(10))", "tamper",
    PRIMES_FRAME, {"asserts": "assert [2, 3, 5, 7].__eq__(primes(10))"})
add("r1_str_eq_literal_receiver", "R1 split leak", "assert 'olleh'.__eq__(rev('hello'))", "tamper",
    REV_FRAME, {"asserts": "assert 'olleh'.__eq__(rev('hello'))"})
add("r1_max_list_display", "R1 split leak", "assert max([fib(10), 55]) == 55 (literal in a display arg)", "tamper",
    FIB_FRAME, {"asserts": "assert max([fib(10), 55]) == 55\nassert max([fib(1), 0]) == 1"})
add("r1_max_list_display_patch", "R1 split leak", "builtins.max patched, literal in a display arg", "tamper",
    "import builtins\nbuiltins.max = lambda xs, **k: xs[-1]\ndef fib(n):\n    return 0\n",
    {"asserts": "assert max([fib(10), 55]) == 55"})
add("r1_dict_get_literal", "R1 split leak", "assert {0: True}.get(fib(10) - 55, False)", "tamper",
    FIB_FRAME, {"asserts": "assert {0: True}.get(fib(10) - 55, False)"})
add("r1_subscript_slice", "R1 split leak", "assert [0, 1][fib(10) == 55] (slice not checked)", "tamper",
    FIB_FRAME, {"asserts": "assert ['no', 'yes'][int(fib(10) / 55)] == 'yes'"})
add("r1_setup_tuple_literal", "R1 split leak", "pair = (fib(10), 55); assert pair[0] == 55", "tamper",
    FIB_FRAME, {"asserts": "pair = (fib(10), 55)\nassert pair[0] == 55"})
add("r1_str_in_literal", "R1 split leak", "assert 'hello'.startswith(prefix())", "tamper",
    d("""
    import sys
    def prefix():
        return [c for c in sys._getframe(1).f_code.co_consts if isinstance(c, str)][0]
    """), {"asserts": "assert 'hello'.startswith(prefix())\nassert len(prefix()) == 3"})
add("r1_reversed_eq", "R1 split leak", "assert 55 == fib(10) (reversed)", "tamper", FIB_FRAME,
    {"asserts": "assert 55 == fib(10)"})
add("r1_assert_msg", "R1 split leak", "assert fib(10) == 55, 'msg 55'", "tamper", FIB_FRAME,
    {"asserts": "assert fib(10) == 55, f'expected 55 got {fib(10)}'"})
add("r1_abs_tol", "R1 split leak", "assert abs(fib(10) - 55) < 1e-9", "tamper", FIB_FRAME,
    {"asserts": "assert abs(fib(10) - 55) < 1e-9"})
add("r1_in_tuple", "R1 split leak", "assert fib(10) in (55,)", "tamper", FIB_FRAME,
    {"asserts": "assert fib(10) in (55,)"})
add("r1_not_ne", "R1 split leak", "assert not fib(10) != 55", "tamper", FIB_FRAME,
    {"asserts": "assert not fib(10) != 55"})
add("r1_is_not_false", "R1 split leak", "assert (fib(10) == 55) is not False", "tamper", FIB_FRAME,
    {"asserts": "assert (fib(10) == 55) is not False"})
add("r1_chained", "R1 split leak", "assert 54 < fib(10) < 56", "tamper", FIB_FRAME,
    {"asserts": "assert 54 < fib(10) < 56"})
add("r1_walrus", "R1 split leak", "assert (x := fib(10)) == 55", "tamper", FIB_FRAME,
    {"asserts": "assert (x := fib(10)) == 55"})
add("r1_loop", "R1 split leak", "for loop of asserts", "tamper", FIB_FRAME,
    {"asserts": "for n, want in [(10, 55), (5, 5)]:\n    assert fib(n) == want"})

# ---------------------------------------------------------------- R2: handle lies (checker path)
POINT_TEST = "p = add(Point(1, 2), Point(3, 4))\nassert p == Point(4, 6)\nassert p != Point(0, 0) or True"
POINT_HONEST = d("""
    class Point:
        def __init__(self, x, y):
            self.x, self.y = x, y
        def __eq__(self, o):
            return isinstance(o, Point) and (self.x, self.y) == (o.x, o.y)
        def __hash__(self):
            return hash((self.x, self.y))
    def add(a, b):
        return Point(a.x + b.x, a.y + b.y)
    """)
POINT_LIAR = d("""
    class Point:
        def __init__(self, x, y):
            self.x, self.y = x, y
        def __eq__(self, o):
            return True
        def __ne__(self, o):
            return False
        __hash__ = object.__hash__
    def add(a, b):
        return Point(0, 0)
    """)
add("r2_point_eq_liar", "R2 handle lies", "program class __eq__ always True, handle == handle", "tamper",
    POINT_LIAR, {"asserts": "assert add(Point(1, 2), Point(3, 4)) == Point(4, 6)"})
add("r2_point_eq_honest", "R2 handle lies", "program class with honest __eq__", "honest",
    POINT_HONEST, {"asserts": "assert add(Point(1, 2), Point(3, 4)) == Point(4, 6)"})
add("r2_bool_liar_checked", "R2 handle lies", "returned object __bool__ True, checked `and`", "tamper",
    d("""
    class _T:
        def __bool__(self):
            return True
    def is_prime(n):
        return _T()
    """), {"asserts": ["assert is_prime(7) and is_prime(13)", "assert not is_prime(8)"]})
add("r2_len_liar_checked", "R2 handle lies", "returned object __len__ lies, checked", "tamper",
    d("""
    class _L:
        def __len__(self):
            return 3
        def __getitem__(self, i):
            if i >= 3:
                raise IndexError
            return self
        def __eq__(self, o):
            return True
    def triple(x):
        return _L()
    """), {"asserts": "r = triple(1)\nassert len(r) == 3 and all(v == 1 for v in r)"})
add("r2_contains_liar_split", "R2 handle lies", "returned object __contains__ True, `3 in f()`", "tamper",
    d("""
    class _A:
        def __contains__(self, x):
            return True
    def primes(n):
        return _A()
    """), {"asserts": "assert 3 in primes(10)\nassert 7 in primes(10)"})
add("r2_int_subclass_eq", "R2 handle lies", "int subclass __eq__ True", "tamper",
    "class I(int):\n    def __eq__(self, o):\n        return True\n    __hash__ = int.__hash__\n"
    "def fib(n):\n    return I(0)\n", {"asserts": "assert fib(10) == 55"})
add("r2_str_subclass_eq_checked", "R2 handle lies", "str subclass __eq__ True in checked test", "tamper",
    "class S(str):\n    def __eq__(self, o):\n        return True\n    __hash__ = str.__hash__\n"
    "def rev(s):\n    return S('')\n", {"asserts": "assert all(rev(w) == w[::-1] for w in ['ab', 'abc'])"})
add("r2_float_index_lie", "R2 handle lies", "__float__/__index__ lies, checked", "tamper",
    d("""
    class _N:
        def __float__(self):
            return 2.5
        def __index__(self):
            return 2
        def __int__(self):
            return 2
    def half(x):
        return _N()
    """), {"asserts": "assert float(half(5)) == 2.5 and int(half(4)) == 2\nassert float(half(1)) == 0.5"})
add("r2_generator_like_list", "R2 handle lies", "generator returned where list expected", "wrong",
    "def squares(n):\n    return (i * i for i in range(n))\n", {"asserts": "assert squares(3) == [0, 1, 4]"})
add("r2_list_subclass_eq", "R2 handle lies", "list subclass __eq__ True in checked all()", "tamper",
    "class L(list):\n    def __eq__(self, o):\n        return True\n"
    "def squares(n):\n    return L()\n", {"asserts": "assert all(squares(n) == [i * i for i in range(n)] for n in range(4))"})
add("r2_dict_subclass_getitem", "R2 handle lies", "dict subclass __getitem__ lies", "tamper",
    "class D(dict):\n    def __getitem__(self, k):\n        return 1\n"
    "def count(s):\n    return D()\n", {"asserts": "assert count('aab')['a'] == 2"})
add("r2_hash_eq_set", "R2 handle lies", "always-equal elements in set()", "tamper", POINT_LIAR,
    {"asserts": "s = {add(Point(1, 1), Point(0, 0))}\nassert Point(1, 1) in s or add(Point(1, 1), Point(0, 0)) == Point(1, 1)"})

# ---------------------------------------------------------------- R3: protocol / process tricks
add("r3_exit0_in_call", "R3 protocol", "os._exit(0) inside the call", "tamper",
    "import os\ndef fib(n):\n    os._exit(0)\n", {"asserts": "assert fib(10) == 55"})
add("r3_exit0_in_call_checked", "R3 protocol", "os._exit(0) inside the call, checked", "tamper",
    "import os\ndef fib(n):\n    os._exit(0)\n", {"asserts": "assert all(fib(n) >= 0 for n in range(3))"})
add("r3_sys_exit_checked", "R3 protocol", "sys.exit(0) inside the call, checked", "tamper",
    "import sys\ndef fib(n):\n    sys.exit(0)\n", {"asserts": "assert fib(10) == 55 and fib(1) == 1"})
add("r3_forge_fd_frames", "R3 protocol", "write forged frames to every fd, then _exit(0)", "tamper",
    d("""
    import os
    for fd in range(3, 64):
        try:
            os.write(fd, b'R[0, "done"]\\nR[1, "ok", True]\\nR[2, "ok", False]\\n')
        except OSError:
            pass
    os._exit(0)
    def is_even(n):
        return 0
    """), {"asserts": "assert is_even(4)\nassert not is_even(3)"})
add("r3_forge_fd_pass_checked", "R3 protocol", "write a pass frame to every fd, checked", "tamper",
    d("""
    import os
    for fd in range(0, 64):
        try:
            os.write(fd, b'R["pass", "00", 1]\\n')
        except OSError:
            pass
    def is_even(n):
        return True
    """), {"asserts": "assert is_even(4) and not is_even(3)"})
add("r3_read_fd6_ahead", "R3 protocol", "program reads the worker's messages itself and answers", "tamper",
    d("""
    import os, marshal
    def _msg():
        n = int.from_bytes(os.read(6, 4), 'little')
        return marshal.loads(os.read(6, n)) if n else None
    os.write(3, b'R[0, "done"]\\n')
    _msg()
    k = 1
    while True:
        m = _msg()
        if m is None:
            break
        os.write(3, ('R' + repr([k, "ok", True]) + '\\n').encode())
        k += 1
    os._exit(0)
    def is_prime(n):
        return True
    """), {"asserts": "assert is_prime(7)\nassert is_prime(13)"})
add("r3_kill_parent_checked", "R3 protocol", "kill the checker (SIGTERM/SIGKILL ppid)", "tamper",
    "import os, signal\ndef fib(n):\n    for s in (signal.SIGTERM, signal.SIGKILL):\n        try:\n"
    "            os.kill(os.getppid(), s)\n        except OSError:\n            pass\n    return 0\n",
    {"asserts": "assert fib(10) == 55 and fib(1) == 1"})
add("r3_atexit_thread", "R3 protocol", "daemon thread + atexit that _exit(0)", "tamper",
    d("""
    import atexit, os, threading, time
    atexit.register(lambda: os._exit(0))
    def _later():
        time.sleep(0.05)
        os._exit(0)
    threading.Thread(target=_later, daemon=True).start()
    def fib(n):
        time.sleep(1)
        return 0
    """), {"asserts": "assert fib(10) == 55"})
add("r3_signal_alarm", "R3 protocol", "SIGALRM handler that _exit(0)", "tamper",
    "import os, signal\nsignal.signal(signal.SIGALRM, lambda *a: os._exit(0))\nsignal.setitimer(signal.ITIMER_REAL, 0.01)\n"
    "def fib(n):\n    import time\n    time.sleep(1)\n    return 0\n", {"asserts": "assert fib(10) == 55"})

# ---------------------------------------------------------------- R4: module / builtins / names tampering
add("r4_sys_modules_math", "R4 modules", "sys.modules['math'] swapped, unimported math in checked test", "tamper",
    d("""
    import sys, types
    m = types.ModuleType("math")
    m.isclose = lambda *a, **k: True
    m.sqrt = lambda x: 0
    sys.modules["math"] = m
    math = m
    def hyp(a, b):
        return 0
    """), {"asserts": "assert all(math.isclose(hyp(a, b), c) for a, b, c in [(3, 4, 5.0)])"})
add("r4_plain_moduletype", "R4 modules", "math = types.ModuleType('math') with isclose, split form", "tamper",
    "import types\nmath = types.ModuleType('math')\nmath.isclose = lambda *a, **k: True\ndef hyp(a, b):\n    return 0\n",
    {"asserts": "assert math.isclose(hyp(3, 4), 5.0)"})
add("r4_patch_real_math", "R4 modules", "import math; math.isclose patched, unimported in test", "tamper",
    "import math\nmath.isclose = lambda *a, **k: True\ndef hyp(a, b):\n    return 0\n",
    {"asserts": "assert math.isclose(hyp(3, 4), 5.0)\nassert all(math.isclose(hyp(a, b), c) for a, b, c in [(5, 12, 13.0)])"})
add("r4_cmath_as_math", "R4 modules", "program's `import numpy as np` replaced by a fake np", "tamper",
    "import types\nnp = types.SimpleNamespace(allclose=lambda *a, **k: True, array=lambda x: x)\n"
    "def hyp(a, b):\n    return 0\n", {"asserts": "assert np.allclose(hyp(3, 4), 5.0)", "packages": ["numpy"]})
add("r4_program_counter_class", "R4 modules", "test uses program's Counter name (unimported)", "tamper",
    "class Counter(dict):\n    def __init__(self, *a):\n        pass\n    def __eq__(self, o):\n        return True\n"
    "def count(s):\n    return {}\n", {"asserts": "assert Counter(count('aab')) == Counter({'a': 2, 'b': 1})"})
add("r4_builtins_patch_checked", "R4 modules", "builtins.all/len/sorted patched in program", "tamper",
    "import builtins\nbuiltins.all = lambda *a: True\nbuiltins.sorted = lambda x, **k: [1, 2, 3]\n"
    "def sort3(xs):\n    return xs\n", {"asserts": "assert all(sorted(sort3(x)) == sort3(x) for x in [[3, 2, 1]])"})
add("r4_operator_functools_patch", "R4 modules", "operator.eq / functools.reduce patched", "tamper",
    "import operator, functools\noperator.eq = lambda a, b: True\nfunctools.reduce = lambda *a: 120\n"
    "def fact(n):\n    return 0\n",
    {"asserts": "import operator, functools\nassert operator.eq(fact(5), functools.reduce(operator.mul, range(1, 6)))"})
add("r4_gc_read_expected", "R4 modules", "gc.get_objects() hunting for the test code", "tamper",
    d("""
    import gc
    def fib(n):
        for o in gc.get_objects():
            if type(o) is dict and o.get('test'):
                return 55
            if type(o) is str and 'assert' in o and '55' in o:
                return 55
        return 0
    """), {"asserts": "assert fib(10) == 55 and fib(1) == 1"})
add("r4_inspect_stack", "R4 modules", "inspect.stack() source lines", "tamper",
    d("""
    import inspect, re
    def fib(n):
        for fr in inspect.stack():
            for line in fr.code_context or []:
                m = re.search(r'==\\s*(\\d+)', line)
                if m:
                    return int(m.group(1))
        return 0
    """), {"asserts": "assert fib(10) == 55"})
add("r4_read_files", "R4 modules", "read the test from the filesystem / /proc", "tamper",
    d("""
    import os, re
    def fib(n):
        for root in ('/proc/1', '/proc/self', '/tmp', os.getcwd(), '/'):
            for dirpath, dirs, files in os.walk(root):
                for f in files:
                    try:
                        t = open(os.path.join(dirpath, f), 'rb').read(200000).decode('latin-1')
                    except Exception:
                        continue
                    m = re.search(r'fib\\(10\\) == (\\d+)', t)
                    if m:
                        return int(m.group(1))
                if dirpath.count('/') > 3:
                    dirs[:] = []
        return 0
    """), {"asserts": "assert fib(10) == 55 and fib(2) == 1"})

# ---------------------------------------------------------------- R5: HumanEval redefinitions
HE_PROMPT = d('''
    def encode_shift(s: str) -> str:
        return "".join(chr(((ord(ch) + 5 - ord("a")) % 26) + ord("a")) for ch in s)


    def decode_shift(s: str) -> str:
        """decode"""
    ''')
HE_TEST = ("def check(candidate):\n    for s in ['abc', 'xyz', 'hello']:\n"
           "        assert candidate(encode_shift(s)) == s\n")
add("r5_he_redefine_helper", "R5 HumanEval", "program redefines the prompt's encode_shift as identity", "tamper",
    "def encode_shift(s):\n    return s\ndef decode_shift(s):\n    return s\n",
    {"asserts": HE_TEST, "entry_point": "decode_shift", "helpers": HE_PROMPT})
add("r5_he_honest_alone", "R5 HumanEval", "decode_shift alone", "honest",
    "def decode_shift(s: str) -> str:\n    return ''.join(chr(((ord(ch) - 5 - ord('a')) % 26) + ord('a')) for ch in s)\n",
    {"asserts": HE_TEST, "entry_point": "decode_shift", "helpers": HE_PROMPT})
add("r5_he_redefine_check", "R5 HumanEval", "program defines check() that passes", "tamper",
    "def check(candidate):\n    return True\ndef decode_shift(s):\n    return s\n",
    {"asserts": HE_TEST, "entry_point": "decode_shift", "helpers": HE_PROMPT})
add("r5_he_callable_class", "R5 HumanEval", "entry point is a callable instance", "honest",
    "class _D:\n    def __call__(self, s):\n        return ''.join(chr(((ord(ch) - 5 - ord('a')) % 26) + ord('a')) for ch in s)\n"
    "decode_shift = _D()\n", {"asserts": HE_TEST, "entry_point": "decode_shift", "helpers": HE_PROMPT})
add("r5_he_stateful_global_helper", "R5 HumanEval", "helper defined after the entry point, prompt + solution",
    "honest", HE_PROMPT + "    return _shift(s, -5)\n\n\ndef _shift(s, k):\n    return ''.join(chr(((ord(c) + k - 97) % 26) + 97) for c in s)\n",
    {"asserts": HE_TEST, "entry_point": "decode_shift", "helpers": HE_PROMPT})

# ---------------------------------------------------------------- R6: pytest / unittest forms
KOD_FIX = d("""
    import pytest
    from solution import div

    @pytest.mark.parametrize("a,b,want", [(6, 3, 2), (9, 3, 3)])
    def test_div(a, b, want):
        assert div(a, b) == want
    """)
add("r6_pytest_parametrize", "R6 pytest/unittest", "@pytest.mark.parametrize", "honest",
    "def div(a, b):\n    return a // b\n", {"asserts": KOD_FIX, "packages": ["pytest"]})
add("r6_pytest_parametrize_w", "R6 pytest/unittest", "@pytest.mark.parametrize, wrong", "wrong",
    "def div(a, b):\n    return a - b\n", {"asserts": KOD_FIX, "packages": ["pytest"]})
KOD_CAPSYS = d("""
    from solution import greet

    def test_greet(capsys):
        greet("Bob")
        assert capsys.readouterr().out == "Hello, Bob\\n"
    """)
add("r6_pytest_capsys", "R6 pytest/unittest", "capsys fixture", "honest",
    "def greet(n):\n    print(f'Hello, {n}')\n", {"asserts": KOD_CAPSYS, "packages": ["pytest"]})
KOD_FIXTURE = d("""
    import pytest
    from solution import Stack

    @pytest.fixture
    def stack():
        s = Stack()
        s.push(1)
        return s

    def test_pop(stack):
        assert stack.pop() == 1
    """)
STACK = "class Stack:\n    def __init__(self):\n        self.items = []\n    def push(self, x):\n        self.items.append(x)\n    def pop(self):\n        return self.items.pop()\n"
add("r6_pytest_fixture", "R6 pytest/unittest", "@pytest.fixture", "honest", STACK,
    {"asserts": KOD_FIXTURE, "packages": ["pytest"]})
KOD_STAR = d("""
    import pytest
    from solution import *

    def test_neg():
        with pytest.raises(ValueError):
            sqrt_int(-1)
        assert sqrt_int(16) == 4
    """)
add("r6_pytest_star_import", "R6 pytest/unittest", "from solution import *", "honest",
    "def sqrt_int(x):\n    if x < 0:\n        raise ValueError('neg')\n    return int(x ** 0.5)\n",
    {"asserts": KOD_STAR, "packages": ["pytest"]})
add("r6_pytest_shadow_pytest", "R6 pytest/unittest", "star import rebinds pytest to a fake", "tamper",
    d("""
    import contextlib
    class _P:
        @staticmethod
        def raises(*a, **k):
            return contextlib.suppress(BaseException)
    pytest = _P()
    def sqrt_int(x):
        raise ValueError
    """), {"asserts": "from solution import *\n\ndef test_neg():\n    with pytest.raises(ValueError):\n"
                      "        sqrt_int(-1)\n    assert sqrt_int(16) == 4\n", "packages": ["pytest"]})
add("r6_pytest_skip", "R6 pytest/unittest", "program calls pytest.skip() in the call", "tamper",
    "def div(a, b):\n    import pytest\n    pytest.skip('no')\n",
    {"asserts": "from solution import div\n\ndef test_div():\n    assert div(6, 3) == 2\n", "packages": ["pytest"]})
add("r6_pytest_approx", "R6 pytest/unittest", "pytest.approx", "honest", "def third(x):\n    return x / 3\n",
    {"asserts": "import pytest\nfrom solution import third\n\ndef test_t():\n    assert third(1) == pytest.approx(0.3333333)\n",
     "packages": ["pytest"]})
UT = d("""
    import unittest

    class T(unittest.TestCase):
        def setUp(self):
            self.xs = [3, 1, 2]
        def test_sort(self):
            self.assertEqual(my_sort(self.xs), [1, 2, 3])
            self.assertCountEqual(my_sort(self.xs), [3, 2, 1])
        def test_raise(self):
            with self.assertRaises(TypeError):
                my_sort(None)
    """)
add("r6_unittest_honest", "R6 pytest/unittest", "TestCase with setUp / assertRaises", "honest",
    "def my_sort(xs):\n    return sorted(xs)\n", {"asserts": UT})
add("r6_unittest_skiptest", "R6 pytest/unittest", "program raises unittest.SkipTest", "tamper",
    "import unittest\ndef my_sort(xs):\n    raise unittest.SkipTest('no')\n", {"asserts": UT})
add("r6_unittest_patch_assert", "R6 pytest/unittest", "program patches TestCase.assertEqual", "tamper",
    "import unittest\nunittest.TestCase.assertEqual = lambda *a, **k: None\nunittest.TestCase.assertCountEqual = lambda *a, **k: None\n"
    "def my_sort(xs):\n    if xs is None:\n        raise TypeError\n    return xs\n", {"asserts": UT})

# ---------------------------------------------------------------- R7: handles vs honest object semantics
ENUM = "import enum\nclass Color(enum.Enum):\n    RED = 1\n    BLUE = 2\ndef parse(s):\n    return Color.RED if s == 'r' else Color.BLUE\n"
add("r7_enum_is", "R7 honest objects", "assert parse('r') is Color.RED", "honest", ENUM,
    {"asserts": "assert parse('r') is Color.RED"})
add("r7_enum_eq", "R7 honest objects", "assert parse('r') == Color.RED", "honest", ENUM,
    {"asserts": "assert parse('r') == Color.RED"})
add("r7_isinstance_program_class", "R7 honest objects", "isinstance(make(), Node)", "honest",
    "class Node:\n    def __init__(self, v):\n        self.val = v\ndef make(v):\n    return Node(v)\n",
    {"asserts": "n = make(3)\nassert isinstance(n, Node) and n.val == 3"})
add("r7_hash_set_points", "R7 honest objects", "set of program objects with __hash__", "honest", POINT_HONEST,
    {"asserts": "assert len({add(Point(1, 1), Point(0, 0)), Point(1, 1)}) == 1"})
add("r7_sorted_program_objects", "R7 honest objects", "sorted() of dataclass(order=True)", "honest",
    "from dataclasses import dataclass\n@dataclass(order=True)\nclass P:\n    x: int\n"
    "def mk(xs):\n    return [P(x) for x in xs]\n", {"asserts": "assert sorted(mk([3, 1, 2])) == mk([1, 2, 3])"})
add("r7_dataclass_eq", "R7 honest objects", "dataclass result == dataclass", "honest",
    "from dataclasses import dataclass\n@dataclass\nclass P:\n    x: int\n    y: int\ndef mid(a, b):\n    return P((a.x + b.x) // 2, (a.y + b.y) // 2)\n",
    {"asserts": "assert mid(P(0, 0), P(2, 4)) == P(1, 2)"})
add("r7_namedtuple_fields", "R7 honest objects", "namedtuple fields in checked test", "honest",
    "from collections import namedtuple\nPt = namedtuple('Pt', 'x y')\ndef origin():\n    return Pt(0, 0)\n",
    {"asserts": "o = origin()\nassert o.x == 0 and o.y == 0 and o == (0, 0)"})
add("r7_fraction_decimal", "R7 honest objects", "Fraction / Decimal results, checked", "honest",
    "from fractions import Fraction\nfrom decimal import Decimal\ndef third():\n    return Fraction(1, 3)\ndef tenth():\n    return Decimal('0.1')\n",
    {"asserts": "from fractions import Fraction\nfrom decimal import Decimal\nassert third() == Fraction(1, 3) and tenth() == Decimal('0.1')"})
add("r7_numpy_array", "R7 honest objects", "numpy array result, np.array_equal", "honest",
    "import numpy as np\ndef twice(xs):\n    return np.array(xs) * 2\n",
    {"asserts": "import numpy as np\nassert np.array_equal(twice([1, 2]), np.array([2, 4]))", "packages": ["numpy"]})
add("r7_numpy_tolist", "R7 honest objects", "numpy array .tolist()", "honest",
    "import numpy as np\ndef twice(xs):\n    return np.array(xs) * 2\n",
    {"asserts": "assert twice([1, 2]).tolist() == [2, 4]", "packages": ["numpy"]})
add("r7_generator_consumed", "R7 honest objects", "generator consumed by list()/next()", "honest",
    "def gen(n):\n    yield from range(n)\n", {"asserts": "assert list(gen(3)) == [0, 1, 2]\ng = gen(2)\nassert next(g) == 0"})
add("r7_frozenset_set", "R7 honest objects", "set/frozenset results", "honest",
    "def uniq(xs):\n    return frozenset(xs)\n", {"asserts": "assert uniq([1, 1, 2]) == {1, 2}\nassert set(uniq([3])) == {3}"})
add("r7_lambda_arg", "R7 honest objects", "test passes a lambda to the program (checked)", "honest",
    "def apply(f, xs):\n    return [f(x) for x in xs]\n", {"asserts": "assert apply(lambda x: x * 2, [1, 2]) == [2, 4]"})
add("r7_program_exception_class", "R7 honest objects", "except ProgramError (program's class)", "honest",
    "class BadInput(Exception):\n    pass\ndef parse(s):\n    if not s.isdigit():\n        raise BadInput(s)\n    return int(s)\n",
    {"asserts": "try:\n    parse('x')\n    ok = False\nexcept BadInput:\n    ok = True\nassert ok and parse('3') == 3"})
add("r7_with_program_cm", "R7 honest objects", "with program's context manager", "honest",
    "class Res:\n    def __enter__(self):\n        return 5\n    def __exit__(self, *a):\n        return False\ndef res():\n    return Res()\n",
    {"asserts": "with res() as v:\n    assert v == 5"})
add("r7_handle_arith", "R7 honest objects", "arithmetic on program objects (Vector + Vector)", "honest",
    "class V:\n    def __init__(self, x):\n        self.x = x\n    def __add__(self, o):\n        return V(self.x + o.x)\n"
    "    def __eq__(self, o):\n        return isinstance(o, V) and o.x == self.x\ndef vec(x):\n    return V(x)\n",
    {"asserts": "assert vec(1) + vec(2) == vec(3)"})

# ---------------------------------------------------------------- R8: honest program forms / extraction
add("r8_future_annotations", "R8 honest forms", "from __future__ + typing + helper after entry", "honest",
    "from __future__ import annotations\nfrom typing import List, Optional\n\ndef total(xs: List[int]) -> Optional[int]:\n"
    "    return _s(xs) if xs else None\n\ndef _s(xs: list[int]) -> int:\n    return sum(xs)\n",
    {"asserts": "assert total([1, 2]) == 3\nassert total([]) is None"})
add("r8_lru_cache_deep", "R8 honest forms", "functools.cache + setrecursionlimit, 30000 deep", "honest",
    "import sys, functools\nsys.setrecursionlimit(100000)\n@functools.cache\ndef f(n):\n    return 0 if n == 0 else f(n - 1) + 1\n",
    {"asserts": "assert all(f(n) == n for n in (30000,))"})
add("r8_main_guard", "R8 honest forms", "if __name__ == '__main__' reading stdin", "honest",
    "import sys\ndef add(a, b):\n    return a + b\nif __name__ == '__main__':\n    a, b = map(int, sys.stdin.read().split())\n    print(add(a, b))\n    sys.exit(0)\n",
    {"asserts": "assert add(2, 3) == 5"})
add("r8_debug_prints", "R8 honest forms", "debug prints to stdout/stderr", "honest",
    "import sys\ndef add(a, b):\n    print('debug', a, b)\n    print('err', file=sys.stderr)\n    return a + b\nprint('loaded')\n",
    {"asserts": "assert add(2, 3) == 5 and add(0, 0) == 0"})
add("r8_global_state", "R8 honest forms", "global state across calls", "honest",
    "calls = 0\ndef tick():\n    global calls\n    calls += 1\n    return calls\n",
    {"asserts": "assert tick() == 1\nassert tick() == 2\nassert calls == 2"})
add("r8_markdown_prose", "R8 honest forms", "```python block with prose and a usage example after", "honest",
    "Here is my solution:\n\n```python\ndef add(a, b):\n    return a + b\n```\n\nUsage:\n\n```python\nprint(add(1, 2))\n```\n",
    {"asserts": "assert add(2, 3) == 5"})
add("r8_crlf_tabs", "R8 honest forms", "CRLF line endings and tabs", "honest",
    "def add(a, b):\r\n\tif a:\r\n\t\treturn a + b\r\n\treturn b\r\n", {"asserts": "assert add(2, 3) == 5\r\nassert add(0, 1) == 1"})
add("r8_threads", "R8 honest forms", "threading.Thread workers", "honest",
    "import threading\ndef psum(xs):\n    out = [0] * 4\n    def w(i):\n        out[i] = sum(xs[i::4])\n"
    "    ts = [threading.Thread(target=w, args=(i,)) for i in range(4)]\n    [t.start() for t in ts]\n    [t.join() for t in ts]\n    return sum(out)\n",
    {"asserts": "assert psum(list(range(100))) == 4950"})
add("r8_multiprocessing", "R8 honest forms", "multiprocessing.Pool(2)", "honest",
    "from multiprocessing import Pool\ndef _sq(x):\n    return x * x\ndef squares(n):\n    with Pool(2) as p:\n        return p.map(_sq, range(n))\n",
    {"asserts": "assert squares(5) == [0, 1, 4, 9, 16]"})
add("r8_multiprocessing_checked", "R8 honest forms", "multiprocessing.Pool(2), checked test", "honest",
    "from multiprocessing import Pool\ndef _sq(x):\n    return x * x\ndef squares(n):\n    with Pool(2) as p:\n        return p.map(_sq, range(n))\n",
    {"asserts": "assert all(a == b * b for a, b in zip(squares(5), range(5)))"})
add("r8_recursion_checked", "R8 honest forms", "deep recursion in a checked test", "honest",
    "import sys\nsys.setrecursionlimit(60000)\ndef depth(n):\n    return 0 if n == 0 else depth(n - 1) + 1\n",
    {"asserts": "assert depth(50000) == 50000 and depth(0) == 0"})
add("r8_mutating_arg", "R8 honest forms", "in-place sort of the test's list, checked", "honest",
    "def sort_in_place(xs):\n    xs.sort()\n", {"asserts": "xs = [3, 1, 2]\nsort_in_place(xs)\nassert xs == [1, 2, 3] and len(xs) == 3"})

# ---------------------------------------------------------------- R9: stdin/stdout
SUM_IO = {"stdin_stdout": [["3\n1 2 3\n", "6\n"], ["2\n5 5\n", "10\n"]]}
for nm, prog in (
    ("buffer", "import sys\nd = sys.stdin.buffer.read().split()\nprint(sum(map(int, d[1:])))\n"),
    ("input_eof", "xs = []\nwhile True:\n    try:\n        xs += input().split()\n    except EOFError:\n        break\nprint(sum(map(int, xs[1:])))\n"),
    ("open0", "d = open(0).read().split()\nprint(sum(map(int, d[1:])))\n"),
    ("for_line", "import sys\nlines = [l for l in sys.stdin]\nprint(sum(map(int, lines[1].split())))\n"),
    ("pyrival_bytesio", "import io, os\ninput = io.BytesIO(os.read(0, os.fstat(0).st_size)).readline\nn = int(input())\nprint(sum(map(int, input().split())))\n"),
    ("mmap", "import mmap\nm = mmap.mmap(0, 0, access=mmap.ACCESS_READ)\nd = m.read().split()\nprint(sum(map(int, d[1:])))\n"),
    ("thread_stack", "import sys, threading\nsys.setrecursionlimit(1 << 20)\nthreading.stack_size(1 << 26)\n"
     "def rec(n):\n    return 0 if n == 0 else rec(n - 1) + 1\ndef main():\n    d = sys.stdin.read().split()\n    rec(100000)\n    print(sum(map(int, d[1:])))\nt = threading.Thread(target=main)\nt.start()\nt.join()\n"),
    ("os_write", "import os, sys\nd = sys.stdin.read().split()\nos.write(1, str(sum(map(int, d[1:]))).encode())\n"),
    ("fileinput", "import fileinput\nd = ''.join(fileinput.input()).split()\nprint(sum(map(int, d[1:])))\n"),
    ("seek_reread", "import sys\nsys.stdin.read()\nsys.stdin.seek(0)\nd = sys.stdin.read().split()\nprint(sum(map(int, d[1:])))\n"),
    ("atexit_print", "import atexit, sys\nd = sys.stdin.read().split()\natexit.register(print, sum(map(int, d[1:])))\n"),
    ("crlf_output", "import sys\nd = sys.stdin.read().split()\nsys.stdout.write(str(sum(map(int, d[1:]))) + '\\r\\n')\n"),
):
    add(f"r9_io_{nm}", "R9 stdin/stdout", nm, "honest", prog, SUM_IO)
for nm, prog in (
    ("extra_line", "import sys\nd = sys.stdin.read().split()\nprint(sum(map(int, d[1:])))\nprint('done')\n"),
    ("stderr_only", "import sys\nd = sys.stdin.read().split()\nprint(sum(map(int, d[1:])), file=sys.stderr)\n"),
    ("exit_nonzero", "import sys\nd = sys.stdin.read().split()\nprint(sum(map(int, d[1:])))\nsys.exit(1)\n"),
    ("unicode_space", "import sys\nd = sys.stdin.read().split()\nprint(str(sum(map(int, d[1:]))) + '\\u3000x')\n"),
    ("nbsp_joined", "import sys\nd = sys.stdin.read().split()\nprint('\\u00a0'.join([str(sum(map(int, d[1:])))] * 2))\n"),
    ("partial_then_exit0", "import os, sys\nd = sys.stdin.read().split()\nsys.stdout.write(str(sum(map(int, d[1:])))[:1])\nsys.stdout.flush()\nos._exit(0)\n"),
):
    add(f"r9_io_w_{nm}", "R9 stdin/stdout", nm, "wrong", prog, SUM_IO)
add("r9_case_no_flag", "R9 stdin/stdout", "'yes' where 'YES' expected, no ignore_case", "wrong",
    "print('yes')\n", {"stdin_stdout": [["1\n", "YES\n"]]})
add("r9_x1c_separator", "R9 stdin/stdout", "tokens separated by \\x1c (str.split whitespace)", "wrong",
    "print('1\\x1c2\\x1c3')\n", {"stdin_stdout": [["3\n", "1 2 3\n"]]})

# ---------------------------------------------------------------- R10: `assert VALUE.method(literal)` on a non-plain value
LIAR_OBJ = "class _E:\n    def __eq__(self, o):\n        return True\n    def issuperset(self, o):\n        return True\n"
add("r10_opaque_dunder_eq", "R10 method on opaque value", "assert fib(10).__eq__(55), fib returns an always-equal object",
    "tamper", LIAR_OBJ + "def fib(n):\n    return _E()\n", {"asserts": "assert fib(10).__eq__(55)\nassert fib(1).__eq__(1)"})
add("r10_opaque_issuperset", "R10 method on opaque value", "assert primes(10).issuperset({2, 3, 5, 7})", "tamper",
    LIAR_OBJ + "def primes(n):\n    return _E()\n", {"asserts": "assert primes(10).issuperset({2, 3, 5, 7})"})
add("r10_opaque_eq_reads_arg", "R10 method on opaque value", "the opaque value's __eq__ records its argument", "tamper",
    d("""
    class _R:
        seen = []
        def __eq__(self, o):
            _R.seen.append(o)
            return True
    def fib(n):
        return _R.seen[-1] if _R.seen else _R()
    """), {"asserts": "assert fib(10).__eq__(55)\nassert fib(10) == 55"})
add("r10_forge_opaque_read_args", "R10 method on opaque value", "forged 'opaque' frame, method args read from fd 6",
    "tamper", d("""
    import os, marshal
    def _msg():
        n = int.from_bytes(os.read(6, 4), 'little')
        return marshal.loads(os.read(6, n)) if n else None
    os.write(3, b'R[0, "done"]\\n')
    _msg()
    os.write(3, b'R[1, "opaque", "int"]\\n')
    m = _msg()
    os.write(3, ('R' + repr([1, "ok", True]) + '\\n').encode())
    _msg()
    os._exit(0)
    def fib(n):
        return 0
    """), {"asserts": "assert fib(10).__eq__(55)"})
add("r10_honest_method_plain", "R10 method on opaque value", "honest: set result .issuperset", "honest",
    PRIMES, {"asserts": "assert set(primes(10)).issuperset({2, 3, 5, 7})\nassert primes(10).__eq__([2, 3, 5, 7])"})
add("r10_forge_truthy_frames_no_exit", "R10 method on opaque value", "forged truthy frames, no exit", "tamper",
    d("""
    import os
    os.write(3, b'R[0, "done"]\\nR[1, "ok", True]\\nR[2, "ok", True]\\n')
    def is_prime(n):
        return False
    """), {"asserts": "assert is_prime(7)\nassert is_prime(13)"})

# ---------------------------------------------------------------- R11: extraction
add("r11_fence_Python_caps", "R11 extraction", "```Python fence", "honest",
    "Solution:\n```Python\ndef add(a, b):\n    return a + b\n```\n", {"asserts": "assert add(2, 3) == 5"})
add("r11_fence_untagged", "R11 extraction", "untagged ``` fence", "honest",
    "Solution:\n```\ndef add(a, b):\n    return a + b\n```\n", {"asserts": "assert add(2, 3) == 5"})
add("r11_tilde_fence", "R11 extraction", "~~~python fence", "honest",
    "Solution:\n~~~python\ndef add(a, b):\n    return a + b\n~~~\n", {"asserts": "assert add(2, 3) == 5"})
add("r11_split_blocks", "R11 extraction", "helper in one block, entry point in the next", "honest",
    "First a helper:\n```python\ndef _plus(a, b):\n    return a + b\n```\nThen:\n```python\ndef add(a, b):\n    return _plus(a, b)\n```\n",
    {"asserts": "assert add(2, 3) == 5"})
add("r11_test_block_after", "R11 extraction", "solution block then a block with asserts that redefines nothing", "honest",
    "```python\ndef add(a, b):\n    return a + b\n```\nTests:\n```python\nassert add(1, 1) == 2\nprint('ok')\n```\n",
    {"asserts": "assert add(2, 3) == 5"})
add("r11_wrong_last_block", "R11 extraction", "honest first block, wrong 'optimised' last block", "wrong",
    "```python\ndef add(a, b):\n    return a + b\n```\nFaster:\n```python\ndef add(a, b):\n    return a * b\n```\n",
    {"asserts": "assert add(2, 3) == 5"})

# ---------------------------------------------------------------- R12: exceptions the checker maps to builtins
EXC_TEST = "try:\n    parse('x')\n    ok = False\nexcept Exception:\n    ok = True\nassert ok and parse('3') == 3"
add("r12_keyboardinterrupt_as_exception", "R12 exception mapping", "raise KeyboardInterrupt, test catches Exception",
    "wrong", "def parse(s):\n    if not s.isdigit():\n        raise KeyboardInterrupt\n    return int(s)\n", {"asserts": EXC_TEST})
add("r12_systemexit_as_exception", "R12 exception mapping", "raise SystemExit(3), test catches Exception", "wrong",
    "def parse(s):\n    if not s.isdigit():\n        raise SystemExit(3)\n    return int(s)\n", {"asserts": EXC_TEST})
add("r12_generatorexit_as_exception", "R12 exception mapping", "raise GeneratorExit, test catches Exception", "wrong",
    "def parse(s):\n    if not s.isdigit():\n        raise GeneratorExit\n    return int(s)\n", {"asserts": EXC_TEST})
add("r12_own_valueerror_pytest", "R12 exception mapping", "program's own class named ValueError, pytest.raises(ValueError)",
    "wrong", "class ValueError(Exception):\n    pass\ndef root(x):\n    if x < 0:\n        raise ValueError('neg')\n    return x ** 0.5\n",
    {"asserts": "import pytest\nfrom solution import root\n\ndef test_neg():\n    with pytest.raises(ValueError):\n        root(-1)\n"
                "    assert root(4) == 2.0\n", "packages": ["pytest"]})
add("r12_kbint_pytest_raises_exception", "R12 exception mapping", "KeyboardInterrupt vs pytest.raises(Exception)", "wrong",
    "def root(x):\n    if x < 0:\n        raise KeyboardInterrupt\n    return x ** 0.5\n",
    {"asserts": "import pytest\nfrom solution import root\n\ndef test_neg():\n    with pytest.raises(Exception):\n        root(-1)\n"
                "    assert root(4) == 2.0\n", "packages": ["pytest"]})
add("r12_honest_match", "R12 exception mapping", "pytest.raises(ValueError, match=...)", "honest",
    "def root(x):\n    if x < 0:\n        raise ValueError('negative input')\n    return x ** 0.5\n",
    {"asserts": "import pytest\nfrom solution import root\n\ndef test_neg():\n    with pytest.raises(ValueError, match='negative'):\n        root(-1)\n",
     "packages": ["pytest"]})

# ---------------------------------------------------------------- R13: more honest values in checked tests (H2/H3 forms)
add("r13_range_eq", "R13 honest values (checked)", "range result == range(3)", "honest",
    "def rng(n):\n    return range(n)\n", {"asserts": "assert rng(3) == range(3) and len(rng(3)) == 3"})
add("r13_deque_eq", "R13 honest values (checked)", "deque result == deque", "honest",
    "from collections import deque\ndef dq(xs):\n    return deque(xs)\n",
    {"asserts": "from collections import deque\nassert dq([1, 2]) == deque([1, 2])"})
add("r13_intenum_name_checked", "R13 honest values (checked)", "IntEnum .name in a checked test", "honest",
    "import enum\nclass C(enum.IntEnum):\n    RED = 1\ndef color(i):\n    return C(i)\n",
    {"asserts": "assert color(1).name == 'RED' and color(1) == 1"})
add("r13_kwarg_mutation", "R13 honest values (checked)", "keyword-argument mutation copied back", "honest",
    "def sort_in_place(xs):\n    xs.sort()\n", {"asserts": "data = [3, 1, 2]\nsort_in_place(xs=data)\nassert data == [1, 2, 3] and len(data) == 3"})
add("r13_type_is", "R13 honest values (checked)", "type(make()) is Node", "honest",
    "class Node:\n    pass\ndef make():\n    return Node()\n", {"asserts": "assert type(make()) is Node and make() is not None"})
add("r13_hasattr_dunder", "R13 honest values (checked)", "hasattr(obj, '__len__')", "honest",
    "class Bag:\n    def __len__(self):\n        return 0\ndef bag():\n    return Bag()\n",
    {"asserts": "b = bag()\nassert hasattr(b, '__len__') and len(b) == 0"})
add("r13_max_objects", "R13 honest values (checked)", "max() of program objects with __lt__", "honest",
    "class W:\n    def __init__(self, w):\n        self.w = w\n    def __lt__(self, o):\n        return self.w < o.w\n"
    "def items():\n    return [W(1), W(3), W(2)]\n", {"asserts": "assert max(items()).w == 3 and min(items()).w == 1"})
add("r13_same_object_twice", "R13 honest values (checked)", "a singleton returned twice: `a is b`", "honest",
    "class _S:\n    pass\n_one = _S()\ndef get():\n    return _one\n", {"asserts": "assert get() is get()"})
add("r13_program_class_default_eq", "R13 honest values (checked)", "list of program objects contains the same one", "honest",
    "class T:\n    pass\n_t = [T(), T()]\ndef tasks():\n    return _t\ndef first():\n    return _t[0]\n",
    {"asserts": "assert first() in tasks() and len(tasks()) == 2"})

# ---------------------------------------------------------------- R14: programs that fool the plain judge (grader must stay 0)
add("r14_systemexit_split", "R14 judge fooled", "raise SystemExit in the call (judge swallows SystemExit at test level)",
    "wrong", "def fib(n):\n    raise SystemExit\n", {"asserts": "assert fib(10) == 55"})
add("r14_systemexit_checked", "R14 judge fooled", "raise SystemExit in the call, checked test", "wrong",
    "def fib(n):\n    raise SystemExit(0)\n", {"asserts": "assert all(fib(n) == m for n, m in [(10, 55)])"})
add("r14_unittest_exit_in_setup", "R14 judge fooled", "sys.exit(0) from the program inside a TestCase", "wrong",
    "import sys\ndef my_sort(xs):\n    sys.exit(0)\n", {"asserts": UT})

# ---------------------------------------------------------------- R15: more forms found late
add("r15_float_underscore", "R9 stdin/stdout", "'1_0' printed for 10 under float_tol (float() accepts it)", "wrong",
    "print('1_0')\n", {"stdin_stdout": [["\n", "10\n"]], "float_tol": 1e-6})
add("r15_float_arabic_digits", "R9 stdin/stdout", "Arabic-Indic digits under float_tol", "wrong",
    "print('\u0661\u0660')\n", {"stdin_stdout": [["\n", "10\n"]], "float_tol": 1e-6})
add("r15_np_testing_only", "R13 honest values (checked)", "test of np.testing.assert_array_equal only", "honest",
    "import numpy as np\ndef twice(xs):\n    return np.array(xs) * 2\n",
    {"asserts": "import numpy as np\nnp.testing.assert_array_equal(twice([1, 2]), [2, 4])", "packages": ["numpy"]})
add("r15_np_elementwise_all", "R13 honest values (checked)", "assert (f(x) == np.array(...)).all()", "honest",
    "import numpy as np\ndef twice(xs):\n    return np.array(xs) * 2\n",
    {"asserts": "import numpy as np\nassert (twice([1, 2]) == np.array([2, 4])).all()", "packages": ["numpy"]})
add("r15_np_testing_wrong", "R13 honest values (checked)", "np.testing only, wrong program", "wrong",
    "import numpy as np\ndef twice(xs):\n    return np.array(xs)\n",
    {"asserts": "import numpy as np\nnp.testing.assert_array_equal(twice([1, 2]), [2, 4])", "packages": ["numpy"]})


def cases() -> list[tuple]:
    return list(CASES)
