"""What the checker runs for an unsplittable test source, prepared in the worker (`sandbox_checker`
runs it in the sandbox; it never enters the program's process).

- The prompt's helpers first (`reference["helpers"]`: HumanEval's prompt, whose `encode_cyclic`
  or `poly` the test calls to compute its expected values): the test gets its own copy of their
  imports, functions and classes (the entry point and stubs excepted), so a program that redefines
  a helper changes only its own.
- Every `assert` statement followed by a count (`__tseeds_asserted__()`): a test that executed no
  assert is no pass.
- Tests that would never run called at the end: `def check(candidate)` with the entry point when
  nothing calls it, pytest-style `test_*` functions and `Test*` classes' `test_*` methods that
  nothing calls, unittest TestCases (`__tseeds_unittest__()`, which `unittest.main()` also runs).

`entries` are the names the program must define itself: the entry point, `check(NAME)`'s NAME,
and, in a test whose asserts call only builtins, those builtins (a test of `sum` tests the
program's `sum`).
"""

from __future__ import annotations

import ast
import copy

from tseeds_jax.rewards.assert_split import BUILTINS, IMPLICIT_MODULES


class _CountAsserts(ast.NodeTransformer):
    def visit_Assert(self, node: ast.Assert):
        count = ast.Expr(ast.Call(ast.Name("__tseeds_asserted__", ast.Load()), [], []))
        return [node, ast.copy_location(count, node)]


def bound_names(tree: ast.AST) -> set[str]:
    """Every name the source binds itself (assignments, imports, defs, parameters, loop targets)."""
    out: set[str] = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)):
            out.add(n.id)
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(n.name)
        elif isinstance(n, ast.arg):
            out.add(n.arg)
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            out |= {(a.asname or a.name).split(".")[0] for a in n.names}
        elif isinstance(n, ast.ExceptHandler) and n.name:
            out.add(n.name)
    return out


