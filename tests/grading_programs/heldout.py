"""A held-out set for issue 45, written after the grader was built, apart from issue45.py: other
tasks (fib, palindromes, bank accounts, queues, means, ...) and other spellings of each class of the
issue. (name, program, reference, options, the score the task's truth gives it)."""

from __future__ import annotations

from tests.grading_programs.issue45 import d, pairs

FIB = d("""
    def fib(n):
        a, b = 0, 1
        for _ in range(n):
            a, b = b, a + b
        return a
    """)
# every comparison true, every missing method true, every arithmetic 0 (it knows no answer)
CHAMELEON = d("""
    class C(int):
        def __eq__(self, other):
            return True
        def __ne__(self, other):
            return False
        __lt__ = __le__ = __gt__ = __ge__ = __eq__
        def __getattr__(self, name):
            return lambda *a, **k: True
        def __sub__(self, other):
            return 0
        __rsub__ = __add__ = __radd__ = __mul__ = __sub__
        def __hash__(self):
            return 0
        def __bool__(self):
            return True
    def fib(n):
        return C(0)
    """)
PATCHER = d("""
    import builtins, operator
    for _n in ("eval", "exec", "compile", "all", "any", "list", "str", "sorted", "set", "len", "isinstance"):
        setattr(builtins, _n, lambda *a, **k: True)
    operator.eq = lambda *a: True
    """)
HELD_FORMS = {
    "or_tuple": "assert fib(10) == 55 or fib(10) == 56",
    "chained_bounds": "assert 54 < fib(10) < 56",
    "not_any_generator": "assert not any(fib(n) != [0, 1, 1, 2][n] for n in range(4))",
    "all_of_list": "assert all([fib(5) == 5, fib(6) == 8])",
    "set_display": "assert {fib(5)} == {5}",
    "list_comprehension": "assert [fib(i) for i in range(5)] == [0, 1, 1, 2, 3]",
    "difference_small": "assert 0 <= fib(10) - 55 < 1e-9",
    "math_fabs": "import math\nassert math.fabs(fib(10) - 55) < 1e-9",
    "str_of_value": "assert str(fib(10)) == '55'",
    "method_of_value": "assert str(fib(10)).startswith('5')",
    "dunder_eq": "assert fib(10).__eq__(55)",
    "operator_eq": "import operator\nassert operator.eq(fib(10), 55)",
    "ternary": "assert (fib(10) if True else 0) == 55",
    "walrus": "assert (v := fib(10)) == 55",
    "tuple_compare": "assert (fib(5), fib(6)) == (5, 8)",
    "format_value": "assert f'{fib(10)}' == '55'",
}
IS_PAL = "def is_pal(s):\n    return s == s[::-1]\n"
FIB_ZERO = "def fib(n):\n    return 0\n"
FIB_DOUBLE = "def fib(n):\n    return 2 * n\n"


def forms() -> list[tuple]:
    out = []
    for name, src in HELD_FORMS.items():
        out += pairs(f"held_form_{name}", {"asserts": src}, FIB, [CHAMELEON, PATCHER + FIB_ZERO])
    return out


def no_assert() -> list[tuple]:
    fib_wrong = "def fib(n):\n    return n\n"
    srcs = {
        "pytest_default_arg": "def test_fib(n=10):\n    assert fib(n) == 55\n",
        "function_named_test": "def test():\n    assert fib(7) == 13\n",
        "unittest_exit_false": d("""
            import unittest

            class FibTest(unittest.TestCase):
                def test_values(self):
                    self.assertEqual([fib(i) for i in range(6)], [0, 1, 1, 2, 3, 5])

            if __name__ == "__main__":
                unittest.main(exit=False, verbosity=0)
            """),
        "sys_exit_check": d("""
            import sys

            def check(candidate):
                assert candidate(10) == 55

            if __name__ == "__main__":
                sys.exit(check(fib))
            """),
        "guard_reversed": "def check(f):\n    assert f(12) == 144\n\n"
                          "if '__main__' == __name__:\n    check(fib)\n",
    }
    out = []
    for name, src in srcs.items():
        out += pairs(f"held_noassert_{name}", {"asserts": src}, FIB, [fib_wrong, FIB_DOUBLE])
    return out


