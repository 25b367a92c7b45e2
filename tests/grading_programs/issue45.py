"""Issue 45's classes as programs: (name, program, reference, options, the score the task's truth
gives it). Written from the issue's class descriptions for tests/test_grading_issue45.py."""

from __future__ import annotations

import textwrap


def d(src: str) -> str:
    """A program or test source written indented in this file."""
    return textwrap.dedent(src).lstrip("\n")


def pairs(name: str, ref: dict, honest: str, wrong: str | list[str], opts: dict | None = None) -> list:
    """The honest program of a task (1.0) and its wrong ones (0.0)."""
    wrongs = [wrong] if isinstance(wrong, str) else wrong
    out = [(f"{name}_honest", honest, ref, opts or {}, 1.0)]
    for i, w in enumerate(wrongs):
        out.append((f"{name}_wrong{i if len(wrongs) > 1 else ''}", w, ref, opts or {}, 0.0))
    return out


AREA = "def area(w, h):\n    return w * h\n"
WRONG_AREA = "def area(w, h):\n    return w + h\n"
# always equal, always true, and 0 for every arithmetic: what an unrecognised form would believe
UNIVERSAL = d("""
    class U(int):
        def __eq__(self, other):
            return True
        def __ne__(self, other):
            return False
        __lt__ = __le__ = __gt__ = __ge__ = __eq__
        def __sub__(self, other):
            return 0
        __rsub__ = __add__ = __radd__ = __truediv__ = __rtruediv__ = __sub__
        def __abs__(self):
            return 0
        def __round__(self, n=None):
            return 0
        def __bool__(self):
            return True
        __hash__ = int.__hash__
    def area(w, h):
        return U(0)
    """)
EVAL_ONLY = "import builtins\nbuiltins.eval = lambda *a, **k: True\n"  # and no area at all
PATCH_ALL = UNIVERSAL + d("""
    import builtins, math, cmath
    for _n in ("eval", "exec", "compile", "isinstance", "all", "any", "abs", "round", "bool"):
        setattr(builtins, _n, lambda *a, **k: True)
    math.isclose = cmath.isclose = lambda *a, **k: True
    """)
FORMS = {  # asserts that compare inside: each runs in the checker, never beside the program
    "and": "assert area(2, 3) == 6 and area(1, 1) == 1",
    "or": "assert area(2, 3) == 7 or area(2, 3) == 6",
    "chained": "assert 5 < area(2, 3) == 6",
    "all_comprehension": "assert all(area(w, 1) == w for w in range(1, 4))",
    "any_comprehension": "assert any(area(2, h) == 8 for h in range(6))",
    "not_ne": "assert not (area(2, 3) != 6)",
    "eq_true": "assert (area(2, 3) == 6) == True",
    "is_true": "assert (area(2, 3) == 6) is True",
    "difference_zero": "assert area(2, 3) - 6 == 0",
    "relative_tolerance": "assert abs(area(2.5, 2) - 5.0) / 5.0 < 1e-9",
    "relative_tolerance_le": "assert abs(area(2.5, 2) - 5.0) <= 1e-9 * abs(5.0)",
    "round_difference": "assert round(area(2, 3) - 6, 6) == 0",
    "bool_of_eq": "assert bool(area(2, 3) == 6)",
    "isinstance": "assert isinstance(area(2, 3), int) and area(2, 3) == 6",
    "cmath_isclose": "import cmath\nassert cmath.isclose(area(2, 3), 6)",
    "np_allclose": "import numpy as np\nassert np.allclose(area(2, 3), 6)",
}
NO_ASSERT = {  # tests whose asserts a plain exec would never run
    "main_guard": d("""
        def check(candidate):
            assert candidate(2, 3) == 6
            assert candidate(1, 5) == 5

        if __name__ == "__main__":
            check(area)
        """),
    "main_guard_loop": d("""
        def check(candidate):
            for w in range(1, 4):
                assert candidate(w, 2) == 2 * w

        if __name__ == "__main__":
            check(area)
        """),
    "pytest_functions": d("""
        def test_small():
            assert area(2, 3) == 6

        def test_unit():
            assert area(1, 5) == 5
        """),
    "pytest_class": d("""
        class TestArea:
            def test_small(self):
                assert area(2, 3) == 6

            def test_unit(self):
                assert area(1, 5) == 5
        """),
    "unittest_main": d("""
        import unittest

        class TestArea(unittest.TestCase):
            def test_small(self):
                self.assertEqual(area(2, 3), 6)

        if __name__ == "__main__":
            unittest.main()
        """),
    "unittest_no_main": d("""
        import unittest

        class TestArea(unittest.TestCase):
            def test_small(self):
                self.assertEqual(area(2, 3), 6)
                self.assertTrue(area(1, 1) == 1)
        """),
}
CHECK_UNCALLED = "def check(candidate):\n    assert candidate(2, 3) == 6\n    assert candidate(1, 5) == 5\n"
IS_PRIME = "def is_prime(n):\n    return n > 1 and all(n % d for d in range(2, int(n ** 0.5) + 1))\n"
ROT_PROMPT = d('''
    def rot3(s):
        return "".join(chr((ord(c) - 97 + 3) % 26 + 97) for c in s)


    def unrot3(s):
        """Undo rot3: unrot3(rot3(s)) == s for lowercase s."""
    ''')
