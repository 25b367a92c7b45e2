"""M2PO, LUFFY, GSPO(-token), CTPO(-LA), SIS and STARE vs float64 numpy references, plus invariants.

Values are compared in float64 (`jax.enable_x64`, restored afterwards) at 1e-10; gradients w.r.t.
logp against central differences of the numpy reference (stop-gradient parts held at their value)
at 1e-6, the finite-difference accuracy.
"""

import dataclasses
import math

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from absl.testing import parameterized

from tests.test_losses_ref import (
    fd_grad,
    make_batch,
    ref_ctpo,
    ref_gspo,
    ref_luffy,
    ref_m2po,
    ref_policy_loss,
    ref_sis,
    ref_sis_accept,
    ref_stare,
    ref_stare_weights,
)
from tseeds_jax.rl import losses

TIGHT = dict(rtol=1e-10, atol=1e-12)
FD = dict(rtol=1e-6, atol=1e-9)


def run(name, hp, inputs_kw, mask):
    """(loss, metrics, grad wrt logp) of a registered loss under jit, single call."""
    spec = losses.get(name)
    dens = losses.agg_denominators(mask)

    @jax.jit
    def f(lp, kw):
        def loss(x):
            out = spec(losses.LossInputs.create(x, advantages=kw.pop("advantages"), **kw), hp,
                       denominators=dens)
            return out.loss, out
        return jax.grad(loss, has_aux=True)(lp)

    kw = {k: (None if v is None else jnp.asarray(v)) for k, v in inputs_kw.items()}
    g, out = f(jnp.asarray(inputs_kw["logp_BT"]), {k: v for k, v in kw.items() if k != "logp_BT"})
    return out.loss, losses.finalize_metrics(out), g


def base_kw(lp, olp, A, m, **extra):
    return dict(logp_BT=lp, old_logp_BT=olp, advantages=A, mask_BT=m, **extra)


# ---------------------------------------------------------------- M2PO
@pytest.mark.parametrize("tau", [0.04, 0.2])
def test_m2po_matches_paper_algorithm(tau):
    with jax.enable_x64(True):
        lp, olp, A, m = make_batch(11, B=6, T=8)
        want, want_metrics, keep = ref_m2po(lp, olp, A, m, tau)
        assert 0 < (~keep).sum() < (m > 0).sum()  # the test exercises masking
        loss, metrics, g = run("m2po", losses.M2POHParams(tau=tau), base_kw(lp, olp, A, m), m)
        np.testing.assert_allclose(loss, want, **TIGHT)
        for k, v in want_metrics.items():
            np.testing.assert_allclose(metrics[k], v, err_msg=k, **TIGHT)
        fd = fd_grad(lambda x: ref_m2po(x, olp, A, m, tau, lp_sg=lp)[0], lp)
        np.testing.assert_allclose(g, fd, **FD)


def test_m2po_infinite_tau_masks_nothing():
    with jax.enable_x64(True):
        lp, olp, A, m = make_batch(12)
        loss, metrics, _ = run("m2po", losses.M2POHParams(tau=math.inf), base_kw(lp, olp, A, m), m)
        assert float(metrics["m2po_masked_frac"]) == 0.0
        r = np.exp(np.clip(lp - olp, -20, 20))
        want = (-A[:, None] * r * m).sum() / m.sum()  # plain token-mean -A·r, no clip at all
        np.testing.assert_allclose(loss, want, **TIGHT)


# ---------------------------------------------------------------- LUFFY
@pytest.mark.parametrize("clip,mode", [(False, "token-mean"), (True, "seq-mean-token-sum-norm")])
def test_luffy_matches_reference(clip, mode):
    with jax.enable_x64(True):
        lp, olp, A, m = make_batch(13)
        off = np.zeros_like(m)
        off[:, :3] = 1.0  # off-policy prefix on every row (rows 0-2 hold the extreme ratios)
        off[5] = 1.0  # a fully off-policy row
        hp = losses.LUFFYHParams(on_policy_clip=clip, agg_mode=mode)
        loss, metrics, g = run("luffy", hp, base_kw(lp, olp, A, m, seed_mask_BT=off), m)
        want = lambda x: ref_luffy(x, olp, A, m, off, clip=clip, mode=mode)
        np.testing.assert_allclose(loss, want(lp), **TIGHT)
        np.testing.assert_allclose(g, fd_grad(want, lp), **FD)
        np.testing.assert_allclose(metrics["luffy_offpolicy_frac"], (off * m).sum() / m.sum(),
                                   **TIGHT)


