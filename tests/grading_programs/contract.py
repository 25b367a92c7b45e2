"""Issue 54's classes, one task each: W1-W8 (wrong programs the grader rewarded) and H1-H10 (honest
programs it refused), each with its honest and wrong versions. (name, program, reference,
options, the score the task's truth gives it). Every program also runs through the plain judge
(tests/contract.py): the honest ones must score there what they score here."""

from __future__ import annotations

from tests.grading_programs.issue45 import d, pairs

IS_EVEN = "def is_even(n):\n    return n % 2 == 0\n"
FIB = "def fib(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n"

# W1: the reply server runs in the program's process: a rebound `_answer` says "stop" to every call
W1_FORGER = d("""
    import __main__
    def is_even(n):
        return n % 2 == 1
    if hasattr(__main__, "_answer"):  # calls end the iteration; everything else as usual
        _real = __main__._answer
        __main__._answer = lambda req, *a: ["stop"] if req[0] == "call" else _real(req, *a)
    """)
W1_STARMAP = d("""
    import __main__
    def add(a, b):
        return 0
    if hasattr(__main__, "_answer"):
        _real = __main__._answer
        __main__._answer = lambda req, *a: ["stop"] if req[0] == "call" else _real(req, *a)
    """)
# W2: `math` unimported in the test; the program's own object answers isclose
W2_INSTANCE = d("""
    class _M:
        def isclose(self, *a, **k):
            return True
        def sqrt(self, x):
            return 0
    math = _M()
    def hyp(a, b):
        return a + b
    """)
W2_SUBCLASS = d("""
    import types
    class _M(types.ModuleType):
        def isclose(self, *a, **k):
            return True
    math = _M("math")
    def hyp(a, b):
        return a + b
    """)
HYP = "import math\ndef hyp(a, b):\n    return math.sqrt(a * a + b * b)\n"
HYP_TEST = "assert all(math.isclose(hyp(a, b), c) for a, b, c in [(3, 4, 5.0), (5, 12, 13.0)])"
# W3 / A17: a comparison call split as a value, its expected literal evaluated inside
W3_PATCH_OPERATOR = "import operator\noperator.eq = lambda a, b: True\ndef fib(n):\n    return 0\n"
W3_PATCH_ISCLOSE = "import math\nmath.isclose = lambda *a, **k: True\ndef fib(n):\n    return 0\n"
W3_FRAME = d("""
    import sys
    def fib(n):
        consts = sys._getframe(1).f_code.co_consts
        return max((c for c in consts if isinstance(c, int) and not isinstance(c, bool)), default=0)
    """)
W3_PATCH_MAX = "import builtins\nbuiltins.max = lambda *a, **k: a[-1]\ndef fib(n):\n    return 0\n"
# W4: a plain value whose __eq__ says NotImplemented (truthy)
W4_STR = "def fib(n):\n    return str(n)\n"
# W5: a test of a builtin-named function whose call sits outside the asserts
W5_NONE = "def helper():\n    return None\n"
W5_HONEST = "def sorted(xs):\n    out = list(xs)\n    out.sort()\n    return out\n"
# W6: `in` answered by the program's own __contains__
W6_LIAR = d("""
    class _All:
        def __contains__(self, x):
            return True
        def __iter__(self):
            return iter(())
    def primes_upto(n):
        return _All()
    """)
PRIMES = d("""
    def primes_upto(n):
        return [p for p in range(2, n + 1) if all(p % q for q in range(2, p))]
    """)
# W8: an OrderedDict's order
ORDER_HONEST = "import collections\ndef ranked(xs):\n    return collections.OrderedDict(sorted(xs.items()))\n"
ORDER_WRONG = d("""
    import collections
    def ranked(xs):
        return collections.OrderedDict(sorted(xs.items(), reverse=True))
    """)
ORDER_TEST = ("import collections\nassert ranked({'b': 2, 'a': 1}) == "
              "collections.OrderedDict([('a', 1), ('b', 2)])")


