"""Partial rollouts in the trainer (rl/partial.py): with max_staleness = 0 the partial path is
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
    assert part.plugins.state() is not None and part.history[-1]["partial_responses_in_flight"]
    resumed = tiny_trainer(tmp_path / "part", checkpoints=True, **over)
    assert resumed.restore() and resumed.step == 2
    h_res = resumed.run()
    _same_metrics(h_full[2:], h_res)
    assert _same_params(full.state.params, resumed.state.params)
