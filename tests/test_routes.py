"""Every generation route runs behind the one batch-source seam for 2 steps and writes the same
core metrics (issue 44); the combination table refuses what it says it refuses, naming fields.

Routes (rl/methods/routes.py): on-policy, Thinking Seeds, LUFFY traces, M2PO's lag, lag +
overlap, partial rollouts, partial rollouts + refresh cycles, lag + partial rollouts, each peer
restart method, and a prefix method through the partial-rollout pool.
"""

import itertools

import numpy as np
import pytest

from tests.trainer_utils import parity_reward, set_fields, tiny_cd
from tseeds_jax.rl.config import ConfigValueError, TrainConfig, compat
from tseeds_jax.rl.config.methods import apply_restart
from tseeds_jax.rl.methods import registry as method_registry
from tseeds_jax.rl.methods.base import MethodSource
from tseeds_jax.rl.rollout.lag import Lagged
from tseeds_jax.rl.rollout.pool import PoolSource
from tseeds_jax.rl.setup import make_trainer
from tseeds_jax.rl.trainer import CORE_METRICS

PARTIAL = {"stale.partial_tokens": 6, "stale.max_staleness": 1}
ROUTES = {
    "onpolicy": ({}, MethodSource),
    "seeds": ({"seeds.refresh_interval": 2}, MethodSource),
    "luffy": ({"loss.name": "luffy", "offpolicy.source": "task", "data.size": 200}, MethodSource),
    "lag": ({"stale.steps": 1}, Lagged),
    "lag_overlap": ({"stale.steps": 1, "stale.overlap": True}, Lagged),
    "partial": (PARTIAL, PoolSource),
    "partial_refresh": ({**PARTIAL, "seeds.refresh_interval": 2}, PoolSource),
    "lag_partial": ({**PARTIAL, "stale.steps": 1}, Lagged),
    "prefixrl": ("prefixrl", MethodSource),
    "questa": ("questa", MethodSource),
    "fr3e": ("fr3e", MethodSource),
    "cure": ("cure", MethodSource),
    "questa_partial": (("questa", PARTIAL), PoolSource),
}


def _cfg(tmp_path, spec):
    c = tiny_cd(tmp_path, steps=2)
    if isinstance(spec, tuple):
        spec, over = spec
        apply_restart(c, spec)
        c.restart.pool_prompts = 4
        set_fields(c, over)
    elif isinstance(spec, str):
        apply_restart(c, spec)
        c.restart.pool_prompts = 4
    else:
        set_fields(c, spec)
    c.run_dir, c.steps = str(tmp_path), 2
    return TrainConfig.from_config(c)


@pytest.mark.slow
@pytest.mark.parametrize("route", list(ROUTES))
def test_route_runs_two_steps_behind_the_seam(tmp_path, route):
    spec, outer = ROUTES[route]
    tr = make_trainer(_cfg(tmp_path, spec), checkpoints=False,
                      env_overrides={"reward_fn": parity_reward})
    assert type(tr.source) is outer
    history = tr.run()
    assert len(history) == 2
    for m in history:
        missing = [k for k in CORE_METRICS if k not in m]
        assert not missing, f"{route}: no {missing}"
        assert np.isfinite(m["loss"]) and m["num_samples"] == 8
        assert m["generated_tokens"] > 0 and 0 < m["slot_occupancy"] <= 1
        # one of the two all-equal shares names the batch's source (seeded or on-policy)
        assert {"zero_adv_group_frac/onpolicy", "zero_adv_group_frac/seeded"} & set(m)
    if route in ("prefixrl", "questa", "questa_partial"):
        assert history[0]["restart/prefixed_group_frac"] > 0
    if route in ("fr3e", "cure"):
        assert history[0]["restart/branch_frac"] == 0.5


def test_combination_table_refuses_its_refused_pairs_naming_both_fields(tmp_path):
    """Each pair the table refuses raises ConfigValueError naming both switching fields; each
    exclusive pair cannot be configured at all. (The combined pairs run in the route tests.)"""
    on = {"seeds": {"seeds.refresh_interval": 2},
          "luffy": {"loss.name": "luffy", "offpolicy.source": "task"},
          "lag": {"stale.steps": 1}, "overlap": {"stale.steps": 1, "stale.overlap": True},
          "partial": PARTIAL, "filter": {"advantage.filter_groups": True},
          "topk": {"loss.name": "sis", "optim.mini_batches": 2},
          "tis": {"stale.correction": "tis"}}
    checked = 0
    by_name = {f.name: f for f in compat.features()}
    method_rows = {f.name for f in method_registry.features()}
    for a, b in itertools.combinations(by_name, 2):
        if compat.status(a, b) != "refused" or "hosts" in (a, b):
            continue
        c = tiny_cd(tmp_path)
        for name in (a, b):
            if name in method_rows:  # a restart method's row: its family's last method
                apply_restart(c, method_registry.members(name)[-1])
        for name in (a, b):
            set_fields(c, on.get(name, {}))
        # overlap needs the lag, whose own refusal may be the one named
        fields = [("stale.steps", "stale.overlap") if n == "overlap" else
                  (by_name[n].field,) for n in (a, b)]
        with pytest.raises(ConfigValueError) as e:
            TrainConfig.from_config(c)
        assert all(any(f"config.{f}=" in str(e.value) for f in names) for names in fields), \
            (a, b, str(e.value))
        checked += 1
    assert checked == sum(compat.status(a, b) == "refused" and "hosts" not in (a, b)
                          for a, b in itertools.combinations(by_name, 2)) >= 10


def test_the_table_in_docs_is_the_rendered_one():
    import pathlib

    doc = (pathlib.Path(__file__).resolve().parents[1] / "docs" / "architecture.md").read_text()
    start, end = "<!-- BEGIN compat-table -->\n", "\n<!-- END compat-table -->"
    assert start in doc and end in doc
    assert doc.split(start)[1].split(end)[0] == compat.render(), \
        "docs/architecture.md's table differs: paste compat.render() between the markers"
