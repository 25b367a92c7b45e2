"""Clipped PPO loss, aggregation, micro-batch exactness, regularizers, Thinking Seeds helpers, registry.

Comparisons against the float64 numpy references of test_losses_ref.py run JAX in float64
(`jax.enable_x64` context, restored afterwards) at 1e-10; one float32 run uses the standard 1e-5.
"""

import dataclasses

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from absl.testing import parameterized

from tests.test_losses_ref import (
    MODES,
    fd_grad,
    make_batch,
    ref_agg,
    ref_agg_weights,
    ref_kl,
    ref_masked_mean,
    ref_policy_loss,
    ref_vanilla_tokens,
)
from tseeds_jax.rl import losses
from tseeds_jax.rl.losses import registry as registry_mod

TIGHT = dict(rtol=1e-10, atol=1e-12)


class PolicyLossTest(chex.TestCase):
    @chex.variants(with_jit=True, without_jit=True)
    @parameterized.named_parameters(*[(m.replace("-", "_"), m) for m in MODES])
    def test_matches_reference(self, mode):
        with jax.enable_x64(True):
            lp, olp, A, m = make_batch(1)
            want, want_metrics, want_grad = ref_policy_loss(lp, olp, A, m, mode=mode)

            def f(x):
                return losses.policy_loss(x, olp, A, m, agg_mode=mode)

            loss, metrics = self.variant(f)(jnp.asarray(lp))
            grad = self.variant(jax.grad(lambda x: f(x)[0]))(jnp.asarray(lp))
            np.testing.assert_allclose(loss, want, **TIGHT)
            for k, v in want_metrics.items():
                np.testing.assert_allclose(metrics[k], v, err_msg=k, **TIGHT)
            np.testing.assert_allclose(grad, want_grad, **TIGHT)
            assert np.all(np.asarray(grad)[~m.astype(bool)] == 0.0)