ROT_HONEST = ROT_PROMPT.split("def unrot3")[0] + d("""
    def unrot3(s):
        return "".join(chr((ord(c) - 97 - 3) % 26 + 97) for c in s)
    """)
ROT_WRONG = "def rot3(s):\n    return s\n\n\ndef unrot3(s):\n    return s\n"
MY_SORTED = d("""
    def sorted(xs):
        out = []
        for x in xs:
            i = 0
            while i < len(out) and out[i] <= x:
                i += 1
            out.insert(i, x)
        return out
    """)


def wrong_programs() -> list[tuple]:
    out = []
    for form, src in FORMS.items():
        ref = {"asserts": src, **({"packages": ["numpy"]} if "numpy" in src else {})}
        out += pairs(f"form_{form}", ref, AREA, [UNIVERSAL, EVAL_ONLY, PATCH_ALL])
    for form, src in NO_ASSERT.items():
        out += pairs(f"noassert_{form}", {"asserts": src}, AREA, [WRONG_AREA, AREA.replace("w * h", "0")])
    out += pairs("noassert_check_uncalled_entry", {"asserts": CHECK_UNCALLED, "entry_point": "area"}, AREA,
                 WRONG_AREA)
    out += pairs("state_rebound_expected", {"asserts": "E = 4\nassert sq(2) == E\nE = 9\nassert sq(3) == E"},
                 "def sq(x):\n    return x * x\n", "def sq(x):\n    return 9\n")
    guesser = d("""
        def rev(x):
            for k, v in list(globals().items()):
                if isinstance(v, list) and v != x and not k.startswith("_"):
                    return v
            return []
        """)
    out += pairs("state_input_is_expected", {"asserts": d("""
                     A = [1, 2, 3]
                     B = [3, 2, 1]
                     assert rev(A) == B
                     assert rev(B) == A
                     """)}, "def rev(x):\n    return x[::-1]\n", guesser)
    out += pairs("state_later_not_mutated",
                 {"asserts": "data = [3, 1, 2]\nassert largest(data) == 3\nassert data == [3, 1, 2]"},
                 "def largest(xs):\n    return max(xs)\n",
                 "def largest(xs):\n    xs.sort()\n    return xs[-1]\n")
    lookahead = d(r"""
        import gc, re
        def nxt(n):
            seen = [int(m) for o in gc.get_objects() if isinstance(o, dict)
                    for v in o.values() if isinstance(v, str) for m in re.findall(r"nxt\((\d+)\)", v)]
            later = [m for m in seen if m > n]
            return min(later) if later else n + 1
        """)
    next_prime = IS_PRIME + d("""
        def nxt(n):
            n += 1
            while not is_prime(n):
                n += 1
            return n
        """)
    out += pairs("state_no_lookahead",
                 {"asserts": "assert nxt(7) == 11\nassert nxt(11) == 13\nassert nxt(13) == 17"}, next_prime,
                 lookahead)
    patched_math = "import math\nmath.isclose = lambda *a, **k: True\n"
    out += pairs("implicit_math_checked",
                 {"asserts": "for w in (1, 2):\n    assert math.isclose(area(w, 2), 2.0 * w)\n"},
                 "import math\n" + AREA, patched_math + WRONG_AREA)
    out += pairs("implicit_math_split", {"asserts": "assert math.isclose(area(1.5, 2), 3.0)"},
                 "import math\n" + AREA, patched_math + WRONG_AREA)
    raises = "def is_prime(n):\n    raise StopIteration\n"
    out += pairs("stop_iteration", {"asserts": d("""
                     def check(candidate):
                         assert all(map(candidate, [2, 3, 5, 7]))
                         assert not any(map(candidate, [4, 6, 9]))

                     check(is_prime)
                     """)}, IS_PRIME, raises)
    out += pairs("stop_iteration_split_form", {"asserts": "assert all(map(is_prime, [2, 3, 5]))"}, IS_PRIME,
                 raises)
    helper_ref = {"asserts": d("""
                      def check(candidate):
                          for s in ["abc", "hello", "xyz"]:
                              assert candidate(rot3(s)) == s

                      check(unrot3)
                      """), "entry_point": "unrot3", "helpers": ROT_PROMPT}
    out += pairs("prompt_helpers", helper_ref, ROT_HONEST, ROT_WRONG)
    split_ref = {**helper_ref, "asserts": "assert unrot3(rot3('abc')) == 'abc'"}
    out += pairs("prompt_helpers_split_form", split_ref, ROT_HONEST, ROT_WRONG)
    not_defined = "def sort_list(xs):\n    return xs\n"
    out += pairs("builtin_entry_mbpp", {"asserts": "assert sorted([3, 1, 2]) == [1, 2, 3]\n"
                                                   "assert sorted([5, 4]) == [4, 5]"}, MY_SORTED, not_defined)
    out += pairs("builtin_entry_humaneval",
                 {"asserts": "def check(candidate):\n    assert candidate([3, 1, 2]) == [1, 2, 3]\n\n"
                             "check(sorted)\n"},
                 MY_SORTED, not_defined)
    out += pairs("builtin_entry_checked", {"asserts": d("""
                     for xs, want in (([3, 1, 2], [1, 2, 3]), ([2, 1], [1, 2])):
                         assert sorted(xs) == want
                     """)}, MY_SORTED, not_defined)
    return out


