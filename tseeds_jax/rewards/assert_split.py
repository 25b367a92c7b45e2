"""Split assert-style tests into calls (run in the sandbox) and expected values (kept outside).

Understood forms, at the top level of a test source or in the body of HumanEval's
`def check(candidate): ...` (with `candidate` bound to the name of the top-level `check(NAME)`):

    assert CALL == EXPECTED [, msg]        (either side; also !=)
    assert abs(CALL - EXPECTED) < TOL      (or <=, either order inside abs)
    assert math.isclose(CALL, EXPECTED, rel_tol=.., abs_tol=..)   (or isclose(...))
    assert CALL / assert not CALL          (truthiness)
    assert CALL is None / is True / is False (and `is not`)

EXPECTED and TOL are Python literals (`ast.literal_eval`), `set`/`frozenset`/`tuple`/`list`/
`float`/`complex` of one literal (`set((4, 5))`, `float('inf')`), or names bound to literals at the
top level. Besides asserts, a splittable source holds only imports and literal assignments (sent into
the sandbox as `setup` when a call uses them), docstrings, `assert True` (a no-op) and the
`check(NAME)` line. Anything else
(loops, helper functions, computed expected values) makes the whole source *unsplittable*: it is
then run by the checker of `sandbox_harness` (docs/sandbox.md says which guarantee each gets).
"""

from __future__ import annotations

import ast
import dataclasses
import math
from typing import Any


class Unsplittable(ValueError):
    """The test source is not made only of understood asserts; the message says what is not."""


@dataclasses.dataclass(frozen=True)
class Check:
    """How a returned value is judged, outside the sandbox: kind in eq | ne | close (math.isclose
    with rel_tol, abs_tol) | abs_lt | abs_le (abs(value - expected) < or <= abs_tol) | truthy |
    falsy | is | is_not; `expected` a plain value."""

    kind: str
    expected: Any = None
    rel_tol: float = 1e-9
    abs_tol: float = 0.0


@dataclasses.dataclass(frozen=True)
class SplitTest:
    call: str  # a Python expression evaluated in the program's namespace
    check: Check
    source: str  # the assert as written (reports)


# pure constructors of plain values, applied (here, by our own builtins) to one literal argument:
# MBPP writes `set((4, 5))`, HumanEval `float('inf')`
_CONSTRUCTORS = {"set": set, "frozenset": frozenset, "tuple": tuple, "list": list, "float": float,
                 "complex": complex}


def _literal(node: ast.AST, consts: dict) -> tuple[bool, Any]:
    if isinstance(node, ast.Name) and node.id in consts:
        return True, consts[node.id]
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _CONSTRUCTORS
            and node.func.id not in consts and not node.keywords and len(node.args) <= 1):
        ok, arg = _literal(node.args[0], consts) if node.args else (True, ())
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


def _is_isclose(func: ast.AST) -> bool:
    return (isinstance(func, ast.Name) and func.id == "isclose") or (
        isinstance(func, ast.Attribute) and func.attr == "isclose"
        and isinstance(func.value, ast.Name) and func.value.id == "math")


def _pair(a: ast.AST, b: ast.AST, consts: dict) -> tuple[ast.AST, Any]:
    """(call side, expected value) of two operands, one of which must be a literal."""
    lit_b, vb = _literal(b, consts)
    if lit_b:
        return a, vb
    lit_a, va = _literal(a, consts)
    if lit_a:
        return b, va
    raise Unsplittable(f"neither side is a literal: {ast.unparse(a)} / {ast.unparse(b)}")