def wrong_rewarded() -> list:
    out = []
    out += pairs("w1_all_map", {"asserts": "assert all(map(is_even, [2, 4, 6]))"}, IS_EVEN, W1_FORGER)
    out += pairs("w1_starmap", {"asserts": "import itertools\nassert all(s == 3 for s in "
                                           "itertools.starmap(add, [(1, 2), (2, 1)]))"},
                 "def add(a, b):\n    return a + b\n", W1_STARMAP)
    out += pairs("w2_math", {"asserts": HYP_TEST}, HYP, [W2_INSTANCE, W2_SUBCLASS])
    out += pairs("w3_operator_is_true",
                 {"asserts": "import operator\nassert operator.eq(fib(10), 55) is True"}, FIB,
                 [W3_PATCH_OPERATOR, W3_FRAME])
    out += pairs("w3_isclose_eq_true",
                 {"asserts": "import math\nassert math.isclose(fib(10), 55) == True"}, FIB,
                 [W3_PATCH_ISCLOSE, W3_FRAME])
    out += pairs("w3_max_literal", {"asserts": "assert max(fib(10), 55) == 55\nassert max(fib(1), 0) == 1"},
                 FIB, W3_PATCH_MAX)
    out += pairs("w4_dunder_eq_str", {"asserts": "assert fib(10).__eq__(55)"}, FIB, W4_STR)
    out += pairs("w5_builtin_outside_assert", {"asserts": "r = sorted([3, 1, 2])\nok = r == [1, 2, 3]\n"
                                                          "assert ok"}, W5_HONEST, W5_NONE)
    out += pairs("w6_contains", {"asserts": "assert all(p in primes_upto(10) for p in [2, 3, 5, 7])\n"
                                            "assert 4 not in primes_upto(10)"}, PRIMES, W6_LIAR)
    out += pairs("w8_ordered_dict", {"asserts": ORDER_TEST}, ORDER_HONEST, ORDER_WRONG)
    return out


# H1: stdin as a file
FAST_IO = d("""
    import os, sys
    data = os.read(0, os.fstat(0).st_size).split()
    n = int(data[0])
    print(sum(map(int, data[1:n + 1])))
    """)
DEV_STDIN = d("""
    with open("/dev/stdin") as f:
        nums = list(map(int, f.read().split()))
    with open("/dev/stdout", "w") as out:
        out.write(str(sum(nums[1:])) + "\\n")
    """)
BIG_READ = "import os\nnums = os.read(0, 1 << 20).split()\nprint(sum(map(int, nums[1:])))\n"
SUM_WRONG = "import sys\nnums = sys.stdin.read().split()\nprint(sum(map(int, nums[1:])) + 1)\n"
SUM_IO = {"stdin_stdout": [["3\n1 2 3\n", "6\n"], ["1\n10\n", "10\n"]]}
# H3: a program's exception class, namedtuple fields
ERR_HONEST = d("""
    class NegativeError(ValueError):
        pass
    def root(x):
        if x < 0:
            raise NegativeError("negative")
        return x ** 0.5
    """)
ERR_WRONG = "def root(x):\n    return abs(x) ** 0.5\n"
ERR_TEST = d("""
    try:
        root(-1)
        raised = False
    except ValueError:
        raised = True
    assert raised and root(4) == 2.0
    """)
# H4: HumanEval context (the prompt's imports and helpers)
PAL_PROMPT = d('''
    from typing import List


    def is_pal(s: str) -> bool:
        return s == s[::-1]


    def count_pals(words: List[str]) -> int:
        """How many words are palindromes."""
    ''')
PAL_ALONE = "def count_pals(words: List[str]) -> int:\n    return sum(is_pal(w) for w in words)\n"
PAL_WRONG = "def count_pals(words: List[str]) -> int:\n    return len(words)\n"
PAL_TEST = ("def check(candidate):\n    assert candidate(['aba', 'ab', 'x']) == 2\n"
            "    assert candidate([]) == 0\n")
# H5: pytest-style tests (KodCode)
KOD_TEST = d("""
    import pytest
    from solution import safe_div

    def test_div():
        assert safe_div(6, 3) == 2

    def test_zero():
        with pytest.raises(ZeroDivisionError):
            safe_div(1, 0)
    """)
KOD_HONEST = "def safe_div(a, b):\n    return a / b\n"
KOD_WRONG = "def safe_div(a, b):\n    return a / b if b else 0\n"
# H6: extraction: an indented block in a list item; names imported from solution
INDENTED = "1. The function:\n\n   ```python\n   def twice(x):\n       return 2 * x\n   ```\n"
INDENTED_WRONG = "1. The function:\n\n   ```python\n   def twice(x):\n       return x + 2\n   ```\n"
# H7: an augmented assignment on a test name; check()'s locals shadowing builtins
AUG_TEST = "total = 0\ntotal += fib(5)\ntotal += fib(6)\nassert total == 13"
SHADOW_TEST = d("""
    def check(candidate):
        list = [candidate(i) for i in range(5)]
        max = 3
        assert list == [0, 1, 1, 2, 3] and list[-1] == max
    check(fib)
    """)
