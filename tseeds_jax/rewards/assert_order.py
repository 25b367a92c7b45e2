"""The statements of an assert-style test source in the order they run (for `assert_split`): an
`if __name__ == "__main__":` block inlined, HumanEval's `def check(candidate)` inlined where
`check(NAME)` calls it (the candidate renamed to NAME), or at the end with the reference's entry
point when nothing calls it; and the names some assert may use as an expected value.
"""

from __future__ import annotations

import ast
import copy


class Unsplittable(ValueError):
    """The test source is not made only of understood statements; the message says what is not."""



def is_docstring(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(
        stmt.value.value, str)


class _Rename(ast.NodeTransformer):
    def __init__(self, old: str, new: str):
        self.old, self.new = old, new

    def visit_Name(self, node: ast.Name) -> ast.AST:
        return ast.copy_location(ast.Name(self.new, node.ctx), node) if node.id == self.old else node


def _is_main_guard(stmt: ast.stmt) -> bool:
    if not isinstance(stmt, ast.If) or stmt.orelse or not isinstance(stmt.test, ast.Compare):
        return False
    t = stmt.test
    sides = [t.left, *t.comparators]
    return (len(t.ops) == 1 and isinstance(t.ops[0], ast.Eq)
            and any(isinstance(s, ast.Name) and s.id == "__name__" for s in sides)
            and any(isinstance(s, ast.Constant) and s.value == "__main__" for s in sides))


def _check_call(stmt: ast.stmt) -> str | None:
    """NAME of a `check(NAME)` statement."""
    if (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)
            and isinstance(stmt.value.func, ast.Name) and stmt.value.func.id == "check"
            and len(stmt.value.args) == 1 and not stmt.value.keywords
            and isinstance(stmt.value.args[0], ast.Name)):
        return stmt.value.args[0].id
    return None


def flatten(tree: ast.Module, entry_point: str | None = None) -> tuple[list[ast.stmt], list[str]]:
    """The statements in the order they run (main guards and `check(NAME)` calls inlined; an
    uncalled `def check(candidate)` called with `entry_point` at the end) and the check targets."""
    check_fn = next((s for s in tree.body if isinstance(s, ast.FunctionDef) and s.name == "check"), None)
    out: list[ast.stmt] = []
    entries: list[str] = []

    def inline(name: str) -> None:
        a = check_fn.args
        if len(a.args) != 1 or a.vararg or a.kwarg or a.kwonlyargs or a.defaults or a.posonlyargs:
            raise Unsplittable("def check() must take exactly one argument (the candidate)")
        entries.append(name)
        out.extend(_Rename(a.args[0].arg, name).visit(copy.deepcopy(s)) for s in check_fn.body)

    def walk(stmts: list[ast.stmt]) -> None:
        for s in stmts:
            if s is check_fn:
                continue
            if _is_main_guard(s):
                walk(s.body)
            elif _check_call(s) is not None and check_fn is not None:
                inline(_check_call(s))
            else:
                out.append(s)

    walk(tree.body)
    if check_fn is not None and not entries:
        if not entry_point:
            raise Unsplittable("def check(candidate) is never called and the reference names no entry point")
        inline(entry_point)
    return out, entries


def expected_names(stmts: list[ast.stmt]) -> set[str]:
    """Names that an assert may use as an expected value or tolerance: bare names compared, or
    given to isclose/abs (a superset: a name on the value side only loses its early binding)."""
    out: set[str] = set()
    for s in stmts:
        if not isinstance(s, ast.Assert):
            continue
        for n in ast.walk(s.test):
            operands = ([n.left, *n.comparators] if isinstance(n, ast.Compare)
                        else [*n.args, *(k.value for k in n.keywords)] if isinstance(n, ast.Call)
                        else [n.left, n.right] if isinstance(n, ast.BinOp) else [])
            out |= {o.id for o in operands if isinstance(o, ast.Name)}
    return out


