"""Learner-level exactness of the loss family: whole-mini-batch selections and SIS under
micro-batching, and the STARE gate's entropy from the pre-update pass."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from tseeds_jax.model import ModelConfig, init_model
from tseeds_jax.rl import losses
from tseeds_jax.rl.config import LossConfig, OptimConfig
from tseeds_jax.rl.learn.batch import LearnerBatch
from tseeds_jax.rl.learn.learner import Learner

P, R, B, V = 4, 6, 8, 13
OCFG = OptimConfig(lr=1e-2, warmup_steps=0, weight_decay=0.0, b1=0.9, b2=0.999, eps=1e-3,
                   grad_clip=1e9, mini_batches=1, epochs=1, micro_batch_size=0,
                   old_logp="recompute", train_layers="all")


def _lcfg(name, **params):
    return LossConfig(name=name, clip_low=None, clip_high=None, clip_c=10.0,
                      agg_mode="token-mean", entropy_coef=0.0, kl_coef=0.0, kl_type="k3",
                      params=params)


def _model():
    cfg = ModelConfig(model_type="qwen2", vocab_size=V, hidden_size=16, intermediate_size=32,
                      num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1)
    return nnx.split(init_model(cfg, seed=5))


def _batch(rng, old_shift=1.0):
    tokens = rng.integers(1, V, (B, P + R)).astype(np.int32)
    attn = np.ones((B, P + R), np.int32)
    resp = np.ones((B, R), np.float32)
    resp[3, 4:] = 0
    attn[3, P + 4:] = 0
    zeros = np.zeros((B, R), np.float32)
    old = rng.normal(-2.5, old_shift, (B, R)).astype(np.float32)  # a stale pi_old
    adv = rng.normal(0, 1, (B,)).astype(np.float32)
    return LearnerBatch(tokens_BT=tokens, attn_mask_BT=attn, resp_mask_BR=resp,
                        seed_mask_BR=zeros, behavior_logp_BR=zeros, sampler_logp_BR=zeros,
                        old_logp_BR=old, ref_logp_BR=zeros, advantages_B=adv)


def _learner(lcfg, micro):
    graphdef, params = _model()
    return Learner(graphdef, params, lcfg, dataclasses.replace(OCFG, micro_batch_size=micro),
                   variant="state+action", old_logp_mode="recompute", kernel_impl="chunked")


def _run(learner, batch, **kw):
    state = learner.init_state(_model()[1])
    st, m = learner.update(state, batch, **kw)
    return jax.tree_util.tree_leaves(st.params), jax.device_get(m)


def _close(a, b):
    for x, y in zip(a, b, strict=True):
        np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name,params", [("m2po", {"tau": 0.5}),
                                         ("stare", {"entropy_target": 100.0, "top_p_ratio": 0.2,
                                                    "pos_weight": 3.0, "variant": "c2",
                                                    "neg_weight": 0.2})])
def test_whole_minibatch_selection_is_exact_under_micro_batching(name, params):
    batch = _batch(np.random.default_rng(0))
    learner = _learner(_lcfg(name, **params), 0)
    whole, m_whole = _run(learner, batch)
    split, m_split = _run(_learner(_lcfg(name, **params), 2), batch)  # 4 micro-batches of 2
    _close(whole, split)
    np.testing.assert_allclose(m_split["loss"], m_whole["loss"], rtol=1e-5, atol=1e-7)
    # The selection is non-trivial here, and per-micro-batch selection would differ.
    b = jax.tree_util.tree_map(jnp.asarray, batch)
    lp, ent = learner.stats(_model()[1], batch.tokens_BT, batch.attn_mask_BT, R)
    lp = jnp.asarray(lp)
    adv = jnp.broadcast_to(b.advantages_B[:, None], lp.shape)
    if name == "m2po":
        assert 0 < m_whole["m2po_masked_frac"] < 1
        sel = lambda rows: losses.m2po_keep_mask(lp[rows], b.old_logp_BR[rows], adv[rows],  # noqa
                                                 b.resp_mask_BR[rows], 0.5)[0]
    else:
        assert m_whole["stare_gate_on"] == 1.0 and 0 < m_whole["stare_reweighted_frac"] < 1
        # The gate's entropy: the batch token mean of the pre-update pass, whether it came from
        # the loss's own forward (one micro-batch) or from the no-grad pre-pass (micro-batches).
        want = float(np.sum(ent * batch.resp_mask_BR) / np.sum(batch.resp_mask_BR))
        np.testing.assert_allclose(m_whole["stare_entropy_mean"], want, rtol=1e-5)
        np.testing.assert_allclose(m_split["stare_entropy_mean"], want, rtol=1e-5)
        sel = lambda rows: losses.stare_token_weights(  # noqa: E731
            lp[rows], adv[rows], b.resp_mask_BR[rows], learner.hparams, entropy_mean=0.0)
    full = np.asarray(sel(slice(0, B)))
    parts = np.concatenate([np.asarray(sel(slice(i, i + 2))) for i in range(0, B, 2)])
    assert not np.array_equal(full, parts)


def test_sis_uniforms_and_proposals_do_not_depend_on_micro_batching():
    rng = np.random.default_rng(2)
    batch = _batch(rng, old_shift=0.3)
    graphdef, params = _model()
    k = 4
    lcfg = _lcfg("sis", base="dapo", top_k=k)
    learner = _learner(lcfg, 0)
    ids, lp = learner.topk(params, batch.tokens_BT, batch.attn_mask_BT, R)
    # pi_old = the current parameters shifted: top-K ids of the current policy, proposal log-probs
    # perturbed so the envelope test rejects some tokens.
    batch = batch.replace(old_logp_BR=learner.stats(params, batch.tokens_BT, batch.attn_mask_BT,
                                                    R)[0] + rng.normal(0, 0.3, (B, R)),
                          topk_ids_BRK=ids, topk_logp_BRK=lp + rng.normal(0, 0.3, lp.shape),
                          topk_valid_BR=batch.resp_mask_BR.copy())
    key = jax.random.PRNGKey(7)
    whole, m0 = _run(learner, batch, rng=key)
    split, m1 = _run(_learner(lcfg, 2), batch, rng=key)
    _close(whole, split)
    assert m0["sis_accept_frac"] == m1["sis_accept_frac"]
    assert 0 < m0["sis_accept_frac"] < m0["sis_in_topk_frac"]
    _, m_other = _run(learner, batch, rng=jax.random.PRNGKey(8))
    assert m_other["sis_accept_frac"] != m0["sis_accept_frac"] or m_other["loss"] != m0["loss"]