@pytest.mark.parametrize("mode", MODES)
def test_float32_matches_float64_reference(mode):
    lp, olp, A, m = make_batch(2)
    A_BT = np.broadcast_to(A[:, None], lp.shape) * np.linspace(0.5, 1.5, lp.shape[1])
    want, want_metrics, want_grad = ref_policy_loss(lp, olp, A_BT, m, mode=mode, clip_high=0.2)
    f32 = lambda x: jnp.asarray(x, jnp.float32)
    loss, metrics = losses.policy_loss(f32(lp), f32(olp), f32(A_BT), m, clip_high=0.2, agg_mode=mode)
    grad = jax.grad(lambda x: losses.policy_loss(x, f32(olp), f32(A_BT), m, clip_high=0.2,
                                                 agg_mode=mode)[0])(f32(lp))
    assert loss.dtype == jnp.float32
    scale = np.abs(want_grad).max()
    np.testing.assert_allclose(loss, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(grad, want_grad, rtol=1e-5, atol=1e-6 * scale)
    for k, v in want_metrics.items():
        np.testing.assert_allclose(metrics[k], v, rtol=1e-5, atol=1e-6, err_msg=k)


@pytest.mark.parametrize("mode", MODES)
def test_all_masked_batch_gives_zero_not_nan(mode):
    lp, olp, A, m = make_batch(3)
    zero = np.zeros_like(m)
    loss, metrics = losses.policy_loss(jnp.asarray(lp, jnp.float32), olp, A, zero, agg_mode=mode)
    grad = jax.grad(lambda x: losses.policy_loss(x, olp, A, zero, agg_mode=mode)[0])(
        jnp.asarray(lp, jnp.float32))
    assert float(loss) == 0.0
    assert all(float(v) == 0.0 for v in metrics.values())
    assert np.all(np.asarray(grad) == 0.0)


def test_dual_clip_disabled_and_custom_loss_scale():
    with jax.enable_x64(True):
        lp, olp, A, m = make_batch(4)
        for clip_c, scale in ((None, 3.0), (10.0, 11.0)):
            want, wm, wg = ref_policy_loss(lp, olp, A, m, clip_c=clip_c,
                                           mode="seq-mean-token-sum-norm", loss_scale=scale)
            f = lambda x, c=clip_c, s=scale: losses.policy_loss(
                x, olp, A, m, clip_c=c, agg_mode="seq-mean-token-sum-norm", loss_scale=s)
            loss, metrics = f(jnp.asarray(lp))
            np.testing.assert_allclose(loss, want, **TIGHT)
            np.testing.assert_allclose(metrics["pg_clipfrac_lower"], wm["pg_clipfrac_lower"], **TIGHT)
            np.testing.assert_allclose(jax.grad(lambda x, f=f: f(x)[0])(jnp.asarray(lp)), wg, **TIGHT)


@pytest.mark.parametrize(
    "name,mode", [("dapo", m) for m in MODES] + [("grpo", "seq-mean-token-sum")])
def test_micro_batches_sum_exactly_to_full_batch(name, mode):
    lp, olp, A, m = make_batch(5, B=9, T=6)
    m[3:6] = 0.0  # the middle micro-batch has no valid token at all
    rng = np.random.default_rng(0)
    ent = rng.uniform(0.0, 2.0, size=lp.shape)
    ref = lp + rng.normal(scale=0.2, size=lp.shape)
    spec = losses.get(name)
    hp = dataclasses.replace(
        spec.default_hparams, agg_mode=mode,
        reg=losses.Regularizers(entropy_coef=0.01, kl_coef=0.1, kl_type="low_var_kl"))
    dens = losses.agg_denominators(m, loss_scale=9.0)
    f32 = lambda x: jnp.asarray(x, jnp.float32)

    @jax.jit
    def run(lp_rows, olp_rows, a_rows, m_rows, ent_rows, ref_rows):
        def loss(x):
            inputs = losses.LossInputs.create(x, olp_rows, a_rows, m_rows, entropy_BT=ent_rows,
                                              ref_logp_BT=ref_rows)
            out = spec(inputs, hp, denominators=dens)
            return out.loss, out
        return jax.grad(loss, has_aux=True)(lp_rows)

    arrays = [f32(x) for x in (lp, olp, A, m, ent, ref)]
    full_grad, full = run(*arrays)
    parts, grads = [], []
    for rows in np.split(np.arange(9), 3):  # micro-batches of 3 rows
        g, out = run(*[x[rows] for x in arrays])
        parts.append(out)
        grads.append(g)
    merged = losses.merge_outputs(*parts)
    np.testing.assert_allclose(merged.loss, full.loss, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(np.concatenate(grads), full_grad, rtol=1e-6, atol=1e-8)
    fm, mm = losses.finalize_metrics(full), losses.finalize_metrics(merged)
    assert set(fm) == {"pg_loss", "entropy", "kl_loss", "pg_clipfrac", "pg_clipfrac_lower",
                       "ppo_kl"}
    for k in fm:
        np.testing.assert_allclose(mm[k], fm[k], rtol=1e-6, atol=1e-7, err_msg=k)
    # The total is the policy share minus the entropy bonus plus the KL loss, vs numpy.
    hp_ref = spec.default_hparams
    want_pg, _, want_grad = ref_policy_loss(lp, olp, A, m, clip_low=hp_ref.clip_low,
                                            clip_high=hp_ref.clip_high, mode=mode, loss_scale=9.0)
    want_ent = ref_agg(ent, m, mode, 9.0)
    want_kl = ref_agg(ref_kl(lp, ref, "k3"), m, mode, 9.0)
    np.testing.assert_allclose(fm["entropy"], want_ent, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(fm["kl_loss"], want_kl, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(full.loss, want_pg - 0.01 * want_ent + 0.1 * want_kl,
                               rtol=1e-5, atol=1e-6)


def _dr_grpo_sum_norm(L_BT, m_BT, loss_scale):
    """Dr. GRPO's aggregation (arXiv:2503.20783; the row mean verl's `agg_loss` adopted later, not
    verl b178a3c, which sums rows) restated in float64: the mean over rows that have a valid
    token of Σ_t L·m, divided by the constant. Returns the value and its derivative with respect to
    each L[i, t] (the aggregation is linear)."""
    keep_B = m_BT.sum(-1) > 0
    n_rows = max(int(keep_B.sum()), 1)
    value = (L_BT * m_BT).sum(-1)[keep_B].sum() / n_rows / loss_scale
    return value, m_BT * keep_B[:, None] / n_rows / loss_scale


@pytest.mark.parametrize("loss_scale", [None, 11.0])
def test_seq_mean_token_sum_norm_is_dr_grpo_row_mean(loss_scale):
    """Value and gradient vs Dr. GRPO's row-mean formula, an empty row included, whole and in micro-batches:
    the loss is a mean over sequences, so it does not grow with the number of rows."""
    mode = "seq-mean-token-sum-norm"
    with jax.enable_x64(True):
        lp, olp, A, m = make_batch(11, B=6, T=7)
        assert (m.sum(-1) == 0).sum() == 1  # one row with no token
        L, g, *_ = ref_vanilla_tokens(lp, olp, np.broadcast_to(A[:, None], lp.shape), 0.2, 0.28, 3.0)
        want, dL = _dr_grpo_sum_norm(L, m, m.shape[-1] if loss_scale is None else loss_scale)
        want_grad = g * dL

        def whole(x):
            return losses.policy_loss(x, olp, A, m, agg_mode=mode, loss_scale=loss_scale)[0]

        np.testing.assert_allclose(whole(jnp.asarray(lp)), want, rtol=1e-10)
        np.testing.assert_allclose(jax.grad(whole)(jnp.asarray(lp)), want_grad, rtol=1e-10,
                                   atol=1e-14)
        # Micro-batches of 2 rows share the mini-batch denominators; their shares add up exactly.
        dens = losses.agg_denominators(m, loss_scale=loss_scale)
        dapo = losses.get("dapo")
        hp = dataclasses.replace(dapo.default_hparams, agg_mode=mode)

        def share(x, rows):
            inputs = losses.LossInputs.create(x, olp[rows], A[rows], m[rows])
            return dapo(inputs, hp, denominators=dens).loss

        rows_list = np.split(np.arange(6), 3)
        total = sum(share(jnp.asarray(lp[r]), r) for r in rows_list)
        grads = [jax.grad(share)(jnp.asarray(lp[r]), r) for r in rows_list]
        np.testing.assert_allclose(total, want, rtol=1e-10)
        np.testing.assert_allclose(np.concatenate(grads), want_grad, rtol=1e-10, atol=1e-14)
        # Twice the rows (the batch repeated) leaves a sequence mean unchanged; a row sum doubles.
        lp2, olp2, A2, m2 = (np.concatenate([x, x]) for x in (lp, olp, A, m))
        doubled = losses.policy_loss(jnp.asarray(lp2), olp2, A2, m2, agg_mode=mode,
                                     loss_scale=loss_scale)[0]
        np.testing.assert_allclose(doubled, want, rtol=1e-10)


@pytest.mark.parametrize("kind", ["k1", "abs", "k2", "k3"])
def test_kl_loss_value_and_gradient(kind):
    with jax.enable_x64(True):
        lp, olp, A, m = make_batch(6, extreme=False)
        ref = lp + np.random.default_rng(1).normal(scale=0.5, size=lp.shape)
        ref[0, 1] = lp[0, 1] + 30.0  # k3 clamps (value ±10, κ ±20)
        hp = losses.PPOHParams(reg=losses.Regularizers(kl_coef=1.0, kl_type=kind))
        dens = losses.agg_denominators(m)

        def kl_term(x):
            inputs = losses.LossInputs.create(x, olp, A, m, ref_logp_BT=ref)
            return losses.get("dapo")(inputs, hp, denominators=dens).terms["kl_loss"]

        want = lambda x: ref_agg(ref_kl(x, ref, kind), m, "token-mean")
        np.testing.assert_allclose(kl_term(jnp.asarray(lp)), want(lp), **TIGHT)
        np.testing.assert_allclose(jax.grad(kl_term)(jnp.asarray(lp)), fd_grad(want, lp),
                                   rtol=1e-6, atol=1e-9)


def test_entropy_bonus_gradient_flows_through_entropy():
    lp, olp, A, m = make_batch(7)
    ent = np.random.default_rng(2).uniform(size=lp.shape)
    hp = losses.PPOHParams(agg_mode="seq-mean-token-mean",
                           reg=losses.Regularizers(entropy_coef=0.5))
    dens = losses.agg_denominators(m)
    g = jax.grad(lambda e: losses.get("dapo")(
        losses.LossInputs.create(lp, olp, A, m, entropy_BT=e), hp, denominators=dens).loss)(
        jnp.asarray(ent, jnp.float32))
    np.testing.assert_allclose(g, -0.5 * ref_agg_weights(m, "seq-mean-token-mean"), rtol=1e-6)


# ---------------------------------------------------------------- Thinking Seeds helpers
def _seed_batch(seed=8, B=5, T=8):
    lp, _, A, m = make_batch(seed, B=B, T=T, extreme=False)
    rng = np.random.default_rng(seed)
    seed_len = rng.integers(0, T, size=B)
    seed_mask = ((np.arange(T)[None, :] < seed_len[:, None]) & (m > 0)).astype(np.float64)
    behavior = lp + rng.normal(scale=0.3, size=lp.shape)
    return lp, behavior, A, m, seed_mask


def test_mix_old_logp_ratios_by_source():
    lp, behavior, A, m, seed = _seed_batch()
    lp32 = jnp.asarray(lp, jnp.float32)
    old = losses.mix_old_logp(seed, jnp.asarray(behavior, jnp.float32), jax.lax.stop_gradient(lp32))
    r = np.asarray(jnp.exp(lp32 - old))
    cont = seed == 0
    assert np.all(r[cont] == 1.0)  # on-policy shortcut, continuation tokens only: exactly 1
    np.testing.assert_allclose(r[~cont], np.exp(lp - behavior)[~cont], rtol=1e-5)


@pytest.mark.parametrize("variant", ["state", "state+action"])
def test_seed_variants(variant):
    with jax.enable_x64(True):
        lp, behavior, A, m, seed = _seed_batch()
        mask = np.asarray(losses.seed_loss_mask(m, seed, variant))
        want_mask = m * (1 - seed) if variant == "state" else m
        np.testing.assert_array_equal(mask, want_mask)
        dens = losses.agg_denominators(mask)

        def loss(x):
            old = losses.mix_old_logp(seed, behavior, jax.lax.stop_gradient(x))
            inputs = losses.LossInputs.create(x, old, A, mask)
            return losses.get("dapo")(inputs, None, denominators=dens).loss

        loss = jax.jit(loss)
        g = np.asarray(jax.jit(jax.grad(loss))(jnp.asarray(lp)))
        is_seed = seed > 0
        if variant == "state":
            assert np.all(g[is_seed] == 0.0)  # seed tokens are context only
        # Continuation tokens have ratio 1 (inside the clip): gradient -A/N exactly; seed tokens
        # (state+action) follow the clipped gradient of π_θ/π_b.
        old_ref = np.where(is_seed, behavior, lp)
        want_loss, _, want_grad = ref_policy_loss(lp, old_ref, A, mask)
        np.testing.assert_allclose(loss(jnp.asarray(lp)), want_loss, **TIGHT)
        np.testing.assert_allclose(g, want_grad, **TIGHT)
        cont = (~is_seed) & (mask > 0)
        np.testing.assert_allclose(g[cont], (-np.broadcast_to(A[:, None], lp.shape) / mask.sum())[cont],
                                   **TIGHT)


# ---------------------------------------------------------------- registry and validation
def test_registry():
    assert {"dapo", "grpo"} <= set(losses.names())
    assert losses.get("dapo").default_hparams.clip_high == 0.28
    assert losses.get(losses.LossName.GRPO).default_hparams.clip_high == 0.2
    with pytest.raises(ValueError, match="unknown loss 'nope'"):
        losses.get("nope")
    with pytest.raises(ValueError, match="already registered"):
        losses.register("dapo", losses.PPOHParams)(lambda *a, **k: None)
    lp, olp, A, m = make_batch(9)
    inputs = losses.LossInputs.create(lp, olp, A, m)
    with pytest.raises(TypeError, match="expects hparams of type"):
        losses.get("dapo")(inputs, object(), denominators=losses.agg_denominators(m))

    @dataclasses.dataclass(frozen=True)
    class HalfHP:
        factor: float = 0.5

    @losses.register("test_half_dapo", HalfHP)
    def half(inputs, hp, *, denominators):
        out = losses.ppo_loss(inputs, losses.PPOHParams(), denominators=denominators)
        return dataclasses.replace(out, loss=hp.factor * out.loss)

    try:
        dens = losses.agg_denominators(m)
        got = losses.get("test_half_dapo")(inputs, denominators=dens).loss
        np.testing.assert_allclose(got, 0.5 * losses.get("dapo")(inputs, denominators=dens).loss)
    finally:
        registry_mod._REGISTRY.pop("test_half_dapo")


def test_validation_messages():
    lp, olp, A, m = make_batch(10)
    with pytest.raises(ValueError, match="agg_mode='token_mean'"):
        losses.policy_loss(lp, olp, A, m, agg_mode="token_mean")
    with pytest.raises(ValueError, match="clip_c must be > 1"):
        losses.PPOHParams(clip_c=1.0)
    with pytest.raises(ValueError, match="old_logp_BT must have shape"):
        losses.LossInputs.create(lp, olp[:, :3], A, m)
    with pytest.raises(ValueError, match="advantages must have shape"):
        losses.LossInputs.create(lp, olp, A[:2], m)
    with pytest.raises(ValueError, match="kl_coef != 0 needs LossInputs.ref_logp_BT"):
        hp = losses.PPOHParams(reg=losses.Regularizers(kl_coef=0.1))
        losses.get("dapo")(losses.LossInputs.create(lp, olp, A, m), hp,
                           denominators=losses.agg_denominators(m))
    with pytest.raises(ValueError, match="seed loss variant 'action'"):
        losses.seed_loss_mask(m, m, "action")
    with pytest.raises(ValueError, match="kl_type='k4'"):
        losses.Regularizers(kl_type="k4")


def test_denominators():
    m = np.array([[1, 1, 0], [0, 0, 0], [1, 0, 0]], np.float32)
    d = losses.agg_denominators(m)
    assert float(d.num_tokens) == 3 and float(d.num_rows) == 2 and float(d.loss_scale) == 3
    # two non-empty rows times the constant
    assert float(losses.agg_denominator(m, "seq-mean-token-sum-norm", loss_scale=7)) == 14
    assert float(losses.agg_denominator(np.zeros((2, 3)), "token-mean")) == 1.0
    assert ref_masked_mean(np.ones(3), np.zeros(3)) == 0.0