def types() -> list[tuple]:
    c = "from collections import Counter\n"
    always = d("""
        class D(dict):
            def __eq__(self, other):
                return True
        def counts(s):
            return D()
        """)
    out = pairs("type_counter", {"asserts": "assert counts('abca') == {'a': 2, 'b': 1, 'c': 1}"},
                c + "def counts(s):\n    return Counter(s)\n",
                [c + "def counts(s):\n    return Counter(s[:-1])\n", always])
    out += pairs("type_counter_checked",
                 {"asserts": "for s in ('aab', 'abc'):\n    c = counts(s)\n"
                             "    assert c['a'] == s.count('a') and c['z'] == 0\n"},
                 c + "def counts(s):\n    return Counter(s)\n",
                 c + "def counts(s):\n    return Counter(s[1:])\n")
    out += pairs("type_mbpp_reference", {"asserts": "assert freq_count([10, 10, 10, 20]) == {10: 3, 20: 1}"},
                 d("""
                     import collections
                     def freq_count(list1):
                         freq_count = collections.Counter(list1)
                         return freq_count
                     """), "def freq_count(list1):\n    return {10: 3}\n")
    group = d("""
        from collections import defaultdict
        def group(words):
            d = defaultdict(list)
            for w in words{}:
                d[w[0]].append(w)
            return d
        """)
    out += pairs("type_defaultdict",
                 {"asserts": "assert group(['ab', 'ac', 'b']) == {'a': ['ab', 'ac'], 'b': ['b']}"},
                 group.format(""), group.format("[:-1]"))
    firsts = d("""
        from collections import OrderedDict
        def firsts(s):
            d = OrderedDict()
            for c in s:
                {}
            return d
        """)
    out += pairs("type_ordereddict", {"asserts": "assert firsts('abca') == {'a': 0, 'b': 1, 'c': 2}"},
                 firsts.format("d.setdefault(c, len(d))"), firsts.format("d[c] = len(d)"))
    mid = "from collections import namedtuple\nP = namedtuple('P', 'x y')\n" \
          "def mid(a, b):\n    return P({}, {})\n"
    out += pairs("type_namedtuple", {"asserts": "assert mid((0, 0), (2, 4)) == (1.0, 2.0)"},
                 mid.format("(a[0] + b[0]) / 2", "(a[1] + b[1]) / 2"),
                 mid.format("(a[1] + b[1]) / 2", "(a[0] + b[0]) / 2"))
    views = "def keys_of(d):\n    return d.{}()\ndef items_of(d):\n    return d.items()\n"
    out += pairs("type_dict_views", {"asserts": "assert keys_of({'a': 1, 'b': 2}) == {'a', 'b'}\n"
                                                "assert items_of({'a': 1}) == {('a', 1)}"},
                 views.format("keys"), views.format("values"))
    half = "from fractions import Fraction\ndef half(n):\n    return Fraction(n, {})\n"
    out += pairs("type_fraction", {"asserts": "assert half(1) == 0.5\nassert half(3) == 1.5"}, half.format(2),
                 half.format(3))
    out += pairs("type_fraction_checked",
                 {"asserts": "from fractions import Fraction\nfor n in range(1, 4):\n"
                             "    assert half(n) == Fraction(n, 2)\n"},
                 half.format(2), half.format(3))
    money_ok = "from decimal import Decimal\ndef add_money(a, b):\n    return Decimal(a) + Decimal(b)\n"
    money_bad = "def add_money(a, b):\n    return float(a) + float(b)\n"
    out += pairs("type_decimal", {"asserts": "assert str(add_money('0.10', '0.20')) == '0.30'\n"
                                             "assert add_money('0.25', '0.25') == 0.5"}, money_ok, money_bad)
    out += pairs("type_decimal_checked",
                 {"asserts": "from decimal import Decimal\n"
                             "assert add_money('0.10', '0.20') == Decimal('0.30')"},
                 money_ok, money_bad)
    code = "from enum import IntEnum\nclass Color(IntEnum):\n    RED = 1\n    GREEN = 2\n" \
           "def code(name):\n    return {}\n"
    out += pairs("type_intenum", {"asserts": "assert code('red') == 1\nassert code('green') == 2"},
                 code.format("Color[name.upper()]"), code.format("Color.RED"))
    return out


