"""Package structure: no import circle among tseeds_jax modules or subpackages, no module over
600 lines; rl/ in role folders (issue 44): at most 6 modules at its top, trainer.py at most 300
lines, no module over 500 lines, no import of another module's private name and no reach into
another object's private attributes (`__self__` included).

The import graph is read from the source with `ast` (nothing is imported): every `import` and
`from ... import` anywhere in a module, module level and inside functions alike, except under
`if TYPE_CHECKING:` (never executed). `from pkg import name` points at the submodule that
defines `name` when `pkg/__init__.py` only re-exports it, else at `pkg` itself; `from pkg import
sub` of a submodule points at `pkg.sub` and at `pkg`, whose __init__ it reads (inside the package,
import the submodule by its full name instead). kernels/ is the package tseeds_jax.kernels
(pyproject.toml).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = "tseeds_jax"
MAX_LINES = 600


def _module_files() -> dict[str, Path]:
    """module name -> file, for tseeds_jax/** and kernels/** (as tseeds_jax.kernels)."""
    out: dict[str, Path] = {}
    for base, prefix in ((ROOT / PKG, PKG), (ROOT / "kernels", f"{PKG}.kernels")):
        for path in sorted(base.rglob("*.py")):
            rel = path.relative_to(base)
            if rel.parts[0] == "kernels" and base.name == PKG:
                continue  # a checkout's tseeds_jax/kernels symlink: read through kernels/
            parts = list(rel.with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join([prefix, *parts])] = path
    return out


def _is_package(files: dict[str, Path], name: str) -> bool:
    return name in files and files[name].name == "__init__.py"


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    """ids of the import nodes under `if TYPE_CHECKING:` (or `typing.TYPE_CHECKING`)."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If):
            test = node.test
            name = test.id if isinstance(test, ast.Name) else getattr(test, "attr", "")
            if name == "TYPE_CHECKING":
                for sub in node.body:
                    skip.update(id(n) for n in ast.walk(sub))
    return skip


def _raw_imports(files: dict[str, Path], module: str) -> list[tuple[str, str | None]]:
    """(imported module, imported name or None) of every import statement in `module`."""
    tree = ast.parse(files[module].read_text(), str(files[module]))
    skip = _type_checking_nodes(tree)
    package = module if _is_package(files, module) else module.rpartition(".")[0]
    out: list[tuple[str, str | None]] = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            out += [(a.name, None) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                src = ".".join(base + ([node.module] if node.module else []))
            else:
                src = node.module or ""
            out += [(src, a.name) for a in node.names]
    return out


def _definer(files: dict[str, Path], package: str, name: str, seen=frozenset()) -> str:
    """The module that defines `name` exported by `package` (follows re-exports in __init__)."""
    if f"{package}.{name}" in files:
        return f"{package}.{name}"
    if not _is_package(files, package) or package in seen:
        return package
    for src, imported in _raw_imports(files, package):
        if imported == name and src.startswith(PKG) and src != package:
            if _is_package(files, src):
                return _definer(files, src, name, seen | {package})
            return src if src in files else package
    return package


def import_graph() -> dict[str, set[str]]:
    files = _module_files()
    graph: dict[str, set[str]] = {m: set() for m in files}
    for module in files:
        for src, name in _raw_imports(files, module):
            if not (src == PKG or src.startswith(PKG + ".")):
                continue
            targets = {src if name is None or name == "*" else _definer(files, src, name)}
            if name is not None and _is_package(files, src) and f"{src}.{name}" in files:
                targets.add(src)  # `from pkg import sub` reads pkg's namespace: runs its __init__
            for target in targets:
                while target not in files:  # `import tseeds_jax.a.b` of a name, not a module
                    target = target.rpartition(".")[0]
                if target != module:
                    graph[module].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def subpackage_of(module: str) -> str:
    return ".".join(module.split(".")[:2])


def subpackage_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for module, targets in graph.items():
        a = subpackage_of(module)
        out.setdefault(a, set())
        for t in targets:
            b = subpackage_of(t)
            if b != a and b != PKG:  # the top-level __init__ holds only __version__
                out[a].add(b)
    return out


def test_graph_reader_finds_known_edges():
    # The reader itself: a module-level edge, a function-level edge, and a re-export resolved to
    # its defining submodule (tseeds_jax.rl.losses re-exports `get` from registry).
    g = import_graph()
    assert "tseeds_jax.rl.losses.base" in g["tseeds_jax.rl.losses.stare"]
    assert "tseeds_jax.kernels.api" in g["tseeds_jax.kernels"]
    # `from tseeds_jax.rl.learn import grad_accum` (learner.py): the submodule and the package
    # it reads.
    assert {"tseeds_jax.rl.learn.grad_accum", "tseeds_jax.rl.learn"} <= \
        g["tseeds_jax.rl.learn.learner"]
    # a function-level import (data/sources.py loads reasoning_gym_tasks on first use)
    assert "tseeds_jax.data.reasoning_gym_tasks" in g["tseeds_jax.data.sources"]
    files = _module_files()
    assert _definer(files, "tseeds_jax.rl.losses", "get") == "tseeds_jax.rl.losses.registry"
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_among_modules():
    found = cycles(import_graph())
    assert not found, "import circles among tseeds_jax modules:\n" + "\n".join(
        " <-> ".join(c) for c in found)


def test_no_import_cycle_among_subpackages():
    found = cycles(subpackage_graph(import_graph()))
    assert not found, "import circles among tseeds_jax subpackages:\n" + "\n".join(
        " <-> ".join(c) for c in found)


def test_no_module_over_600_lines():
    long = {m: n for m, p in _module_files().items()
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}"


RL = ROOT / PKG / "rl"


def test_rl_is_in_role_folders_with_a_short_trainer():
    top = sorted(p.name for p in RL.glob("*.py"))
    assert len(top) <= 6, f"modules at the top of rl/: {top}"
    assert len((RL / "trainer.py").read_text().splitlines()) <= 300
    long = {str(p.relative_to(RL)): n for p in RL.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > 500}
    assert not long, f"modules in rl/ over 500 lines: {long}"


def _private_uses(path: Path):
    """(line, what) of imports of private names of tseeds_jax modules, and of attribute reads
    `x._name` / `x.__self__` on anything but self / cls, in one file."""
    tree = ast.parse(path.read_text(), str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(PKG):
            out += [(node.lineno, f"from {node.module} import {a.name}") for a in node.names
                    if a.name.startswith("_") and not a.name.startswith("__")]
        elif isinstance(node, ast.Attribute):
            private = node.attr.startswith("_") and not node.attr.startswith("__")
            if (private or node.attr == "__self__") and not (
                    isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
                out.append((node.lineno, ast.unparse(node)))
    return out


def test_private_uses_reader_finds_them(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("from tseeds_jax.rl.x import _y, z\nself._ok = t._bad\nc = collect.__self__\n")
    assert [w for _, w in _private_uses(f)] == ["from tseeds_jax.rl.x import _y", "t._bad",
                                                "collect.__self__"]


def test_rl_reaches_into_no_private_name():
    found = {f"{p.relative_to(ROOT)}:{line}": what for p in sorted(RL.rglob("*.py"))
             for line, what in _private_uses(p)}
    assert not found, f"private names used across modules or objects: {found}"


def test_one_default_sampler_slot_rule():
    """Runs, occupancy metrics, `tseeds plan` and `tseeds compile` size a call's decode slots by
    one rule (`decode_layout.default_slots`), so a planned layout is the one a run gets."""
    import re

    from tseeds_jax.decode_layout import MAX_DEFAULT_SLOTS, default_slots

    assert [default_slots(n) for n in (0, 1, 2, 3, 8, 9, 300)] == [1, 1, 2, 4, 8, 16, 256]
    assert MAX_DEFAULT_SLOTS == 256
    again = re.compile(r"min\(\s*(256|MAX_DEFAULT_SLOTS)\s*,")
    hits = [str(p.relative_to(ROOT)) for p in (ROOT / PKG).rglob("*.py")
            if p.name != "decode_layout.py" and again.search(p.read_text())]
    assert not hits, f"a second slot-default rule in {hits}"


def test_the_suites_heavy_file_list_names_test_files():
    """conftest.HEAVY_FILES orders the suite's scheduling; a renamed file would drop out silently."""
    from tests.conftest import HEAVY_FILES

    here = Path(__file__).resolve().parent
    assert len(set(HEAVY_FILES)) == len(HEAVY_FILES)
    assert [f for f in HEAVY_FILES if not (here / f).is_file()] == []