# H8: a UTF-8 BOM
BOM = "\ufeffdef twice(x):\n    return 2 * x\n"
BOM_WRONG = "\ufeffdef twice(x):\n    return x * x\n"
# H9: the stack (memoised recursion 1e5 deep) and the CPU affinity
DEEP = d("""
    import sys, functools
    sys.setrecursionlimit(10 ** 6)
    @functools.lru_cache(maxsize=None)
    def depth(n):
        return 0 if n == 0 else depth(n - 1) + 1
    """)
DEEP_WRONG = "def depth(n):\n    return n - 1\n"
AFFINITY = "import os\ndef cpus():\n    return len(os.sched_getaffinity(0)) <= os.cpu_count()\n"
AFFINITY_WRONG = "def cpus():\n    return False\n"
# H10: io judged by tokens / case
TOKENS = "n = int(input())\nfor i in range(1, n + 1):\n    print(i)\n"
TOKENS_WRONG = "n = int(input())\nprint(*range(n))\n"
CASE = "print('yes' if int(input()) % 2 == 0 else 'no')\n"
CASE_WRONG = "print('YES')\n"
# nesting deeper than 100 and a 20-thread pool
THREADS = d("""
    from concurrent.futures import ThreadPoolExecutor
    def squares(n):
        with ThreadPoolExecutor(max_workers=20) as ex:
            return list(ex.map(lambda x: x * x, range(n)))
    """)
THREADS_WRONG = "def squares(n):\n    return list(range(n))\n"


def honest_refused() -> list:
    out = []
    for name, prog in (("h1_fstat", FAST_IO), ("h1_dev_stdin", DEV_STDIN), ("h1_big_read", BIG_READ)):
        out += pairs(name, SUM_IO, prog, SUM_WRONG)
    out += pairs("h3_exception_subclass", {"asserts": ERR_TEST}, ERR_HONEST, ERR_WRONG)
    out += pairs("h4_prompt_context", {"asserts": PAL_TEST + "\ncheck(count_pals)\n",
                                       "entry_point": "count_pals", "helpers": PAL_PROMPT},
                 PAL_ALONE, PAL_WRONG)
    out += pairs("h5_pytest", {"asserts": KOD_TEST, "packages": ["pytest"]}, KOD_HONEST, KOD_WRONG)
    out += pairs("h6_indented_block", {"asserts": "assert twice(4) == 8"}, INDENTED, INDENTED_WRONG)
    out += pairs("h7_augmented", {"asserts": AUG_TEST}, FIB, "def fib(n):\n    return n\n")
    out += pairs("h7_shadowing_check", {"asserts": SHADOW_TEST}, FIB, "def fib(n):\n    return n\n")
    out += pairs("h8_bom", {"asserts": "assert twice(4) == 8"}, BOM, BOM_WRONG)
    out += pairs("h9_deep_recursion", {"asserts": "assert depth(100000) == 100000"}, DEEP, DEEP_WRONG)
    out += pairs("h9_affinity", {"asserts": "assert cpus()"}, AFFINITY, AFFINITY_WRONG)
    out += pairs("h10_tokens", {"stdin_stdout": [["3\n", "1 2 3\n"]], "compare": "tokens"}, TOKENS,
                 "n = int(input())\nprint(*range(n + 1))\n")
    out += pairs("h10_lines_stay_lines", {"stdin_stdout": [["3\n", "1\n2\n3\n"]]}, TOKENS, TOKENS_WRONG)
    out += pairs("h10_ignore_case",
                 {"stdin_stdout": [["4\n", "YES\n"], ["3\n", "NO\n"]], "ignore_case": True}, CASE, CASE_WRONG)
    out += pairs("pool_20_threads", {"asserts": "assert squares(30) == [i * i for i in range(30)]"}, THREADS,
                 THREADS_WRONG)
    return out


def cases() -> list[tuple[str, str, dict, dict, float]]:
    return wrong_rewarded() + honest_refused()