STACK = d("""
    class Stack:
        def __init__(self):
            self.items = []
        def push(self, x):
            self.items.append(x)
        def pop(self):
            return self.items.pop({})
        def size(self):
            return len(self.items)
        def is_empty(self):
            return not self.items
        def __len__(self):
            return len(self.items)
    """)
TWO_SUM = d("""
    class Solution:
        def twoSum(self, nums, target):
            seen = {{}}
            for i, x in enumerate(nums):
                if target - x in seen:
                    return {}
                seen[x] = i
    """)


def state() -> list[tuple]:
    in_place = ("def sort_in_place(xs):\n    xs.sort()\n", "def sort_in_place(xs):\n    return sorted(xs)\n")
    out = pairs("state_mutation", {"asserts": "a = [3, 1, 2]\nsort_in_place(a)\nassert a == [1, 2, 3]\n"
                                              "b = []\nsort_in_place(b)\nassert b == []"}, *in_place)
    out += pairs("state_mutation_checked", {"asserts": d("""
                     for xs in ([3, 1, 2], [5, 4]):
                         ys = list(xs)
                         sort_in_place(ys)
                         assert ys == sorted(xs)
                     """)}, *in_place)
    out += pairs("state_module_counter",
                 {"asserts": "assert next_id() == 1\nassert next_id() == 2\nassert next_id() == 3"},
                 "_n = 0\ndef next_id():\n    global _n\n    _n += 1\n    return _n\n",
                 "def next_id():\n    return 1\n")
    out += pairs("state_closure",
                 {"asserts": "c = make_counter()\nassert c() == 1\nassert c() == 2\n"
                             "d = make_counter()\nassert d() == 1"},
                 d("""
                     def make_counter():
                         n = [0]
                         def step():
                             n[0] += 1
                             return n[0]
                         return step
                     """), d("""
                     _n = [0]
                     def make_counter():
                         def step():
                             _n[0] += 1
                             return _n[0]
                         return step
                     """))
    out += pairs("state_rebound_input",
                 {"asserts": "x = [1, 2]\nassert total(x) == 3\nx = [5]\nassert total(x) == 5"},
                 "def total(xs):\n    return sum(xs)\n", "def total(xs):\n    return 5\n")
    stack = (STACK.format(""), STACK.format("0"))
    out += pairs("class_design", {"asserts": "s = Stack()\ns.push(1)\ns.push(2)\nassert s.pop() == 2\n"
                                             "assert s.size() == 1\nassert not s.is_empty()"}, *stack)
    out += pairs("class_design_checked", {"asserts": d("""
                     def check(Stack):
                         s = Stack()
                         for i in range(3):
                             s.push(i)
                         assert s.pop() == 2
                         assert len(s) == 2
                         assert s.size() == 2

                     check(Stack)
                     """)}, *stack)
    two_sum = (TWO_SUM.format("[seen[target - x], i]"), TWO_SUM.format("[i, seen[target - x]]"))
    out += pairs("leetcode", {"asserts": "assert Solution().twoSum([2, 7, 11, 15], 9) == [0, 1]\n"
                                         "assert Solution().twoSum([3, 2, 4], 6) == [1, 2]"}, *two_sum)
    out += pairs("leetcode_checked", {"asserts": d("""
                     for nums, t, want in (([2, 7, 11, 15], 9, [0, 1]), ([3, 2, 4], 6, [1, 2])):
                         assert Solution().twoSum(nums, t) == want
                     """)}, *two_sum)
    evens = "def evens(n):\n    for i in range({}, n, 2):\n        yield i\n"
    out += pairs("generator", {"asserts": "assert list(evens(7)) == [0, 2, 4, 6]\ng = evens(3)\n"
                                          "assert next(g) == 0\nassert next(g) == 2"},
                 evens.format(0), evens.format(1))
    out += pairs("generator_checked", {"asserts": d("""
                     g = evens(100)
                     for want in range(0, 10, 2):
                         assert next(g) == want
                     assert sum(evens(5)) == 6
                     """)}, evens.format(0), evens.format(1))
    out += pairs("module_constant_checked",
                 {"asserts": "for v in (3, 50):\n    assert clamp(v) == min(v, LIMIT)\nassert LIMIT == 10\n"},
                 "LIMIT = 10\ndef clamp(v):\n    return min(v, LIMIT)\n",
                 "LIMIT = 10\ndef clamp(v):\n    return v\n")
    out += pairs("big_int_checked", {"asserts": "for n in (15000, 20000):\n    assert pow2(n) == 2 ** n\n"},
                 "def pow2(n):\n    return 1 << n\n", "def pow2(n):\n    return 1 << (n - 1)\n")
    out += pairs("solution_import", {"asserts": "from solution import area\nassert area(2, 3) == 6"}, AREA,
                 WRONG_AREA)
    out += pairs("solution_import_checked", {"asserts": d("""
                     from solution import area
                     import solution
                     for w in range(4):
                         assert area(w, 2) == 2 * w
                     assert solution.area(3, 3) == 9
                     """)}, AREA, WRONG_AREA)
    return out