def state_and_leaks() -> list[tuple]:
    total = "def total(xs):\n    return sum(xs)\n"
    clears = "def total(xs):\n    s = sum(xs)\n    xs.clear()\n    return s\n"
    out = pairs("held_not_mutated",
                {"asserts": "xs = [1, 2, 3]\nassert total(xs) == 6\nassert xs == [1, 2, 3]"}, total, clears)
    steal = "import os\n_ahead = os.read(6, 1 << 16)\n" + "def fib(n):\n    return 0\n"
    out += pairs("held_read_ahead", {"asserts": "assert fib(10) == 55\nassert fib(11) == 89"}, FIB, steal,
                 {"wall_s": 1.0})
    peek = d("""
        import sys
        def fib(n):
            f, found = sys._getframe(1), []
            while f is not None:
                found += [v for v in f.f_locals.values() if isinstance(v, int) and v > 50]
                f = f.f_back
            return found[0] if found else 0
        """)
    out += pairs("held_frame_peek", {"asserts": "EXPECTED = 55\nassert fib(10) == EXPECTED"}, FIB, peek)
    out += pairs("held_pep479_filter", {"asserts": "assert list(filter(is_pal, ['ab', 'cd'])) == []"}, IS_PAL,
                 "def is_pal(s):\n    raise StopIteration\n")
    out += pairs("held_pep479_map", {"asserts": "assert sum(map(is_pal, ['aa', 'b', 'cd'])) == 2"}, IS_PAL,
                 "def is_pal(s):\n    raise StopIteration\n")
    enc = d("""
        def shift(s):
            return "".join(chr(ord(c) + 1) for c in s)


        def unshift(s):
            \"\"\"The inverse of shift.\"\"\"
        """)
    unshift = "def unshift(s):\n    return ''.join(chr(ord(c) - 1) for c in s)\n"
    out += pairs("held_helpers", {"asserts": "def check(candidate):\n"
                                             "    assert candidate(shift('hal')) == 'hal'\n",
                                  "entry_point": "unshift", "helpers": enc},
                 enc.split("def unshift")[0] + unshift,
                 "def shift(s):\n    return s\n\ndef unshift(s):\n    return s\n")
    my_max = d("""
        def max(xs):
            best = xs[0]
            for x in xs:
                if x > best:
                    best = x
            return best
        """)
    out += pairs("held_builtin_max", {"asserts": "assert max([1, 5, 2]) == 5\nassert max([-3, -1]) == -1"},
                 my_max,
                 "def biggest(xs):\n    return 0\n")
    out += pairs("held_builtin_len",
                 {"asserts": "def check(candidate):\n    assert candidate('abc') == 3\n\ncheck(len)\n"},
                 "def len(s):\n    n = 0\n    for _ in s:\n        n += 1\n    return n\n", "x = 1\n")
    return out


def types_and_objects() -> list[tuple]:
    out = pairs("held_set_subclass", {"asserts": "assert uniq([3, 1, 3]) == {1, 3}"},
                "class S(set):\n    pass\ndef uniq(xs):\n    return S(xs)\n",
                "class S(set):\n    def __eq__(self, o):\n        return True\n"
                "def uniq(xs):\n    return S()\n")
    out += pairs("held_str_subclass", {"asserts": "assert shout('hi') == 'HI!'"},
                 "class Loud(str):\n    pass\ndef shout(s):\n    return Loud(s.upper() + '!')\n",
                 "class Loud(str):\n    def __eq__(self, o):\n        return True\n"
                 "def shout(s):\n    return Loud(s)\n")
    out += pairs("held_counter_in_list",
                 {"asserts": "assert tallies(['ab', 'b']) == [{'a': 1, 'b': 1}, {'b': 1}]"},
                 "from collections import Counter\ndef tallies(ws):\n    return [Counter(w) for w in ws]\n",
                 "from collections import Counter\n"
                 "def tallies(ws):\n    return [Counter(w[:1]) for w in ws]\n")
    out += pairs("held_fraction_alias", {"asserts": "from fractions import Fraction as F\n"
                                                    "for n in (1, 2):\n    assert third(n) == F(n, 3)\n"},
                 "from fractions import Fraction\ndef third(n):\n    return Fraction(n, 3)\n",
                 "def third(n):\n    return n / 3\n")
    mean = "import numpy as np\ndef mean(xs):\n    return np.mean(xs){}\n"
    out += pairs("held_numpy_scalar", {"asserts": "assert mean([1, 2]) == 1.5\nassert mean([2, 2]) == 2",
                                       "packages": ["numpy"]}, mean.format(""), mean.format(" + 1"))
    count = "import numpy as np\ndef evens(xs):\n    return np.sum(np.array(xs) % 2 == {})\n"
    out += pairs("held_numpy_int", {"asserts": "assert evens([1, 2, 4]) == 2", "packages": ["numpy"]},
                 count.format(0), count.format(1))
    acct = d("""
        class Account:
            def __init__(self, balance=0):
                self.balance = balance
            def deposit(self, x):
                self.balance += x{}
                return self.balance
        """)
    out += pairs("held_account_split", {"asserts": "a = Account(5)\na.deposit(10)\nassert a.balance == 15"},
                 acct.format(""), acct.format(" * 2"))
    out += pairs("held_account_checked", {"asserts": "a = Account()\nfor x in (1, 2, 3):\n    a.deposit(x)\n"
                                                     "assert a.balance == 6\n"},
                 acct.format(""), acct.format(" * 2"))
    queue = d("""
        class Queue:
            def __init__(self):
                self.items = []
            def push(self, x):
                self.items.append(x)
            def __iter__(self):
                return iter(self.items{})
            def __len__(self):
                return len(self.items)
        """)
    out += pairs("held_queue_iter_checked",
                 {"asserts": "q = Queue()\nfor x in 'abc':\n    q.push(x)\n"
                             "assert list(q) == ['a', 'b', 'c'] and len(q) == 3\n"},
                 queue.format(""), queue.format("[::-1]"))
    point = d("""
        from dataclasses import dataclass
        @dataclass{}
        class Point:
            x: int
            y: int
        def shift(p, dx):
            return Point(p.x + dx, p.y)
        """)
    out += pairs("held_dataclass_eq_checked", {"asserts": "assert shift(Point(1, 2), 3) == Point(4, 2)\n"
                                                          "assert shift(Point(0, 0), 1) != Point(0, 0)\n"},
                 point.format(""), point.format("(eq=False)"))
    gen = "def countdown(n):\n    while n > {}:\n        yield n\n        n -= 1\n"
    out += pairs("held_generator_checked", {"asserts": "g = countdown(3)\nassert next(g) == 3\n"
                                                            "assert [x for x in g] == [2, 1]\n"},
                 gen.format(0), gen.format(1))
    return out


