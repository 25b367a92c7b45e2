"""Split an assert-style test source into the steps run in the sandbox and the expected values
kept outside (docs/sandbox.md, "Grading").

A source splits when every statement is one of (at the top level, in the body of HumanEval's
`def check(candidate)` where `check(NAME)` calls it (or the reference names the entry point), or
under `if __name__ == "__main__":`):

    assert VALUE == EXPECTED [, msg]      (either side; also !=, <, <=, >, >=, in, not in)
    assert abs(VALUE - EXPECTED) < TOL    (or <=, either order inside abs)
    assert math.isclose(VALUE, EXPECTED, rel_tol=.., abs_tol=..)   (math imported by the test)
    assert VALUE / assert not VALUE       (truthiness of a call of the program)
    assert VALUE is None / is True / is False (and `is not`)
    imports, and statements that compute no comparison (`x = f(1)`, `s.push(3)`, `a[0] = 5`)

EXPECTED and TOL are Python literals (`ast.literal_eval`), `set`/`frozenset`/`tuple`/`list`/
`float`/`complex` of one literal, or names bound to literals earlier in the source (their value at
that point). VALUE is the program's value as the test reads it: a call of the program (any
arguments), a name, an attribute or an index of one, or a builtin/imported function applied to
one (`sorted(f(x))`, `len(f(x))`, `round(f(x), 2)`). Nothing else may compare or combine inside:
`f(x) - e == 0`, `(f(x) == e) == True`, `f(x) == e and g(y) == d`, chained comparisons,
`all(...)`/`any(...)` over comprehensions, `isinstance`, `np.allclose`, relative tolerances, loops,
helper functions and computed expected values make the whole source *unsplittable*: it then runs
in the checker (`sandbox_checker`), never with its expected values beside the program.

Steps run in source order in one namespace (the program's), so state, mutation and rebinding are
Python's. A literal bound to a name is sent in at its place, except a name that some assert uses as
an expected value: that one is sent only just before the first statement that reads it inside, so
the program never holds it while an earlier assert is answered (and once sent in, it may no longer
be an expected value).
"""

from __future__ import annotations

import ast
import builtins
import dataclasses
import math
import sys
from typing import Any

from tseeds_jax.rewards.assert_order import Unsplittable, expected_names, flatten, is_docstring

__all__ = ["BUILTINS", "IMPLICIT_MODULES", "Check", "SplitSource", "Step", "Unsplittable", "literal", "split"]


@dataclasses.dataclass(frozen=True)
class Check:
    """How a returned value is judged, outside the sandbox: kind in eq | ne | lt | le | gt | ge |
    in (value in expected) | not_in | contains (expected in value) | not_contains | close
    (math.isclose with rel_tol, abs_tol) | abs_lt | abs_le (abs(value - expected) < or <= abs_tol) |
    truthy | falsy | is | is_not | method (expected = (name, args, kwargs, want): bool of the
    value's method is `want`); `expected` a plain value."""

    kind: str
    expected: Any = None
    rel_tol: float = 1e-9
    abs_tol: float = 0.0


@dataclasses.dataclass(frozen=True)
class Step:
    """One message to the harness: `exec` a statement, or `eval` an expression whose value is
    judged by `check` outside. `source`: the statement as written (reports)."""

    kind: str
    code: str
    check: Check | None = None
    source: str = ""


@dataclasses.dataclass(frozen=True)
class SplitSource:
    steps: tuple[Step, ...]
    entries: tuple[str, ...]  # names the program must define itself (not a builtin of that name)

    @property
    def asserts(self) -> int:
        return sum(s.kind == "eval" for s in self.steps)


BUILTINS = frozenset(dir(builtins))
# names a test may use as a module without importing it (see `_Split.module`; the checker resolves
# them the same way: its own import, unless the program bound the name to something not a module)
IMPLICIT_MODULES = {**{m: m for m in sys.stdlib_module_names if not m.startswith("_")}, "np": "numpy",
                    "numpy": "numpy"}
# pure constructors of plain values, applied (here, by our own builtins) to one literal argument:
# MBPP writes `set((4, 5))`, HumanEval `float('inf')`
_CONSTRUCTORS = {"set": set, "frozenset": frozenset, "tuple": tuple, "list": list, "float": float,
                 "complex": complex}
# nodes that compare, branch or build functions: never part of what runs beside the program
_BANNED = (ast.Compare, ast.BoolOp, ast.IfExp, ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp,
           ast.GeneratorExp, ast.NamedExpr, ast.Await, ast.Yield, ast.YieldFrom)
