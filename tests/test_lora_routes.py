"""Every generation route with LoRA adapters (lora.rank > 0): 2 steps behind the seam, the
core metrics, the adapters moving (compat.py's table lists no refusal for LoRA: these runs are
why). tests/test_routes.py's routes and configs, plus a top-K proposal loss (SIS)."""

import numpy as np
import pytest

from tests.test_routes import ROUTES, _cfg
from tests.trainer_utils import parity_reward
from tseeds_jax.rl.setup import make_trainer
from tseeds_jax.rl.trainer import CORE_METRICS

LORA = {"lora.rank": 4, "lora.alpha": 8.0, "optim.lr": 3e-2}
EXTRA = {"sis": ({"loss.name": "sis", "loss.params": {"base": "dapo", "top_k": 4},
                  "optim.mini_batches": 2}, None),
         "seeds_tis": ({"seeds.refresh_interval": 2, "stale.correction": "tis"}, None),
         "filter_kl": ({"advantage.filter_groups": True, "loss.kl_coef": 0.05}, None)}
ALL = {**ROUTES, **EXTRA}
# CI runs these (threads, the pool with refresh cycles, a top-K proposal); the rest: manual.
CI = ("lag_overlap", "partial_refresh", "sis")


def _with_lora(spec):
    if isinstance(spec, dict):
        return {**spec, **LORA}
    if isinstance(spec, tuple):
        return (spec[0], {**spec[1], **LORA})
    return (spec, LORA)


def _run(tmp_path, route):
    tr = make_trainer(_cfg(tmp_path, _with_lora(ALL[route][0])), checkpoints=False,
                      env_overrides={"reward_fn": parity_reward})
    assert tr.env.frozen is not None
    start = [np.asarray(x).copy() for x in __import__("jax").tree.leaves(tr.state.params)]
    history = tr.run()
    assert len(history) == 2
    for m in history:
        missing = [k for k in CORE_METRICS if k not in m]
        assert not missing, f"{route}: no {missing}"
        assert np.isfinite(m["loss"]) and m["lora_sync_bytes"] > 0
    end = __import__("jax").tree.leaves(tr.state.params)
    assert any(not np.array_equal(a, np.asarray(b)) for a, b in zip(start, end)), route


@pytest.mark.slow
@pytest.mark.parametrize("route", CI)
def test_route_with_lora(tmp_path, route):
    _run(tmp_path, route)


@pytest.mark.manual  # ~6 min on 2 cores
@pytest.mark.parametrize("route", [r for r in ALL if r not in CI])
def test_every_other_route_with_lora(tmp_path, route):
    _run(tmp_path, route)


# Two processes (tests/test_multihost.py's harness): the base is sharded over both, the replica
# sampler and statistics passes gather it once; the adapters trained are one process's.
MULTIHOST = {"overrides": {**LORA, "optim.lr": 3e-3}}


@pytest.mark.manual  # ~100 s; CI keeps test_multihost.py's full-parameter run (CI time)
def test_two_processes_with_lora_match_one_process(tmp_path):
    from tests.test_multihost import _assert_same_run
    from tests.test_multihost import _run as run_hosts

    single, _ = run_hosts(tmp_path, "single", 1, MULTIHOST)
    multi, _ = run_hosts(tmp_path, "multi", 2, MULTIHOST)
    _assert_same_run(single, multi, "LoRA, replica, 2 processes")


@pytest.mark.manual  # ~4 min
def test_two_processes_with_lora_sharded_and_decode_samplers_match_one_process(tmp_path):
    """tests/test_multihost.py's sharded run (data 2 x fsdp 2 x tensor 2 over both processes,
    dynamic sampling) with adapters: the sampler on the learner's mesh, and on the decode layout
    (the base resharded there once, the adapters at every sync)."""
    from tests.test_multihost import SHARDED, _assert_same_run
    from tests.test_multihost import _run as run_hosts

    over = {**SHARDED["overrides"], **MULTIHOST["overrides"]}
    single, _ = run_hosts(tmp_path, "single", 1, {**SHARDED, "devices": 8, "overrides": over})
    multi, _ = run_hosts(tmp_path, "multi", 2, {**SHARDED, "overrides": over})
    decode, _ = run_hosts(tmp_path, "decode", 2, {**SHARDED, "overrides": {
        **over, "hardware.sampler_placement": "decode", "hardware.sampler_tensor": 2}})
    _assert_same_run(single, multi, "LoRA, sharded sampler, 2 processes")
    _assert_same_run(single, decode, "LoRA, decode layout, 2 processes")