def _number(v: Any, what: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        raise Unsplittable(f"{what} must be a finite non-negative number, got {v!r}")
    return float(v)


def _one(test: ast.AST, consts: dict) -> tuple[ast.AST, Check]:
    """(call expression, check) of one assert's test expression."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        if _literal(test.operand, consts)[0]:
            raise Unsplittable("a constant assert")
        return test.operand, Check("falsy")
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        op, left, right = test.ops[0], test.left, test.comparators[0]
        if isinstance(op, (ast.Eq, ast.NotEq)):
            call, expected = _pair(left, right, consts)
            return call, Check("eq" if isinstance(op, ast.Eq) else "ne", expected)
        if isinstance(op, (ast.Is, ast.IsNot)) and isinstance(right, ast.Constant) and (
                right.value is None or isinstance(right.value, bool)):
            return left, Check("is" if isinstance(op, ast.Is) else "is_not", right.value)
        if (isinstance(op, (ast.Lt, ast.LtE)) and isinstance(left, ast.Call)
                and isinstance(left.func, ast.Name) and left.func.id == "abs" and len(left.args) == 1
                and not left.keywords and isinstance(left.args[0], ast.BinOp)
                and isinstance(left.args[0].op, ast.Sub)):
            ok, tol = _literal(right, consts)
            if not ok:
                raise Unsplittable(f"tolerance is not a literal: {ast.unparse(right)}")
            call, expected = _pair(left.args[0].left, left.args[0].right, consts)
            kind = "abs_lt" if isinstance(op, ast.Lt) else "abs_le"
            return call, Check(kind, expected, abs_tol=_number(tol, "tolerance"))
        raise Unsplittable(f"comparison not understood: {ast.unparse(test)}")
    if isinstance(test, ast.Call) and _is_isclose(test.func) and len(test.args) == 2:
        call, expected = _pair(test.args[0], test.args[1], consts)
        tols = {"rel_tol": 1e-9, "abs_tol": 0.0}
        for kw in test.keywords:
            ok, v = _literal(kw.value, consts)
            if kw.arg not in tols or not ok:
                raise Unsplittable(f"isclose argument not understood: {ast.unparse(kw)}")
            tols[kw.arg] = _number(v, kw.arg)
        return call, Check("close", expected, **tols)
    if _literal(test, consts)[0]:
        raise Unsplittable("a constant assert")
    return test, Check("truthy")


class _Rename(ast.NodeTransformer):
    def __init__(self, old: str, new: str):
        self.old, self.new = old, new

    def visit_Name(self, node: ast.Name) -> ast.AST:
        return ast.copy_location(ast.Name(self.new, node.ctx), node) if node.id == self.old else node


def _is_docstring(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(
        stmt.value.value, str)


def split(source: str) -> tuple[str, list[SplitTest]]:
    """(setup source, tests) of an assert-style test source; Unsplittable otherwise."""
    try:
        tree = ast.parse(source)
    except SyntaxError as e:
        raise Unsplittable(f"test source does not parse: {e}") from e
    setup: list[ast.stmt] = []
    consts: dict[str, Any] = {}
    asserts: list[ast.Assert] = []
    check_fn: ast.FunctionDef | None = None
    entry: str | None = None
    for stmt in tree.body:
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            setup.append(stmt)
        elif (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
              and isinstance(stmt.targets[0], ast.Name) and _literal(stmt.value, {})[0]):
            consts[stmt.targets[0].id] = _literal(stmt.value, {})[1]
            setup.append(stmt)
        elif isinstance(stmt, ast.Assert):
            asserts.append(stmt)
        elif isinstance(stmt, ast.FunctionDef) and stmt.name == "check" and check_fn is None:
            check_fn = stmt
        elif (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)
              and isinstance(stmt.value.func, ast.Name) and stmt.value.func.id == "check"
              and len(stmt.value.args) == 1 and isinstance(stmt.value.args[0], ast.Name) and entry is None):
            entry = stmt.value.args[0].id
        elif not _is_docstring(stmt):
            raise Unsplittable(f"statement not understood: {ast.unparse(stmt)[:120]}")
    if check_fn is not None:
        a = check_fn.args
        if entry is None or len(a.args) != 1 or a.vararg or a.kwarg or a.kwonlyargs or a.defaults:
            raise Unsplittable("def check(candidate) without a single `check(NAME)` call")
        param = a.args[0].arg
        for stmt in check_fn.body:
            if isinstance(stmt, ast.Assert):
                asserts.append(_Rename(param, entry).visit(stmt))
            elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
                setup.append(stmt)
            elif not _is_docstring(stmt):
                raise Unsplittable(f"statement in check() not understood: {ast.unparse(stmt)[:120]}")
    elif entry is not None:
        raise Unsplittable("check(NAME) without def check(candidate)")
    if not asserts:
        raise Unsplittable("no asserts")
    tests = []
    used: set[str] = set()
    for a in asserts:
        const, value = _literal(a.test, consts)
        if const and value:
            continue  # HumanEval's `assert True, "..."`: a no-op
        call, chk = _one(a.test, consts)
        used |= {n.id for n in ast.walk(call) if isinstance(n, ast.Name)}
        tests.append(SplitTest(ast.unparse(call), chk, ast.unparse(a)))
    if not tests:
        raise Unsplittable("only constant asserts")  # the checker runs it: the program must import
    # literal assignments go in only when a call reads them (an expected value bound to a name
    # that no call uses stays outside)
    kept = [s for s in setup if not isinstance(s, ast.Assign) or s.targets[0].id in used]
    return "\n".join(ast.unparse(s) for s in kept), tests
