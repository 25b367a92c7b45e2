"""Restart methods register themselves (issue 56): an example method, written in this file only,
trains through the registry (config checks, presets, combination table, route, its stream), and
no package module names a registered method except the method's own.

The example, "echo", is the recipe of docs/architecture.md at its smallest: on-policy batches
drawn from a stream of its own, one metric of its own, one value check, and a row of the
combination table that refuses what every restart method refuses.
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import numpy as np
import pytest

from tests.trainer_utils import parity_reward, set_fields, tiny_cd
from tseeds_jax.rl.config import ConfigValueError, TrainConfig, compat
from tseeds_jax.rl.config.methods import apply_restart
from tseeds_jax.rl.methods import registry
from tseeds_jax.rl.methods.base import OnPolicy
from tseeds_jax.rl.rollout import streams
from tseeds_jax.rl.rollout.source import Plan
from tseeds_jax.rl.setup import make_trainer

ECHO = 0x7E99  # the example's stream


class Echo(OnPolicy):
    """On-policy batches from the example's own stream; counts what it trained."""

    def plan(self, j, policy, info):
        prompts, refs, first = self.ctx.take_local(self.ctx.b)
        return Plan(prompts, refs, first, stream=streams.method_seed(self.ctx.cfg.seed, j, ECHO))

    def sample_metrics(self, samples):
        return {"restart/echo_samples": float(len(samples))}


def _check(cfg, bad):
    if cfg.restart.prefix_share:
        bad("prefix_share", cfg.restart.prefix_share, "echo takes no prefixes")


SPEC = registry.MethodSpec(
    name="echo", label="Echo", description="Echo (the registry's example)",
    feature=registry.Feature("echo", "the example method", registry.REFUSED_BY_ALL),
    variant="state+action", route=Echo, presets=lambda scale: {"restart.prefix_share": 0.0},
    check=_check, streams={"ECHO": ECHO})


@pytest.fixture
def echo():
    registry.register(SPEC)
    yield SPEC
    registry.unregister(SPEC.name)


def _cfg(tmp_path, **over):
    c = tiny_cd(tmp_path, steps=2)
    apply_restart(c, "echo")
    set_fields(c, over)
    c.run_dir = str(tmp_path)
    return TrainConfig.from_config(c)


def test_example_method_trains_through_its_registry_entry(tmp_path, echo):
    tr = make_trainer(_cfg(tmp_path), checkpoints=False, env_overrides={"reward_fn": parity_reward})
    assert type(tr.source.method) is Echo
    history = tr.run()
    assert [m["restart/echo_samples"] for m in history] == [8.0, 8.0]
    assert all(np.isfinite(m["loss"]) for m in history)


def test_example_method_is_checked_and_is_a_row_of_the_table(tmp_path, echo):
    cfg = _cfg(tmp_path)
    assert cfg.restart.method == "echo" and cfg.restart.prefix_share == 0.0  # its presets
    with pytest.raises(ConfigValueError, match="restart.prefix_share.*echo takes no prefixes"):
        _cfg(tmp_path, **{"restart.prefix_share": 0.5})
    with pytest.raises(ConfigValueError, match="needs seeds.variant='state\\+action'"):
        _cfg(tmp_path, **{"seeds.variant": "state"})
    assert "echo" in [f.name for f in compat.features()]
    assert compat.status("echo", "lag") == "refused"
    assert compat.status("echo", "prefix") == compat.status("echo", "branch") == "exclusive"
    assert compat.status("echo", "partial") == "works"
    with pytest.raises(ConfigValueError) as e:
        _cfg(tmp_path, **{"stale.steps": 1})
    assert "config.stale.steps=1" in str(e.value) and "config.restart.method='echo'" in str(e.value)
    assert "| **echo** |" in compat.render()


def test_unknown_method_and_stream_collisions(tmp_path, echo):
    c = tiny_cd(tmp_path)
    c.restart.method = "ehco"
    with pytest.raises(ConfigValueError, match="unknown restart method; known: .*'echo'"):
        TrainConfig.from_config(c)
    assert streams.method_seed(0, 3, ECHO) != streams.method_seed(0, 3, streams.FIRST_PASS)
    with pytest.raises(ValueError, match="is not a method stream"):
        streams.method_seed(0, 3, ECHO + 1)
    clash = dataclasses.replace(SPEC, name="echo2", streams={"OTHER": ECHO})
    with pytest.raises(ValueError, match="already echo's ECHO"):
        registry.register(clash)
    own = dataclasses.replace(SPEC, name="echo3", streams={"SIS_AGAIN": streams.SIS})
    registry.register(own)
    try:
        with pytest.raises(ValueError, match="one of rl/rollout/streams.py's"):
            streams.method_seed(0, 3, ECHO)
    finally:
        registry.unregister("echo3")


def test_the_package_registers_its_methods_with_distinct_streams():
    names = registry.names()
    assert names == ("prefixrl", "questa", "fr3e", "cure")  # MODULES order, whatever was imported
    values = list(registry.streams().values())
    assert len(set(values)) == len(values)
    assert not set(values) & set(streams.METHOD + streams.GENERATION)
    for spec in registry.specs():
        assert spec.variant in ("state", "state+action") and spec.label and spec.description


# ---- no package module names a registered method except its own ----
ROOT = Path(registry.__file__).resolve().parents[3]


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                out.add(id(body[0].value))
    return out


def method_name_literals(source: str, names: set[str]) -> list[tuple[int, str]]:
    """(line, name) of each string literal in `source` that is exactly a method's name
    (docstrings aside): a comparison, a label list, a preset keyed by the name."""
    tree = ast.parse(source)
    skip = _docstrings(tree)
    return sorted((n.lineno, n.value) for n in ast.walk(tree)
                  if isinstance(n, ast.Constant) and isinstance(n.value, str)
                  and n.value in names and id(n) not in skip)


def test_the_name_reader_finds_names():
    src = 'x = {"fr3e": 1}\nif m == "cure":\n    pass\ndef f():\n    """fr3e"""\n'
    assert method_name_literals(src, {"fr3e", "cure"}) == [(1, "fr3e"), (2, "cure")]


def test_no_module_names_a_method_but_its_own():
    owner = {s.name: Path(__import__(s.route.__module__, fromlist=["_"]).__file__).resolve()
             for s in registry.specs()}
    files = sorted((ROOT / "tseeds_jax").rglob("*.py")) + sorted((ROOT / "benchmarks").rglob("*.py"))
    found = []
    for path in files:
        for line, name in method_name_literals(path.read_text(), set(owner)):
            if path.resolve() != owner[name]:
                found.append(f"{path.relative_to(ROOT)}:{line}: {name!r}")
    assert not found, "a method named outside its module (ask rl/methods/registry.py):\n" + \
        "\n".join(found)