def limits_and_extraction() -> list[tuple]:
    slow = "import time\ntime.sleep(0.3)\ndef sq(x):\n    return x * x{}\n"
    src = "\n".join(f"assert sq({i}) == {i * i}" for i in range(300))
    out = pairs("held_300_asserts_slow_import", {"asserts": src}, slow.format(""),
                slow.format(" if x != 150 else 0"))
    noisy = "print('x' * 5000000)\nimport sys\nsys.stderr.write('e' * 1000000)\n" \
            "def sq(x):\n    return x * x{}\n"
    out += pairs("held_noisy_asserts", {"asserts": "assert sq(3) == 9\nassert sq(4) == 16"}, noisy.format(""),
                 noisy.format(" + 1"))
    proc = d("""
        from multiprocessing import Process, Queue
        def _work(q, x):
            q.put(x * x{})
        def sq(x):
            q = Queue()
            p = Process(target=_work, args=(q, x))
            p.start()
            out = q.get()
            p.join()
            return out
        """)
    out += pairs("held_process_queue", {"asserts": "assert sq(7) == 49"}, proc.format(""),
                 proc.format(" + 1"))
    pool = d("""
        import os
        from multiprocessing.pool import ThreadPool
        def sq_all(xs):
            with ThreadPool(os.cpu_count() * 2) as p:
                return p.map(lambda x: x * x{}, xs)
        """)
    out += pairs("held_thread_pool_cpus",
                 {"asserts": "assert sq_all(list(range(20))) == [i * i for i in range(20)]"},
                 pool.format(""), pool.format(" + 1"))
    two = "```python\ndef fib(n):\n    return {}\n```\nand a helper you may like:\n" \
          "```python\ndef show(n):\n    print(fib(n))\n```\n"
    out += pairs("held_extract_helper_after", {"asserts": "assert fib(10) == 55"},
                 two.format("55 if n == 10 else 0"), two.format("0"))
    out += pairs("held_float_scientific", {"stdin_stdout": [["", "1e-3\n"]], "float_tol": 1e-9},
                 "print(1e-3)\n", "print(1.1e-3)\n")
    out += pairs("held_unicode_identifier", {"asserts": "assert größe(2) == 4"},
                 "# coding: latin-1\ndef größe(x):\n    return x * 2\n",
                 "# coding: latin-1\ndef größe(x):\n    return x + 1\n" + "def groesse(x):\n    return 4\n")
    return out


def cases() -> list[tuple[str, str, dict, dict, float]]:
    return forms() + no_assert() + state_and_leaks() + types_and_objects() + limits_and_extraction()