def test_luffy_without_offpolicy_tokens_is_ppo_without_dual_clip():
    with jax.enable_x64(True):
        lp, olp, A, m = make_batch(14)
        kw = base_kw(lp, olp, A, m, seed_mask_BT=np.zeros_like(m))
        loss, metrics, g = run("luffy", losses.LUFFYHParams(on_policy_clip=True), kw, m)
        want, want_metrics, want_g = ref_policy_loss(lp, olp, A, m, clip_high=0.2, clip_c=None)
        np.testing.assert_allclose(loss, want, **TIGHT)
        np.testing.assert_allclose(g, want_g, **TIGHT)
        np.testing.assert_allclose(metrics["pg_clipfrac"], want_metrics["pg_clipfrac"], **TIGHT)


# ---------------------------------------------------------------- GSPO
@pytest.mark.parametrize("name", ["gspo", "gspo_token"])
def test_gspo_matches_reference(name):
    with jax.enable_x64(True):
        lp, olp, A, m = make_batch(15)
        olp = lp + np.random.default_rng(0).normal(scale=1e-3, size=lp.shape)  # ratios near 1
        olp[0, 0] = lp[0, 0] - 80.0  # row 0: sequence log-ratio > 10 (the cap; no ±20 clamp)
        olp[5] -= 1e-3  # row 5 (A > 0): s ≈ e^{1e-3} > 1 + ε_h, clipped
        A_BT = np.broadcast_to(A[:, None], lp.shape) * np.linspace(0.5, 1.5, lp.shape[1])
        # The cap only shows for A < 0 (A > 0 is clipped above anyway); small |A| keeps the loss
        # O(1) so that finite differences stay accurate.
        A_BT[0] *= -1e-4
        token = name == "gspo_token"
        hp = losses.GSPOHParams()
        loss, metrics, g = run(name, hp, base_kw(lp, olp, A_BT, m), m)
        want = lambda x, sg=lp: ref_gspo(x, olp, A_BT, m, token_form=token, lp_sg=sg)
        np.testing.assert_allclose(loss, want(lp), **TIGHT)
        np.testing.assert_allclose(g, fd_grad(want, lp), **FD)
        assert 0 < float(metrics["pg_clipfrac"]) < 1


def test_gspo_and_gspo_token_agree_for_sequence_advantages():
    with jax.enable_x64(True):
        lp, olp, A, m = make_batch(16, extreme=False)
        olp = lp + np.random.default_rng(1).normal(scale=4e-4, size=lp.shape)
        kw = base_kw(lp, olp, A, m)
        l1, _, g1 = run("gspo", losses.GSPOHParams(), kw, m)
        l2, _, g2 = run("gspo_token", losses.GSPOHParams(), kw, m)
        np.testing.assert_allclose(l1, l2, **TIGHT)
        np.testing.assert_allclose(g1, g2, **TIGHT)


@pytest.mark.parametrize("name", ["gspo", "gspo_token"])
def test_gspo_one_token_responses_equal_token_ppo(name):
    with jax.enable_x64(True):
        lp, olp, A, m = make_batch(17, B=12, T=1, empty_row=False, extreme=False)
        olp = lp + np.random.default_rng(2).normal(scale=6e-4, size=lp.shape)
        hp = losses.GSPOHParams(clip_low=3e-4, clip_high=4e-4)
        loss, _, g = run(name, hp, base_kw(lp, olp, A, m), m)
        ppo_hp = losses.PPOHParams(clip_low=3e-4, clip_high=4e-4, clip_c=None)
        want, _, want_g = run("dapo", ppo_hp, base_kw(lp, olp, A, m), m)
        np.testing.assert_allclose(loss, want, **TIGHT)
        np.testing.assert_allclose(g, want_g, **TIGHT)


