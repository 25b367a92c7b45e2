"""No module outside rl/losses/ branches on a loss's name: the learner, the config side and the
trainer's plug-ins ask the loss's registry entry (`losses.get(name).needs`) instead.

Read from the source with `ast`: every `==`, `!=`, `in`, `not in` and `match` case with a
registered loss name as a literal (alone or in a tuple, list or set) is a branch on the name.
Method presets (`family_configs.METHODS`, the demo's methods) share some spellings with losses but
are another namespace: a comparison whose other side names a `method` is not one.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tseeds_jax.rl import losses

# The checkout whose package is imported (PYTHONPATH), not necessarily this test file's.
ROOT = Path(losses.__file__).resolve().parents[3]
OPS = (ast.Eq, ast.NotEq, ast.In, ast.NotIn)


def _names_in(node: ast.AST, names: set[str]) -> set[str]:
    if isinstance(node, ast.Constant) and node.value in names:
        return {node.value}
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return {e.value for e in node.elts if isinstance(e, ast.Constant) and e.value in names}
    return set()


def _about_method(node: ast.AST) -> bool:
    return "method" in ast.unparse(node).lower()


def loss_name_branches(source: str, names: set[str]) -> list[tuple[int, str]]:
    """(line, code) of each comparison of a value with a loss-name literal in `source`."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare) and any(isinstance(op, OPS) for op in node.ops):
            sides = [node.left, *node.comparators]
            for i, side in enumerate(sides):
                others = sides[:i] + sides[i + 1 :]
                if _names_in(side, names) and not any(_about_method(o) for o in others):
                    out.append((node.lineno, ast.unparse(node)))
                    break
        elif isinstance(node, ast.Match) and not _about_method(node.subject):
            for case in node.cases:
                for pat in ast.walk(case.pattern):
                    if isinstance(pat, ast.MatchValue) and _names_in(pat.value, names):
                        out.append((pat.lineno, f"match {ast.unparse(node.subject)}: case "
                                                f"{ast.unparse(pat.value)}"))
    return sorted(out)


def _sources() -> list[Path]:
    files = [p for p in sorted((ROOT / "tseeds_jax").rglob("*.py"))
             if "losses" not in p.relative_to(ROOT / "tseeds_jax").parts[:2]
             and p.relative_to(ROOT / "tseeds_jax").parts[0] != "kernels"]
    return files + sorted((ROOT / "kernels").rglob("*.py"))


def test_the_scan_finds_name_branches():
    names = {"sis", "stare"}
    src = ('if spec.name == "sis": pass\n'
           'x = name in ("stare", "other")\n'
           'y = "stare" != lo.name\n'
           'if method == "sis": pass\n'
           'z = tree["stare"]\n'
           'match loss:\n    case "sis": pass\n')
    assert [line for line, _ in loss_name_branches(src, names)] == [1, 2, 3, 7]


def test_no_loss_name_comparison_outside_rl_losses():
    names = set(losses.names())
    assert {"dapo", "m2po", "sis", "stare"} <= names
    found = [f"{p.relative_to(ROOT)}:{line}: {code}" for p in _sources()
             for line, code in loss_name_branches(p.read_text(), names)]
    assert not found, ("branches on a loss name outside rl/losses/ (ask the registry entry's "
                       "`needs` instead):\n" + "\n".join(found))
