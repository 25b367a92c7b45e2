"""Partial rollouts in the trainer (rl/rollout/pool.py): with max_staleness = 0 the partial path is
the synchronous algorithm bit for bit; with staleness the seeds carry older versions; an
in-process resume with responses in flight continues exactly."""

import jax
import numpy as np
import pytest

from tests.trainer_utils import tiny_trainer

TIMING = ("time_", "tokens_per_second")
PARTIAL = {"stale.partial_tokens": 6}


def _same_params(a, b):
    la, lb = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
    return all(np.array_equal(np.asarray(x), np.asarray(y)) for x, y in zip(la, lb, strict=True))


def _same_metrics(ha, hb):
    for a, b in zip(ha, hb, strict=True):
        shared = [k for k in a if k in b and not k.startswith(TIMING)]
        assert len(shared) > 20
        for k in shared:
            if k == "method":
                continue
            np.testing.assert_array_equal(np.asarray(a[k]), np.asarray(b[k]), err_msg=k)


@pytest.mark.slow  # ~30 s: two 3-step runs
def test_staleness_zero_partial_path_equals_synchronous_training(tmp_path):
    sync = tiny_trainer(tmp_path / "sync", steps=3)  # today's path: partial rollouts off
    part = tiny_trainer(tmp_path / "part", steps=3, **PARTIAL, **{"stale.max_staleness": 0})
    h_sync, h_part = sync.run(), part.run()
    assert "partial_calls" not in h_sync[0] and all(m["partial_calls"] == 1 for m in h_part)
    assert all(m["token_share/seed"] == 0.0 for m in h_part)
    assert any(m["grad_norm"] > 0 for m in h_sync)
    _same_metrics(h_sync, h_part)
    assert _same_params(sync.state.params, part.state.params)


@pytest.mark.slow  # ~30 s: 4 + 2 + 2 steps with checkpoints
def test_stale_partial_rollouts_train_seeds_of_older_versions_and_resume_exactly(tmp_path):
    over = dict(PARTIAL, steps=4, **{"stale.max_staleness": 2, "stale.correction": "token_mask",
                                     "stale.correction_threshold": 1.5})
    full = tiny_trainer(tmp_path / "full", checkpoints=True, **over)
    h_full = full.run()
    assert max(m["group_staleness_max"] for m in h_full) == 2
    later = h_full[2:]
    assert all(m["token_share/seed"] > 0 and m["ratio_mean/cont"] == 1.0 for m in later)
    assert any(abs(m["ratio_mean/seed"] - 1.0) > 1e-6 for m in later)  # older versions
    assert all(0.0 <= m["rc_masked_token_frac"] < 1.0 for m in h_full)
    part = tiny_trainer(tmp_path / "part", checkpoints=True, **over)
    part.run(steps=2)
    assert part.source.state() and part.history[-1]["partial_responses_in_flight"]
    resumed = tiny_trainer(tmp_path / "part", checkpoints=True, **over)
    assert resumed.restore() and resumed.step == 2
    h_res = resumed.run()
    _same_metrics(h_full[2:], h_res)
    assert _same_params(full.state.params, resumed.state.params)


SEEDED = {"seeds.refresh_interval": 3}


@pytest.mark.slow  # ~40 s: two 4-step runs with refreshes
def test_staleness_zero_partial_path_equals_the_refresh_cycle(tmp_path):
    """Thinking Seeds' refresh cycle through the pool (rl/rollout/pool.py, "Refresh cycles") with
    max_staleness = 0 is the paper's cycle bit for bit: a refresh at step 0, seeded steps 1 and
    2, the next refresh at step 3."""
    sync = tiny_trainer(tmp_path / "sync", **SEEDED)
    part = tiny_trainer(tmp_path / "part", **SEEDED, **PARTIAL, **{"stale.max_staleness": 0})
    h_sync, h_part = sync.run(), part.run()
    assert [m["behavior_tokens"] > 0 for m in h_part] == [True, False, False, True]
    assert all(m["token_share/seed"] > 0 for m in h_part[1:3])
    assert "seeds/cut_ratio_mean" in h_part[1]
    _same_metrics(h_sync, h_part)
    assert _same_params(sync.state.params, part.state.params)


@pytest.mark.slow  # ~50 s: 5 + 3 + 2 steps with checkpoints
def test_stale_refresh_cycle_through_the_pool_resumes_exactly(tmp_path):
    """max_staleness = 1, T = 2: each refresh runs a step before its cycle's first batch is
    trained (so a seed is up to T - 1 + s = 2 versions old); a checkpoint with seeds and partial
    responses in flight resumes bit for bit."""
    over = dict(PARTIAL, steps=5, **{"seeds.refresh_interval": 2, "stale.max_staleness": 1})
    full = tiny_trainer(tmp_path / "full", checkpoints=True, **over)
    h_full = full.run()
    # refreshes of batches 0 (step 0), 2 (step 1) and 4 (step 3): admitted s = 1 step early
    assert [m["time_refresh"] > 0 for m in h_full] == [True, True, False, True, False]
    assert max(m["group_staleness_max"] for m in h_full) == 2
    assert all("seeds/cut_ratio_mean" in m for m in h_full[1::2])
    part = tiny_trainer(tmp_path / "part", checkpoints=True, **over)
    part.run(steps=3)
    assert part.source.state() and part.source.seed_cache().batches  # batch 3's seeds, cached
    resumed = tiny_trainer(tmp_path / "part", checkpoints=True, **over)
    assert resumed.restore() and resumed.step == 3
    h_res = resumed.run()
    _same_metrics(h_full[3:], h_res)
    assert _same_params(full.state.params, resumed.state.params)


@pytest.mark.slow  # ~20 s: 3 steps of the shipped config on the smaller test model
def test_shipped_async_seeds_config_trains(tmp_path):
    import importlib.util
    import os

    from tests.trainer_utils import parity_reward, tiny_cd
    from tseeds_jax.rl.config import TrainConfig
    from tseeds_jax.rl.setup import make_trainer

    path = os.path.join(os.path.dirname(os.path.dirname(__file__)), "configs",
                        "tiny_async_seeds.py")
    spec = importlib.util.spec_from_file_location("tiny_async_seeds", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    c = mod.get_config()
    small = tiny_cd(tmp_path)  # the trainer tests' smaller model and batch, this config's method
    small.stale, small.seeds, small.loss = c.stale, c.seeds, c.loss
    small.method, small.steps = c.method, 3
    tr = make_trainer(TrainConfig.from_config(small), env_overrides={"reward_fn": parity_reward})
    hist = tr.run()
    assert c.seeds.refresh_interval > 3 and hist[0]["behavior_tokens"] > 0
    assert all("seeds/cut_ratio_mean" in m and m["token_share/seed"] > 0 for m in hist[1:])
    assert all(np.isfinite(m["loss"]) and "rc_tis_weight_mean" in m for m in hist)