# ---------------------------------------------------------------- CTPO
class CTPOTest(chex.TestCase):
    @chex.variants(with_jit=True, without_jit=True)
    @parameterized.named_parameters(
        ("ctpo_cumprod", "ctpo", "cumprod"), ("ctpo_geomean", "ctpo", "geomean"),
        ("la_cumprod", "ctpo_la", "cumprod"), ("la_geomean", "ctpo_la", "geomean"))
    def test_matches_reference(self, name, cum_mode):
        with jax.enable_x64(True):
            lp, olp, A, m = make_batch(18, B=5, T=9)
            olp = lp + np.random.default_rng(3).normal(scale=0.06, size=lp.shape)
            olp[0, 0] = lp[0, 0] - 25.0  # clamp at 20, then the cap at 10 for the whole row
            la = name == "ctpo_la"
            hp = (losses.CTPOLAHParams(cum_mode=cum_mode) if la
                  else losses.CTPOHParams(cum_mode=cum_mode))
            dens = losses.agg_denominators(m)
            spec = losses.get(name)

            def f(x):
                out = spec(losses.LossInputs.create(x, olp, A, m), hp, denominators=dens)
                return out.loss, out

            (loss, out) = self.variant(f)(jnp.asarray(lp))
            g = self.variant(jax.grad(lambda x: f(x)[0]))(jnp.asarray(lp))
            geo = cum_mode == "geomean"
            want = lambda x: ref_ctpo(x, olp, A, m, la=la, geomean=geo, lp_sg=lp)
            np.testing.assert_allclose(loss, want(lp), **TIGHT)
            np.testing.assert_allclose(g, fd_grad(want, lp), **FD)
            clipfrac = float(losses.finalize_metrics(out)["pg_clipfrac"])
            assert 0 < clipfrac < 1


@pytest.mark.parametrize("name", ["ctpo", "ctpo_la"])
def test_ctpo_position_one_equals_token_ppo(name):
    with jax.enable_x64(True):
        lp, olp, A, m = make_batch(19, B=16, T=1, empty_row=False, extreme=False)
        olp = lp + np.random.default_rng(4).normal(scale=0.08, size=lp.shape)
        olp[:4] = lp[:4] - 2.0  # A>0 clipped above; A<0 dual-clipped
        if name == "ctpo":
            hp, ppo_hp = losses.CTPOHParams(), losses.PPOHParams()
        else:
            hp = losses.CTPOLAHParams()
            ppo_hp = losses.PPOHParams(clip_low=1 - math.exp(-0.025), clip_high=math.exp(0.05) - 1,
                                       clip_c=math.exp(0.05))
        loss, _, g = run(name, hp, base_kw(lp, olp, A, m), m)
        want, _, want_g = run("dapo", ppo_hp, base_kw(lp, olp, A, m), m)
        np.testing.assert_allclose(loss, want, **TIGHT)
        np.testing.assert_allclose(g, want_g, **TIGHT)


# ---------------------------------------------------------------- SIS
def _sis_inputs(seed, lp, olp, K=4):
    rng = np.random.default_rng(seed)
    topk_old = np.log(rng.dirichlet(np.ones(K), size=lp.shape))
    topk_cur = topk_old + rng.normal(scale=0.3, size=topk_old.shape)
    in_topk = (rng.uniform(size=lp.shape) < 0.7).astype(np.float64)
    u = rng.uniform(size=lp.shape)
    return dict(topk_old_logp_BTK=topk_old, topk_cur_logp_BTK=topk_cur, target_in_topk_BT=in_topk,
                uniforms_BT=u)


@pytest.mark.parametrize("base,scope", [("ppo", "all"), ("ppo", "seed"), ("gspo", "all")])
def test_sis_matches_reference(base, scope):
    with jax.enable_x64(True):
        lp, olp, A, m = make_batch(20)
        if base == "gspo":
            olp = lp + np.random.default_rng(5).normal(scale=3e-4, size=lp.shape)
        sis = _sis_inputs(6, lp, olp)
        seed = np.zeros_like(m)
        seed[:, :4] = 1.0
        accept = ref_sis_accept(lp, olp, sis["topk_old_logp_BTK"], sis["topk_cur_logp_BTK"],
                                sis["target_in_topk_BT"], sis["uniforms_BT"]) & (m > 0)
        if scope == "seed":
            accept &= seed > 0
        assert 0 < accept.sum() < (m > 0).sum()
        hp = losses.SISHParams(base=losses.GSPOHParams() if base == "gspo" else losses.PPOHParams(),
                               scope=scope)
        loss, metrics, g = run("sis", hp, base_kw(lp, olp, A, m, seed_mask_BT=seed, **sis), m)
        want = lambda x: ref_sis(x, olp, A, m, accept, base=base, lp_sg=lp)
        np.testing.assert_allclose(loss, want(lp), **TIGHT)
        np.testing.assert_allclose(g, fd_grad(want, lp), **FD)
        np.testing.assert_allclose(metrics["sis_accept_frac"], accept.sum() / m.sum(), **TIGHT)