# methods of builtin types that change their object: run inside, where the test's state lives
_MUTATING = frozenset({"append", "extend", "insert", "remove", "pop", "clear", "sort", "reverse", "update",
                       "add", "discard", "setdefault", "popitem", "difference_update", "intersection_update",
                       "symmetric_difference_update", "__setitem__", "__delitem__", "__iadd__", "__imul__"})
# builtins that call what they are given (a function of the program raising StopIteration would end
# their loop early: PEP 479's rule needs the checker's proxies)
_CALLERS = frozenset({"map", "filter", "iter"})
# functions whose result is a comparison: never evaluated beside the program (`_no_leak`)
_COMPARERS = frozenset({"eq", "ne", "lt", "le", "gt", "ge", "is_", "is_not", "contains", "countOf", "indexOf",
                        "truth", "not_", "isclose", "allclose", "array_equal", "array_equiv", "equal",
                        "not_equal", "isin", "all", "any", "bool", "__eq__", "__ne__", "__contains__"})
_ORDER = {ast.Eq: "eq", ast.NotEq: "ne", ast.Lt: "lt", ast.LtE: "le", ast.Gt: "gt", ast.GtE: "ge",
          ast.In: "in", ast.NotIn: "not_in"}
_FLIP = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le", "eq": "eq", "ne": "ne", "in": "contains",
         "not_in": "not_contains"}


def literal(node: ast.AST, consts: dict) -> tuple[bool, Any]:
    """(True, value) when `node` is a literal, a constructor of one, or a name in `consts`."""
    if isinstance(node, ast.Name):
        return (True, consts[node.id]) if node.id in consts else (False, None)
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _CONSTRUCTORS
            and node.func.id not in consts and not node.keywords and len(node.args) <= 1):
        ok, arg = literal(node.args[0], consts) if node.args else (True, ())
        if not ok:
            return False, None
        try:
            return True, _CONSTRUCTORS[node.func.id](*([arg] if node.args else []))
        except (TypeError, ValueError, OverflowError):
            return False, None
    try:
        return True, ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False, None