def costs_and_limits() -> list[tuple]:
    inc = "def inc(x):\n    return x + 1\n"
    many = "\n".join(f"assert inc({i}) == {i + 1}" for i in range(800))
    out = pairs("many_asserts", {"asserts": many}, inc, "def inc(x):\n    return x + 1 if x < 799 else 0\n")
    slow = "import time\ntime.sleep(0.7)\n"
    out += pairs("slow_import", {"asserts": "\n".join(f"assert inc({i}) == {i + 1}" for i in range(40))},
                 slow + inc, slow + "def inc(x):\n    return x + 1 if x < 39 else 0\n")
    debug = "def inc(x):\n    print('debug', x, '.' * 1500000)\n    return x + {}\n"  # 15 MB in all
    out += pairs("debug_prints", {"asserts": "\n".join(f"assert inc({i}) == {i + 1}" for i in range(10))},
                 debug.format(1), debug.format(0))
    err = "import sys\nsys.stderr.write('warning\\n' * 50000)\n" \
          "a, b = map(int, input().split())\nprint(a {} b)\n"
    out += pairs("stderr_flood", {"stdin_stdout": [["2 3\n", "5\n"], ["10 -4\n", "6\n"]]}, err.format("+"),
                 err.format("-"))
    n = 200000
    squares = "n = int(input())\nprint('\\n'.join(str(i * i) for i in range({})))\n"
    big = "\n".join(str(i * i) for i in range(n)) + "\n"  # 1.9 MB
    out += pairs("big_io_output", {"stdin_stdout": [[f"{n}\n", big]]}, squares.format("n"),
                 squares.format("n - 1"))
    square_list = "assert squares([1, 2, 3]) == [1, 4, 9]"
    pool = d("""
        from multiprocessing import Pool
        def _sq(x):
            return x * x{}
        def squares(xs):
            with Pool() as p:
                return p.map(_sq, xs)
        """)
    out += pairs("multiprocessing_pool", {"asserts": square_list}, pool.format(""), pool.format(" + 1"))
    ppe = d("""
        from concurrent.futures import ProcessPoolExecutor
        def _sq(x):
            return x * x{}
        def squares(xs):
            with ProcessPoolExecutor() as p:
                return list(p.map(_sq, xs))
        """)
    out += pairs("process_pool_executor", {"asserts": square_list}, ppe.format(""), ppe.format(" + 1"))
    tpe = d("""
        from concurrent.futures import ThreadPoolExecutor
        def squares(xs):
            with ThreadPoolExecutor() as p:
                return list(p.map(lambda x: x * x{}, xs))
        """)
    out += pairs("thread_pool_default", {"asserts": "assert squares(list(range(64)))[-1] == 63 * 63"},
                 tpe.format(""), tpe.format(" + 1"))
    threads = d("""
        import threading
        def squares(xs):
            out = [None] * len(xs)
            def work(i):
                out[i] = xs[i] * xs[i]{}
            ts = [threading.Thread(target=work, args=(i,)) for i in range(len(xs))]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
            return out
        """)
    out += pairs("twelve_threads",
                 {"asserts": "assert squares(list(range(12))) == [i * i for i in range(12)]"},
                 threads.format(""), threads.format(" + 1"))
    # the CPUs a program sees (and so its default pool sizes) are 4, whatever the host has
    out += pairs("cpu_count_fixed", {"asserts": "assert cpus() == 4"},
                 "import os\ndef cpus():\n    return os.cpu_count()\n", "def cpus():\n    return 2\n")
    norm = "import numpy as np\ndef norm(v):\n    return float(np.linalg.norm(v)){}\n"
    out += pairs("numpy_packages",
                 {"asserts": "assert abs(norm([3, 4]) - 5.0) < 1e-9", "packages": ["numpy"]},
                 norm.format(""), norm.format(" + 1"))
    return out