def test_sis_accept_all_gives_unit_ratio_and_reject_all_gives_base():
    with jax.enable_x64(True):
        lp, olp, A, m = make_batch(21)
        sis = _sis_inputs(7, lp, olp)
        sis["target_in_topk_BT"] = np.ones_like(m)
        sis["uniforms_BT"] = np.zeros_like(m)  # u = 0 < any positive acceptance probability
        loss, metrics, g = run("sis", losses.SISHParams(), base_kw(lp, olp, A, m, **sis), m)
        A_BT = np.broadcast_to(A[:, None], m.shape)
        np.testing.assert_allclose(loss, -(A_BT * m).sum() / m.sum(), **TIGHT)  # ratio 1 everywhere
        np.testing.assert_allclose(g, -A_BT * m / m.sum(), **TIGHT)  # gradient of log π
        assert float(metrics["sis_accept_frac"]) == 1.0
        sis["target_in_topk_BT"] = np.zeros_like(m)
        for base, name in ((losses.PPOHParams(), "dapo"), (losses.GSPOHParams(), "gspo_token")):
            loss, _, g = run("sis", losses.SISHParams(base=base), base_kw(lp, olp, A, m, **sis), m)
            want, _, want_g = run(name, base, base_kw(lp, olp, A, m), m)
            np.testing.assert_allclose(loss, want, **TIGHT)
            np.testing.assert_allclose(g, want_g, **TIGHT)


# ---------------------------------------------------------------- STARE
@pytest.mark.parametrize("variant", ["o1", "c2"])
def test_stare_matches_reference(variant):
    with jax.enable_x64(True):
        lp, olp, A, m = make_batch(22, B=8, T=9)
        hp = losses.STAREHParams(variant=variant, pos_weight=1.3, neg_weight=0.6)
        kw = base_kw(lp, olp, A, m, entropy_mean=np.float64(0.1))
        loss, metrics, g = run("stare", hp, kw, m)
        omega = ref_stare_weights(lp, A, m, gate_on=True, W=1.3, M=0.6, c2=variant == "c2")
        assert (omega != 1).sum() >= 2
        want = lambda x: ref_stare(x, olp, A, m, omega)
        np.testing.assert_allclose(loss, want(lp), **TIGHT)
        np.testing.assert_allclose(g, fd_grad(want, lp), **FD)
        np.testing.assert_allclose(metrics["stare_reweighted_frac"],
                                   ((omega != 1) * m).sum() / m.sum(), **TIGHT)


@pytest.mark.parametrize("n,p,k", [(30, 0.1, 3), (31, 0.1, 4), (5, 0.1, 1), (0, 0.1, 0),
                                   (7, 1.0, 7), (40, 0.15, 6)])
def test_stare_top_fraction_count(n, p, k):
    from tseeds_jax.rl.losses.stare import top_fraction

    score = np.random.default_rng(n).permutation(64).astype(np.float32).reshape(4, 16)
    member = np.zeros(64, bool)
    member[np.random.default_rng(1).permutation(64)[:n]] = True
    member = member.reshape(4, 16)
    with jax.enable_x64(True):  # float64 would expose a float ⌈0.1·30⌉ = 4
        sel = np.asarray(top_fraction(jnp.asarray(score), jnp.asarray(member), p))
    assert sel.sum() == k and not np.any(sel & ~member)
    if k:
        assert score[sel].min() > score[member & ~sel].max(initial=-1)


def test_stare_gate_off_equals_dapo_and_controller():
    lp, olp, A, m = make_batch(23)
    hp = losses.STAREHParams()
    loss, _, g = run("stare", hp, base_kw(lp, olp, A, m, entropy_mean=np.float32(0.5)), m)
    want, _, want_g = run("dapo", losses.PPOHParams(), base_kw(lp, olp, A, m), m)
    np.testing.assert_array_equal(loss, want)
    np.testing.assert_array_equal(g, want_g)
    state = losses.stare_initial_state(hp)
    up = losses.stare_controller_update(state, 0.1, hp)  # entropy below target: W up, M down
    np.testing.assert_allclose([up.pos_weight, up.neg_weight], [1.11, 0.89], rtol=1e-6)
    for _ in range(100):
        up = losses.stare_controller_update(up, 0.1, hp)
    np.testing.assert_allclose([up.pos_weight, up.neg_weight], [1.5, 0.5], rtol=1e-6)
    down = losses.stare_controller_update(state, 0.9, hp)
    np.testing.assert_allclose([down.pos_weight, down.neg_weight], [1.09, 0.91], rtol=1e-6)


