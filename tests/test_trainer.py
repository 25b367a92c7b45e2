"""Invariants of the Thinking Seeds trainer (DESIGN.md §1): on-policy reduction, ratios, resume."""

import jax
import numpy as np
import pytest

from tests.trainer_utils import tiny_trainer
from tseeds_jax.rl.trainer import TrainingError

SCALARS = ("loss", "reward", "grad_norm", "response_length", "seed_length", "pg_clipfrac",
           "entropy/all", "ratio_mean/cont", "zero_adv_group_frac")


def _leaves(params):
    return [np.asarray(x) for x in jax.tree_util.tree_leaves(params)]


def _same_params(a, b):
    return all(np.array_equal(x, y) for x, y in zip(_leaves(a), _leaves(b), strict=True))


def test_ratio_zero_reproduces_on_policy(tmp_path):
    on = tiny_trainer(tmp_path / "on", **{"seeds.refresh_interval": 1})
    seeded = tiny_trainer(tmp_path / "seeded", **{"seeds.refresh_interval": 3, "seeds.ratio": 0.0})
    h_on, h_seeded = on.run(), seeded.run()
    assert [m["seed_length"] for m in h_seeded] == [0.0] * 4
    for a, b in zip(h_on, h_seeded, strict=True):
        for k in SCALARS:
            np.testing.assert_array_equal(a[k], b[k], err_msg=k)
    assert any(m["grad_norm"] > 0 for m in h_on)  # the runs did learn something
    assert _same_params(on.state.params, seeded.state.params)


def test_seeded_steps_have_unit_continuation_ratios_and_off_policy_seed_ratios(tmp_path):
    tr = tiny_trainer(tmp_path, **{"seeds.refresh_interval": 3, "seeds.ratio": 0.5})
    hist = tr.run(steps=3)
    assert hist[0]["seed_length"] == 0.0  # batch 1 of the cycle is on-policy
    for m in hist[1:]:
        assert m["seed_length"] > 0
        # One update per batch: continuation tokens use the detached current log-probs.
        assert m["ratio_mean/cont"] == 1.0
        # Seed tokens keep pi_b's log-probs; the parameters moved since the refresh.
        assert abs(m["ratio_mean/seed"] - 1.0) > 1e-6
    assert hist[0]["grad_norm"] > 0


def test_entropy_truncation_runs_and_cuts_inside_the_response(tmp_path):
    tr = tiny_trainer(tmp_path, **{"seeds.refresh_interval": 2, "seeds.truncation": "entropy",
                                   "seeds.top_k": 3})
    hist = tr.run(steps=2)
    assert 0 < hist[1]["seed_length"] < hist[1]["response_length"]


def test_resume_is_bitwise(tmp_path):
    over = {"seeds.refresh_interval": 3, "seeds.ratio": 0.5, "steps": 5}
    full = tiny_trainer(tmp_path / "full", checkpoints=True, **over)
    h_full = full.run()
    part = tiny_trainer(tmp_path / "part", checkpoints=True, **over)
    part.run(steps=2)  # stops mid-cycle: the seed cache for step 2 must survive
    resumed = tiny_trainer(tmp_path / "part", checkpoints=True, **over)
    assert resumed.restore() and resumed.step == 2
    h_rest = resumed.run()
    for a, b in zip(h_full[2:], h_rest, strict=True):
        for k in SCALARS + ("ratio_mean/seed",):
            np.testing.assert_array_equal(a[k], b[k], err_msg=k)
    assert _same_params(full.state.params, resumed.state.params)


def test_non_finite_loss_stops_with_step_metric_and_checkpoint(tmp_path):
    tr = tiny_trainer(tmp_path, checkpoints=True)
    real = tr.learner.update

    def poisoned(state, batch):
        state, metrics = real(state, batch)
        return state, {**metrics, "loss": np.float32("nan")}

    tr.learner.update = poisoned
    with pytest.raises(TrainingError, match=r"step 0: loss=nan .*saved at (\S+)") as info:
        tr.train_step()
    saved = str(info.value).rsplit("saved at ", 1)[1].split()[0]
    import os

    assert os.path.isdir(saved)
