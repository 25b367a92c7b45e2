"""The learner step against an independent reference (naive logits, DAPO formula, optax AdamW)."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from tseeds_jax.model import ModelConfig, init_model
from tseeds_jax.rl.config import LossConfig, OptimConfig
from tseeds_jax.rl.learn.batch import LearnerBatch
from tseeds_jax.rl.learn.learner import Learner

P, R, B = 5, 7, 4
LCFG = LossConfig(name="dapo", clip_low=0.2, clip_high=0.28, clip_c=10.0, agg_mode="token-mean",
                  entropy_coef=0.0, kl_coef=0.0, kl_type="k3")
# eps=1e-3: Adam's first step is ~lr*sign(g) for |g| << eps-free scale, which would amplify
# float32 rounding of near-zero gradient entries; a large eps keeps the update smooth in g.
OCFG = OptimConfig(lr=1e-2, warmup_steps=0, weight_decay=0.0, b1=0.9, b2=0.999, eps=1e-3,
                   grad_clip=1e9, mini_batches=1, epochs=1, micro_batch_size=0, old_logp="auto",
                   train_layers="all")


def _model():
    cfg = ModelConfig(model_type="qwen2", vocab_size=13, hidden_size=16, intermediate_size=32,
                      num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1)
    return nnx.split(init_model(cfg, seed=3))


def _batch(rng, seed_lens, behavior_shift=0.0):
    tokens = rng.integers(4, 13, (B, P + R)).astype(np.int32)
    attn = np.ones((B, P + R), np.int32)
    attn[1, :2] = 0  # left padding in the prompt
    resp = np.ones((B, R), np.float32)
    resp[2, 5:] = 0  # a short response
    attn[2, P + 5:] = 0
    seed = np.zeros((B, R), np.float32)
    for i, h in enumerate(seed_lens):
        seed[i, :h] = 1
    blogp = (rng.normal(-2.0, 0.5, (B, R)) + behavior_shift).astype(np.float32)
    adv = rng.normal(0, 1, (B,)).astype(np.float32)
    zeros = np.zeros((B, R), np.float32)
    return LearnerBatch(tokens_BT=tokens, attn_mask_BT=attn, resp_mask_BR=resp, seed_mask_BR=seed,
                        behavior_logp_BR=blogp, sampler_logp_BR=zeros, old_logp_BR=zeros,
                        ref_logp_BR=zeros, advantages_B=adv)


def _reference_loss(graphdef, params, b: LearnerBatch, variant):
    """Token-mean DAPO loss from naive logits; seed ratio vs pi_b, continuation ratio exactly 1."""
    model = nnx.merge(graphdef, params)
    logits = model(jnp.asarray(b.tokens_BT), attn_mask_BT=jnp.asarray(b.attn_mask_BT))
    logp_all = jax.nn.log_softmax(logits[:, P - 1 : P + R - 1], axis=-1)
    logp = jnp.take_along_axis(logp_all, jnp.asarray(b.tokens_BT[:, P:])[..., None], -1)[..., 0]
    seed = jnp.asarray(b.seed_mask_BR) * jnp.asarray(b.resp_mask_BR)
    old = jnp.where(seed > 0, jnp.asarray(b.behavior_logp_BR), jax.lax.stop_gradient(logp))
    ratio = jnp.exp(jnp.clip(logp - old, -20, 20))
    a = jnp.asarray(b.advantages_B)[:, None]
    l1, l2 = -a * ratio, -a * jnp.clip(ratio, 0.8, 1.28)
    lc = jnp.maximum(l1, l2)
    tok = jnp.where(a < 0, jnp.minimum(-a * 10.0, lc), lc)
    mask = jnp.asarray(b.resp_mask_BR) * ((1 - seed) if variant == "state" else 1.0)
    return jnp.sum(tok * mask) / jnp.sum(mask), (ratio, seed)


@pytest.mark.parametrize("variant", ["state+action", "state"])
def test_update_matches_reference_adamw_step(variant):
    graphdef, params = _model()
    batch = _batch(np.random.default_rng(0), [3, 0, 2, 7])
    learner = Learner(graphdef, params, LCFG, OCFG, variant=variant, old_logp_mode="auto",
                      kernel_impl="chunked")
    state = learner.init_state(jax.tree_util.tree_map(jnp.copy, params))
    new_state, metrics = learner.update(state, batch)

    (ref_loss, (ratio, seed)), grads = jax.value_and_grad(
        lambda p: _reference_loss(graphdef, p, batch, variant), has_aux=True)(params)
    tx = optax.adamw(OCFG.lr, b1=0.9, b2=0.999, eps=OCFG.eps, weight_decay=0.0)
    updates, _ = tx.update(grads, tx.init(params), params)
    expected = optax.apply_updates(params, updates)
    np.testing.assert_allclose(metrics["loss"], ref_loss, rtol=1e-5, atol=1e-7)
    for got, want in zip(jax.tree_util.tree_leaves(new_state.params),
                         jax.tree_util.tree_leaves(expected), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    # Diagnostics: the seed ratio is pi_theta / pi_b (not 1), continuation ratios are exactly 1.
    want_seed_ratio = float(jnp.sum(ratio * seed) / jnp.sum(seed))
    np.testing.assert_allclose(metrics["ratio_mean/seed"], want_seed_ratio, rtol=1e-5)
    assert abs(want_seed_ratio - 1.0) > 1e-3
    assert metrics["ratio_mean/cont"] == 1.0


def _grads(learner, params, batch):
    from tseeds_jax.rl import losses

    b = jax.tree_util.tree_map(jnp.asarray, batch)
    mask = losses.seed_loss_mask(b.resp_mask_BR, b.seed_mask_BR * b.resp_mask_BR, learner.variant)
    dens = losses.agg_denominators(mask)
    return jax.grad(learner._micro_loss, has_aux=True)(params, b, dens, jnp.float32(1))[0]


def test_state_variant_seed_tokens_contribute_exactly_zero_gradient():
    graphdef, params = _model()
    rng = np.random.default_rng(1)
    batch = _batch(rng, [3, 1, 2, 6])
    # Same sequences, different behavior log-probs and advantages' effect on seed tokens only.
    other = dataclasses.replace(batch, behavior_logp_BR=batch.behavior_logp_BR - 3.0)
    for variant, must_equal in (("state", True), ("state+action", False)):
        learner = Learner(graphdef, params, LCFG, OCFG, variant=variant, old_logp_mode="auto")
        g1, g2 = _grads(learner, params, batch), _grads(learner, params, other)
        same = all(np.array_equal(x, y) for x, y in zip(jax.tree_util.tree_leaves(g1),
                                                        jax.tree_util.tree_leaves(g2)))
        assert same is must_equal, variant


def test_micro_batches_and_mini_batches_are_exact():
    graphdef, params = _model()
    batch = _batch(np.random.default_rng(2), [2, 0, 4, 1])
    outs = []
    for micro in (0, 1, 2):
        ocfg = dataclasses.replace(OCFG, micro_batch_size=micro)
        learner = Learner(graphdef, params, LCFG, ocfg, variant="state+action",
                          old_logp_mode="auto")
        st, m = learner.update(learner.init_state(jax.tree_util.tree_map(jnp.copy, params)), batch)
        outs.append((st.params, float(m["loss"])))
    for p, loss in outs[1:]:
        np.testing.assert_allclose(loss, outs[0][1], rtol=1e-6, atol=1e-7)
        for x, y in zip(jax.tree_util.tree_leaves(p), jax.tree_util.tree_leaves(outs[0][0])):
            np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)