def _number(v: Any, what: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        raise Unsplittable(f"{what} must be a finite non-negative number, got {v!r}")
    return float(v)


class _Split:
    """One pass over the statements, in order (see module docstring)."""

    def __init__(self, expected_names: set[str], helpers: frozenset[str]):
        self.expected_names = expected_names  # names some assert uses as its expected value
        self.helpers = helpers  # the prompt's helpers: the test's own copy, never the program's
        self.steps: list[Step] = []
        self.consts: dict[str, Any] = {}  # literal names, their value here
        self.unsent: dict[str, str] = {}  # literal names whose current value is not inside yet
        self.sent: set[str] = set()  # literal names whose value the program may have seen
        self.bound: set[str] = set()  # names the test binds inside (imports, computed values)
        self.modules: dict[str, str] = {}  # names of modules the test imported -> module
        self.program_calls: list[str] = []  # callee names outside the test's own

    # --- what may run inside ---
    def _wrapper(self, func: ast.AST) -> bool:
        """A builtin or a function of a module the test imported (not the program's code)."""
        root = func
        while isinstance(root, ast.Attribute):
            root = root.value
        if not isinstance(root, ast.Name):
            return False
        if root is func:
            return root.id in BUILTINS and root.id not in self.bound and root.id not in self.consts
        return self.module(root.id) is not None

    def module(self, name: str) -> str | None:
        """The module a name stands for in the test: one it imported, or a module of the standard
        library (or numpy as np) that it uses without importing it (MBPP's tests lean on the
        program's `import math`): a module, never a function of the program."""
        if name in self.modules:
            return self.modules[name]
        if name in self.bound or name in self.consts:
            return None
        return IMPLICIT_MODULES.get(name)

    def value(self, node: ast.AST, what: str) -> None:
        """Raise Unsplittable unless `node` is a program value as the module docstring defines it."""
        bad = next((n for n in ast.walk(node) if isinstance(n, _BANNED)), None)
        if bad is not None:
            raise Unsplittable(f"{what} compares or branches inside: {ast.unparse(node)[:120]}")
        self._top(node, what)

    def _top(self, node: ast.AST, what: str) -> None:
        if isinstance(node, (ast.Name, ast.Constant)):
            return None
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            for e in node.elts:
                self._top(e, what)
            return None
        if isinstance(node, ast.Dict):
            for e in [*node.keys, *node.values]:
                if e is None:
                    raise Unsplittable(f"{what}: ** in a dict display")
                self._top(e, what)
            return None
        if isinstance(node, (ast.Attribute, ast.Subscript)):
            return self._top(node.value, what)
        if isinstance(node, ast.Call):
            if not self._wrapper(node.func):
                if isinstance(node.func, ast.Name):
                    self.program_calls.append(node.func.id)
                return self._top(node.func, what)
            if isinstance(node.func, ast.Name):
                self.program_calls.append(node.func.id)  # `sum(...)`: the program's if it has one
            callers = not isinstance(node.func, ast.Name) or node.func.id in _CALLERS
            for a in node.args:
                if isinstance(a, ast.Starred):
                    raise Unsplittable(f"{what}: argument not understood: {ast.unparse(a)[:120]}")
                if not literal(a, {})[0]:
                    self._top(a, what)
                if callers and isinstance(a, (ast.Name, ast.Attribute)) and not self._builtin_name(a):
                    raise Unsplittable(f"{what}: {ast.unparse(a)[:60]} handed to "
                                       f"{ast.unparse(node.func)[:40]}, which may call it")
            for k in node.keywords:
                if not (literal(k.value, {})[0] or self._builtin_name(k.value)):
                    raise Unsplittable(f"{what}: keyword argument not understood: {ast.unparse(k)[:120]}")
            return None
        raise Unsplittable(f"{what} combines values inside: {ast.unparse(node)[:120]}")

    def _builtin_name(self, node: ast.AST) -> bool:
        return isinstance(node, ast.Name) and node.id in BUILTINS and node.id not in self.bound

    def _reads(self, node: ast.AST) -> None:
        """Names read inside: helpers refused, literal names sent in first when needed."""
        for n in ast.walk(node):
            # `total += f(1)` reads `total` too (its target is a Store): it must be sent first
            aug = isinstance(node, ast.AugAssign)
            if isinstance(n, ast.Name) and (isinstance(n.ctx, ast.Load) or aug):
                if n.id in self.helpers and n.id not in self.bound:
                    raise Unsplittable(f"uses the prompt's helper {n.id!r} (the test's own copy)")
                if n.id in self.unsent:
                    self.steps.append(Step("exec", self.unsent.pop(n.id), source=f"{n.id} = ..."))
                if n.id in self.consts:
                    self.sent.add(n.id)

    def expected(self, node: ast.AST) -> tuple[bool, Any]:
        """A literal, or a literal name not sent in yet (once inside, the program may have changed
        it: Python would compare with the changed object, so such an assert is not split)."""
        if isinstance(node, ast.Name) and node.id in self.sent:
            return False, None
        return literal(node, self.consts)

    # --- statements ---
    def statement(self, stmt: ast.stmt) -> None:
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            for a in stmt.names:
                name = (a.asname or a.name).split(".")[0]
                self.bound.add(name)
                self._forget(name)
                self.modules[name] = a.name if isinstance(stmt, ast.Import) else f"{stmt.module}.{a.name}"
            self.steps.append(Step("exec", ast.unparse(stmt), source=ast.unparse(stmt)))
        elif isinstance(stmt, ast.Pass) or is_docstring(stmt):
            pass
        elif isinstance(stmt, ast.Assert):
            self.assertion(stmt)
        elif (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
              and isinstance(stmt.targets[0], ast.Name) and literal(stmt.value, {})[0]):
            name = stmt.targets[0].id
            self._forget(name)
            self.consts[name] = literal(stmt.value, {})[1]
            if name in self.expected_names:
                self.unsent[name] = ast.unparse(stmt)  # sent just before something reads it
            else:
                self.steps.append(Step("exec", ast.unparse(stmt), source=ast.unparse(stmt)))
                self.sent.add(name)
        elif isinstance(stmt, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Expr, ast.Delete)):
            self.setup(stmt)
        else:
            raise Unsplittable(f"statement not understood: {ast.unparse(stmt)[:120]}")

    def _forget(self, name: str) -> None:
        self.consts.pop(name, None)
        self.unsent.pop(name, None)
        self.sent.discard(name)

    def setup(self, stmt: ast.stmt) -> None:
        targets = (stmt.targets if isinstance(stmt, ast.Assign) else [] if isinstance(stmt, ast.Expr)
                   else stmt.targets if isinstance(stmt, ast.Delete) else [stmt.target])
        value = getattr(stmt, "value", None)
        if value is not None:
            self.value(value, "a statement")
        for t in targets:
            self.value(t, "an assignment target") if not isinstance(t, (ast.Tuple, ast.List)) else [
                self.value(e, "an assignment target") for e in t.elts]
        self._reads(stmt)
        for n in ast.walk(stmt):
            if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)):
                self._forget(n.id)
                self.bound.add(n.id)
        self.steps.append(Step("exec", ast.unparse(stmt), source=ast.unparse(stmt)))

    def assertion(self, stmt: ast.Assert) -> None:
        test = stmt.test
        const, v = literal(test, self.consts)
        if const:
            if v:
                return  # HumanEval's `assert True, "..."`: a no-op
            raise Unsplittable("a constant false assert")
        value, check = self._form(test)
        self._no_leak(value, check)
        self._reads(value)
        self.steps.append(Step("eval", ast.unparse(value), check, ast.unparse(stmt)))

    def _no_leak(self, value: ast.AST, check: Check) -> None:
        """Refuse (to the checker) a value side that would carry the answer inside: a comparison
        function (`operator.eq(f(x), 55) is True`, `math.isclose(...) == True`), a literal that
        equals the expected value (`max(f(x), 55) == 55`: a frame of the program can read it), or
        a builtin or module function whose truth or None is the whole answer (`all(f(x)) is True`:
        a replaced `builtins.all` needs no answer to return True)."""
        for n in ast.walk(value):
            if not (isinstance(n, ast.Call) and self._wrapper(n.func)):
                continue  # a program's call may hold its own input, whatever it equals
            name = n.func.attr if isinstance(n.func, ast.Attribute) else getattr(n.func, "id", "")
            if name in _COMPARERS:
                raise Unsplittable(f"the value side compares inside: {ast.unparse(value)[:120]}")
            for a in [*n.args, *(k.value for k in n.keywords)]:
                ok, lit = literal(a, {})
                if ok and _same(lit, check.expected) and not isinstance(lit, bool) and lit is not None:
                    raise Unsplittable(f"the expected value is an argument: {ast.unparse(value)[:120]}")
        guessable = check.kind in ("truthy", "falsy", "is", "is_not") or (
            check.kind in ("eq", "ne") and (check.expected is None or isinstance(check.expected, bool)))
        if guessable and isinstance(value, ast.Call) and self._wrapper(value.func):
            raise Unsplittable(f"a truth value computed by a builtin inside: {ast.unparse(value)[:120]}")

    def _form(self, test: ast.AST) -> tuple[ast.AST, Check]:
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            return self._truth(test.operand, False)
        if isinstance(test, ast.Compare) and len(test.ops) == 1:
            return self._compare(test.ops[0], test.left, test.comparators[0], test)
        if isinstance(test, ast.Call) and self._is_isclose(test.func) and len(test.args) == 2:
            value, want = self._pair(test.args[0], test.args[1])
            tols = {"rel_tol": 1e-9, "abs_tol": 0.0}
            for kw in test.keywords:
                ok, v = self.expected(kw.value)
                if kw.arg not in tols or not ok:
                    raise Unsplittable(f"isclose argument not understood: {ast.unparse(kw)}")
                tols[kw.arg] = _number(v, kw.arg)
            return value, Check("close", want, **tols)
        return self._truth(test, True)

    def _truth(self, node: ast.AST, want: bool) -> tuple[ast.AST, Check]:
        """`assert VALUE.method(literals)`: the value comes back and its own (plain) method runs
        outside, so `fib(10).__eq__(55)` never hands 55 to the program's object; a value that is
        not plain (`s.is_empty()` on the program's Stack) has the method called inside only then
        (`grading.StepDialog`). A method that mutates runs inside, where its effect belongs."""
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and not self._wrapper(node.func) and node.func.attr not in _MUTATING
                and not any(isinstance(a, ast.Starred) for a in node.args)
                and all(k.arg for k in node.keywords)):
            got = [self.expected(a) for a in [*node.args, *(k.value for k in node.keywords)]]
            if all(ok for ok, _ in got):
                values = [v for _, v in got]
                args, kwargs = tuple(values[:len(node.args)]), dict(zip([k.arg for k in node.keywords],
                                                                          values[len(node.args):]))
                self.value(node.func.value, "a truth-value assert")
                return node.func.value, Check("method", (node.func.attr, args, kwargs, want))
        self._truthy(node)
        return node, Check("truthy" if want else "falsy")

    def _truthy(self, node: ast.AST) -> None:
        """`assert VALUE`: a call of the program (or a name/attribute/index), never a builtin or a
        module's function (all(...), isinstance(...), np.allclose(...) compare inside)."""
        self.value(node, "a truth-value assert")
        if isinstance(node, (ast.List, ast.Tuple, ast.Set, ast.Dict)) or (
                isinstance(node, ast.Call) and self._wrapper(node.func)):
            raise Unsplittable(f"a truth-value assert of a builtin: {ast.unparse(node)[:120]}")

    def _is_isclose(self, func: ast.AST) -> bool:
        if isinstance(func, ast.Name):
            return self.modules.get(func.id) == "math.isclose"
        return (isinstance(func, ast.Attribute) and func.attr == "isclose"
                and isinstance(func.value, ast.Name) and self.module(func.value.id) == "math")

    def _pair(self, a: ast.AST, b: ast.AST) -> tuple[ast.AST, Any]:
        """(value side, expected value) of two operands, one of which must be a literal."""
        ok, want = self.expected(b)
        if ok:
            self.value(a, "the value side")
            return a, want
        ok, want = self.expected(a)
        if ok:
            self.value(b, "the value side")
            return b, want
        raise Unsplittable(f"neither side is an expected value: {ast.unparse(a)[:60]} / "
                           f"{ast.unparse(b)[:60]}")

    def _compare(self, op: ast.cmpop, left: ast.AST, right: ast.AST, test: ast.AST) -> tuple[ast.AST, Check]:
        if isinstance(op, (ast.Is, ast.IsNot)):
            if isinstance(right, ast.Constant) and (right.value is None or isinstance(right.value, bool)):
                self.value(left, "the value side")
                return left, Check("is" if isinstance(op, ast.Is) else "is_not", right.value)
            raise Unsplittable(f"comparison not understood: {ast.unparse(test)[:120]}")
        if (isinstance(op, (ast.Lt, ast.LtE)) and isinstance(left, ast.Call)
                and isinstance(left.func, ast.Name) and left.func.id == "abs" and "abs" not in self.bound
                and len(left.args) == 1 and not left.keywords and isinstance(left.args[0], ast.BinOp)
                and isinstance(left.args[0].op, ast.Sub)):
            ok, tol = self.expected(right)
            if not ok:
                raise Unsplittable(f"tolerance is not a literal: {ast.unparse(right)[:60]}")
            value, want = self._pair(left.args[0].left, left.args[0].right)
            kind = "abs_lt" if isinstance(op, ast.Lt) else "abs_le"
            return value, Check(kind, want, abs_tol=_number(tol, "tolerance"))
        kind = _ORDER.get(type(op))
        if kind is None:
            raise Unsplittable(f"comparison not understood: {ast.unparse(test)[:120]}")
        ok, want = self.expected(right)
        if ok:
            self.value(left, "the value side")
            return left, Check(kind, want)
        ok, want = self.expected(left)
        if ok:
            self.value(right, "the value side")
            return right, Check(_FLIP[kind], want)
        raise Unsplittable(f"neither side is an expected value: {ast.unparse(test)[:120]}")


