"""Rollout correction "tis" (truncated importance sampling, rl/learn/correction.py): the weights
against a hand-computed case, the clipped loss and its gradient against the float64 reference of
test_losses_ref.py with the weights multiplied in, the config's refusal for losses without a
per-token weight, and a trainer run with partial rollouts."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.test_losses_ref import MODES, make_batch, ref_agg, ref_agg_weights, ref_vanilla_tokens
from tests.trainer_utils import tiny_cd, tiny_trainer
from tseeds_jax.rl import losses
from tseeds_jax.rl.config import ConfigValueError, TrainConfig
from tseeds_jax.rl.learn import correction as rollout_correction

TIGHT = dict(rtol=1e-10, atol=1e-12)


def test_tis_weights_hand_computed():
    # log w: w = 0.5 (kept), 3 (truncated to t = 2), 1, and a padded position
    log_w = np.log(np.array([[0.5, 3.0, 1.0, 7.0]]))
    resp = np.array([[1.0, 1.0, 1.0, 0.0]])
    w, m = rollout_correction.tis_weights(resp, log_w, 2.0)
    np.testing.assert_allclose(w, [[0.5, 2.0, 1.0, 1.0]], rtol=1e-7)
    assert m["rc_truncated_token_frac"] == pytest.approx(1 / 3)
    assert m["rc_tis_weight_mean"] == pytest.approx((0.5 + 2.0 + 1.0) / 3)
    with pytest.raises(ValueError, match="threshold 1.0: must be > 1"):
        rollout_correction.tis_weights(resp, log_w, 1.0)


@pytest.mark.parametrize("mode", MODES)
def test_weighted_clipped_loss_and_gradient_match_the_float64_reference(mode):
    with jax.enable_x64(True):
        lp, olp, A_B, m = make_batch(5)
        w = np.random.default_rng(0).uniform(0.3, 2.0, size=lp.shape)
        A = np.broadcast_to(A_B[:, None], lp.shape)
        L, g, _, _, _ = ref_vanilla_tokens(lp, olp, A, 0.2, 0.28, 3.0)
        want = ref_agg(L * w, m, mode)
        want_grad = g * w * ref_agg_weights(m, mode)
        hp = losses.PPOHParams(clip_low=0.2, clip_high=0.28, clip_c=3.0, agg_mode=mode)
        dens = losses.agg_denominators(jnp.asarray(m))

        def f(x):
            inputs = losses.LossInputs.create(x, olp, A_B, m, tis_weight_BT=jnp.asarray(w))
            return losses.ppo_loss(inputs, hp, denominators=dens).loss

        np.testing.assert_allclose(f(jnp.asarray(lp)), want, **TIGHT)
        np.testing.assert_allclose(jax.grad(f)(jnp.asarray(lp)), want_grad, **TIGHT)
        # the weights are constants: no gradient flows into them
        gw = jax.grad(lambda ww: losses.ppo_loss(
            losses.LossInputs.create(jnp.asarray(lp), olp, A_B, m, tis_weight_BT=ww), hp,
            denominators=dens).loss)(jnp.asarray(w))
        assert np.all(np.asarray(gw) == 0.0)


def test_config_refuses_tis_for_a_loss_without_token_weights(tmp_path):
    with pytest.raises(ConfigValueError, match=r"config.stale.correction='tis': "
                                               r"loss.name='gspo' has no per-token weight"):
        TrainConfig.from_config(tiny_cd(tmp_path, **{"stale.correction": "tis",
                                                     "loss.name": "gspo"}))
    TrainConfig.from_config(tiny_cd(tmp_path, **{"stale.correction": "tis"}))  # dapo


@pytest.mark.slow  # ~30 s: two 3-step runs
def test_trainer_with_partial_rollouts_trains_with_truncated_weights(tmp_path):
    """A bfloat16 sampler makes pi_den / pi_sampler differ from 1 (by ~1e-3 here); the cap
    t = 1.0005 truncates some tokens."""
    over = {"stale.partial_tokens": 6, "stale.max_staleness": 2, "steps": 3,
            "stale.correction_threshold": 1.0005, "model.sampler_dtype": "bfloat16"}
    tis = tiny_trainer(tmp_path / "tis", **over, **{"stale.correction": "tis"})
    off = tiny_trainer(tmp_path / "off", **over)
    h_tis, h_off = tis.run(), off.run()
    for m in h_tis:
        assert 0.0 < m["rc_tis_weight_mean"] <= 1.0005 + 1e-6
        assert np.isfinite(m["loss"]) and m["rc_masked_token_frac"] == 0.0  # never drops
    assert all(m["rc_truncated_token_frac"] > 0 for m in h_tis)
    assert h_tis[0]["reward"] == h_off[0]["reward"]  # the same first batch (before any update)
    assert h_tis[0]["grad_norm"] != h_off[0]["grad_norm"]  # the weights reach the gradient