# ---------------------------------------------------------------- every registered loss
def _full_inputs(seed=24, B=9, T=6):
    lp, olp, A, m = make_batch(seed, B=B, T=T)
    m[3:6] = 0.0  # a micro-batch with no valid token
    seed_mask = np.zeros_like(m)
    seed_mask[:, :2] = 1.0
    kw = base_kw(lp, olp, A, m, seed_mask_BT=seed_mask, **_sis_inputs(seed, lp, olp),
                 entropy_BT=np.random.default_rng(seed).uniform(size=m.shape))
    return {k: np.asarray(v, np.float32) for k, v in kw.items()}


@pytest.mark.parametrize("name", sorted(set(losses.names()) - {"dapo", "grpo"}))
def test_micro_batches_exact_for_every_loss(name):
    kw = _full_inputs()
    m = kw["mask_BT"]
    spec = losses.get(name)
    hp = spec.default_hparams
    dens = losses.agg_denominators(m)
    # Batch-level selections are computed once over the whole mini-batch (the documented contract).
    if name == "m2po":
        keep_fn = jax.jit(losses.m2po_keep_mask, static_argnums=4)
        kw["selection_BT"] = np.asarray(keep_fn(
            kw["logp_BT"], kw["old_logp_BT"], np.broadcast_to(kw["advantages"][:, None], m.shape),
            m, hp.tau)[0], np.float32)
    if name == "stare":
        weight_fn = jax.jit(losses.stare_token_weights, static_argnums=3)
        kw["selection_BT"] = np.asarray(weight_fn(
            kw["logp_BT"], np.broadcast_to(kw["advantages"][:, None], m.shape), m, hp,
            entropy_mean=0.0))

    @jax.jit
    def f(lp, rest):
        def loss(x):
            inputs = losses.LossInputs.create(x, advantages=rest.pop("advantages"), **rest)
            out = spec(inputs, hp, denominators=dens)
            return out.loss, out
        return jax.grad(loss, has_aux=True)(lp)

    rest = {k: v for k, v in kw.items() if k != "logp_BT"}
    g_full, full = f(kw["logp_BT"], rest)
    parts, grads = [], []
    for rows in np.split(np.arange(9), 3):
        g, out = f(kw["logp_BT"][rows], {k: v[rows] for k, v in rest.items()})
        parts.append(out)
        grads.append(g)
    merged = losses.merge_outputs(*parts)
    assert np.isfinite(float(full.loss)) and np.all(np.isfinite(g_full))
    np.testing.assert_allclose(merged.loss, full.loss, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(np.concatenate(grads), g_full, rtol=1e-6, atol=1e-8)
    fm, mm = losses.finalize_metrics(full), losses.finalize_metrics(merged)
    assert {"pg_loss", "pg_clipfrac", "pg_clipfrac_lower", "ppo_kl"} <= set(fm)
    for k in fm:
        np.testing.assert_allclose(mm[k], fm[k], rtol=1e-6, atol=1e-7, err_msg=k)
    # An all-masked call is 0, with zero (not NaN) gradients.
    zero_rest = dict(rest, mask_BT=np.zeros_like(m))
    g0, out0 = f(kw["logp_BT"], zero_rest)
    assert float(out0.loss) == 0.0 and np.all(np.asarray(g0) == 0.0)


def test_family_validation():
    lp, olp, A, m = make_batch(25)
    dens = losses.agg_denominators(m)
    plain = losses.LossInputs.create(lp, olp, A, m)
    with pytest.raises(ValueError, match="luffy: LossInputs.seed_mask_BT is required"):
        losses.get("luffy")(plain, denominators=dens)
    with pytest.raises(ValueError, match="sis: LossInputs.topk_old_logp_BTK is required"):
        losses.get("sis")(plain, denominators=dens)
    with pytest.raises(ValueError, match="stare: LossInputs.entropy_mean is required"):
        losses.get("stare")(plain, denominators=dens)
    with pytest.raises(ValueError, match="topk_cur_logp_BTK must have shape"):
        losses.LossInputs.create(lp, olp, A, m, topk_cur_logp_BTK=np.zeros((2, 2, 3)))
    with pytest.raises(ValueError, match="cum_mode='sum'"):
        losses.CTPOLAHParams(cum_mode="sum")
    with pytest.raises(ValueError, match="top_p_ratio must be in"):
        losses.STAREHParams(top_p_ratio=0.0)
    with pytest.raises(TypeError, match="SISHParams.base must be"):
        losses.SISHParams(base=losses.M2POHParams())
    assert dataclasses.replace(losses.get("gspo").default_hparams).clip_high == 4e-4