def _same(a: Any, b: Any) -> bool:
    """Is literal `a` the expected value `b` (numbers of any type)?"""
    number = (int, float, complex)
    try:
        return bool((type(a) is type(b) or isinstance(a, number) and isinstance(b, number)) and a == b)
    except Exception:  # noqa: BLE001 - incomparable literals are not the same
        return False


def split(source: str, entry_point: str | None = None, helpers: frozenset[str] = frozenset()) -> SplitSource:
    """The steps of an assert-style test source; Unsplittable otherwise. `entry_point`: the name
    under test when the reference gives it; `helpers`: names the prompt defines for the test."""
    try:
        tree = ast.parse(source)
    except SyntaxError as e:
        raise Unsplittable(f"test source does not parse: {e}") from e
    stmts, checked = flatten(tree, entry_point)
    sp = _Split(expected_names(stmts), helpers)
    for s in stmts:
        sp.statement(s)
    if not any(s.kind == "eval" for s in sp.steps):
        raise Unsplittable("no asserts")  # the checker runs it: it fails for want of an assert
    entries = list(dict.fromkeys([*checked, *([entry_point] if entry_point else [])]))
    loaded = {n.id for s in stmts for n in ast.walk(s)
              if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    if not entries and loaded - sp.bound - set(sp.consts) <= BUILTINS:
        # a test that reads no name of the program's but builtins (`assert sum([1, 2]) == 3`) tests
        # the program's `sum`
        entries = [c for c in dict.fromkeys(sp.program_calls) if c not in sp.bound]
    return SplitSource(tuple(sp.steps), tuple(entries))