def _stub(fn: ast.AST) -> bool:
    body = [s for s in fn.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    return all(isinstance(s, ast.Pass) for s in body)


def helper_statements(helpers: str, entry_point: str | None) -> list[ast.stmt]:
    """The imports, functions, classes and constants of the prompt, but the entry point and stubs."""
    try:
        tree = ast.parse(helpers)
    except SyntaxError:
        return []
    out = []
    for s in tree.body:
        if isinstance(s, (ast.Import, ast.ImportFrom)):
            out.append(s)
        elif isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if s.name != entry_point and not _stub(s):
                out.append(s)
        elif isinstance(s, ast.Assign) and not any(
                isinstance(t, ast.Name) and t.id == entry_point for t in s.targets):
            out.append(s)
    return out


def with_prelude(program: str, helpers: str | None, entry_point: str | None) -> str:
    """The program as HumanEval's harness runs it: the prompt's imports and helpers (the entry
    point and stubs excepted: the program must define those itself) first, then the program, its
    `from __future__` imports moved to the top (they must come first). A program that does not
    parse is left as it is (its own SyntaxError is the verdict)."""
    prelude = helper_statements(helpers, entry_point) if helpers else []
    if not prelude:
        return program
    try:
        tree = ast.parse(program.removeprefix("\ufeff"))
    except (SyntaxError, ValueError):
        return program
    lines = program.removeprefix("\ufeff").splitlines(keepends=True)
    future = [s for s in tree.body if isinstance(s, ast.ImportFrom) and s.module == "__future__"]
    head = "".join("".join(lines[s.lineno - 1:s.end_lineno]) for s in future)
    for s in reversed(future):  # blanked, not removed: the program's other lines stay where they were
        for i in range(s.lineno - 1, s.end_lineno):
            lines[i] = "\n"
    text = ast.unparse(ast.Module([copy.deepcopy(s) for s in prelude], []))
    return head + text + "\n" + "".join(lines)


def helper_names(helpers: str | None, entry_point: str | None) -> frozenset[str]:
    if not helpers:
        return frozenset()
    return frozenset(bound_names(ast.Module(helper_statements(helpers, entry_point), [])))


def _called(tree: ast.AST, outside: ast.AST | None = None) -> set[str]:
    """Names called anywhere in `tree` except inside `outside` (a function's own body)."""
    skip = {id(n) for n in ast.walk(outside)} if outside is not None else set()
    return {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
            and id(n) not in skip}


def _uses_unittest(tree: ast.Module) -> bool:
    for n in ast.walk(tree):
        if isinstance(n, (ast.Import, ast.ImportFrom)) and any("unittest" in (a.name or "") for a in n.names):
            return True
        if isinstance(n, ast.ImportFrom) and (n.module or "").startswith("unittest"):
            return True
        if isinstance(n, ast.ClassDef) and any(ast.unparse(b).endswith("TestCase") for b in n.bases):
            return True
    return False


def _trailer(tree: ast.Module, entry_point: str | None) -> list[str]:
    calls = []
    for s in tree.body:
        if isinstance(s, ast.FunctionDef) and s.name == "check" and entry_point:
            if "check" not in _called(tree, s):
                calls.append(f"check({entry_point})")
        elif isinstance(s, ast.FunctionDef) and s.name.startswith("test"):
            required = len(s.args.posonlyargs) + len(s.args.args) - len(s.args.defaults)
            if required == 0 and s.name not in _called(tree, s):
                calls.append(f"{s.name}()")
        elif (isinstance(s, ast.ClassDef) and s.name.startswith("Test")
              and not any(ast.unparse(b).endswith("TestCase") for b in s.bases)):
            calls += [f"{s.name}().{m.name}()" for m in s.body
                      if isinstance(m, ast.FunctionDef) and m.name.startswith("test")]
    if _uses_unittest(tree):
        calls.append("__tseeds_unittest__()")
    return calls


def entries(tree: ast.Module, entry_point: str | None) -> tuple[str, ...]:
    names = [entry_point] if entry_point else []
    names += [n.args[0].id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
              and n.func.id == "check" and len(n.args) == 1 and isinstance(n.args[0], ast.Name)]
    imports_solution = any(isinstance(n, ast.ImportFrom) and n.module == "solution"
                           or isinstance(n, ast.Import) and any(a.name == "solution" for a in n.names)
                           for n in ast.walk(tree))
    if not names and not imports_solution:  # (the program's names come through `solution` there)
        # a test that reads no name of the program's but builtins tests the program's builtins
        loaded = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        if loaded - bound_names(tree) <= BUILTINS:
            # every call, not only those inside asserts: `r = sorted(xs)` then `assert r == ...`
            names = sorted(_called(tree) - bound_names(tree))
    return tuple(dict.fromkeys(names))


def prepare(source: str, entry_point: str | None = None,
            helpers: str | None = None) -> tuple[str, tuple[str, ...]]:
    """(the checker's source, entries). A source that does not parse is sent as it is: the
    checker's compile reports it, and the test fails."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return source, ((entry_point,) if entry_point else ())
    names = entries(tree, entry_point)
    trailer = _trailer(tree, entry_point)
    tree.body = [copy.deepcopy(s) for s in helper_statements(helpers, entry_point)] + tree.body if helpers \
        else tree.body
    tree = ast.fix_missing_locations(_CountAsserts().visit(tree))
    return ast.unparse(tree) + "\n" + "\n".join(trailer) + "\n", names


def program_names(source: str, entry_point: str | None = None) -> set[str]:
    """Names a test source reads but does not bind (the program's, builtins excepted): what the
    program's code block must define (`extract.code_block`)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return {entry_point} if entry_point else set()
    loaded = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    # a module name the test uses unimported is the module, not the program's (`math`, `np`)
    out = loaded - bound_names(tree) - BUILTINS - set(IMPLICIT_MODULES)
    out |= set(entries(tree, entry_point))
    # what a pytest-style test imports from the program (KodCode: `from solution import f`)
    out |= {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module == "solution"
            for a in n.names if a.name != "*"}
    return out