def extraction() -> list[tuple]:
    usage = "Here it is:\n```python\n{}```\nUsage:\n```python\nprint(area(2, 3))\n```\n"
    out = pairs("extract_usage_example", {"asserts": "assert area(2, 3) == 6"}, usage.format(AREA),
                usage.format(WRONG_AREA))
    io = "```python\na, b = map(int, input().split())\nprint(a {} b)\n```\n" \
         "For example:\n```python\nprint(5)\n```\n"
    out += pairs("extract_io_program", {"stdin_stdout": [["2 3\n", "5\n"], ["1 1\n", "2\n"]]}, io.format("+"),
                 io.format("*"))
    out += pairs("float_tolerance", {"stdin_stdout": [["3\n", "0.333333333\n"]], "float_tol": 1e-6},
                 "n = int(input())\nprint(1 / n)\n", "n = int(input())\nprint(round(1 / n, 2))\n")
    latin = "# -*- coding: latin-1 -*-\ndef greet():\n    return {!r}\n"
    out += pairs("latin1_declaration", {"asserts": "assert greet() == 'héllo wörld'"},
                 latin.format("héllo wörld"), latin.format("hello world"))
    out += pairs("latin1_declaration_io", {"stdin_stdout": [["", "naïve café\n"]]},
                 "# -*- coding: latin-1 -*-\nprint('naïve café')\n",
                 "# -*- coding: latin-1 -*-\nprint('naive cafe')\n")
    return out


def cases() -> list[tuple[str, str, dict, dict, float]]:
    """(name, program, reference, options, the score the task's truth gives it)."""
    return wrong_programs() + types() + state() + costs_and_limits() + extraction()
