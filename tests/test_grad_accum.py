"""`optim.grad_reduce = "update"` (rl/learn/grad_accum.py): per-shard unreduced gradients summed once per
update give the same update as reducing every micro-step, and move fewer gradient bytes.

On the 8 emulated CPU devices; the TPU compiler's side is tests/test_grad_accum_tpu.py."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from tseeds_jax.model import ModelConfig, init_model
from tseeds_jax.model import sharding as sh
from tseeds_jax.rl.config import LossConfig, OptimConfig
from tseeds_jax.rl.learn import batch as batch_lib
from tseeds_jax.rl.learn import grad_accum
from tseeds_jax.rl.learn.batch import LearnerBatch
from tseeds_jax.rl.learn.learner import Learner
from tseeds_jax.scale.hlo_cost import hlo_cost

P, R, B, V = 4, 6, 16, 16
OCFG = OptimConfig(lr=1e-2, warmup_steps=0, weight_decay=0.0, b1=0.9, b2=0.999, eps=1e-3,
                   grad_clip=1e9, mini_batches=1, epochs=1, micro_batch_size=8,
                   old_logp="recompute", train_layers="all")


def _lcfg(name, agg="token-mean", **params):
    return LossConfig(name=name, clip_low=None, clip_high=None, clip_c=10.0, agg_mode=agg,
                      entropy_coef=0.0, kl_coef=0.0, kl_type="k3", params=params)


def _model():
    cfg = ModelConfig(model_type="qwen2", vocab_size=V, hidden_size=16, intermediate_size=32,
                      num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2)
    graphdef, params = nnx.split(init_model(cfg, seed=5))
    return graphdef, jax.tree_util.tree_map(np.asarray, params)


def _batch(rng, n=B):
    tokens = rng.integers(1, V, (n, P + R)).astype(np.int32)
    attn = np.ones((n, P + R), np.int32)
    attn[1, :2] = 0  # a left-padded prompt
    resp = np.ones((n, R), np.float32)
    resp[3, 4:] = 0  # a short response
    attn[3, P + 4:] = 0
    seed = np.zeros((n, R), np.float32)
    seed[:6, :2] = 1
    zeros = np.zeros((n, R), np.float32)
    return LearnerBatch(tokens_BT=tokens, attn_mask_BT=attn, resp_mask_BR=resp,
                        seed_mask_BR=seed,
                        behavior_logp_BR=rng.normal(-2.0, 0.5, (n, R)).astype(np.float32),
                        sampler_logp_BR=zeros,
                        old_logp_BR=rng.normal(-2.5, 1.0, (n, R)).astype(np.float32),
                        ref_logp_BR=zeros, advantages_B=rng.normal(0, 1, (n,)).astype(np.float32))


def _learner(lcfg, mesh, mode, ocfg=OCFG, rows=B):
    graphdef, params = _model()
    params = jax.device_put(params, sh.param_shardings(params, mesh))
    learner = Learner(graphdef, params, lcfg, dataclasses.replace(ocfg, grad_reduce=mode),
                      variant="state+action", old_logp_mode="recompute", kernel_impl="chunked",
                      mesh=mesh)
    return learner, params


def _update(lcfg, mesh, mode, batch, ocfg=OCFG):
    learner, params = _learner(lcfg, mesh, mode, ocfg)
    state, metrics = learner.update(learner.init_state(params), batch)
    return [np.asarray(x) for x in jax.tree_util.tree_leaves(state.params)], \
        jax.device_get(metrics)


LOSSES = [
    ("dapo", "token-mean", {}),
    ("grpo", "seq-mean-token-mean", {}),
    ("gspo", "seq-mean-token-mean", {}),
    ("luffy", "token-mean", {}),
    ("ctpo", "token-mean", {}),
    ("m2po", "token-mean", {"tau": 0.5}),
    ("stare", "token-mean", {"entropy_target": 100.0, "top_p_ratio": 0.2, "pos_weight": 3.0,
                             "variant": "c2", "neg_weight": 0.2}),
]


@pytest.mark.parametrize("name,agg,params", LOSSES, ids=[x[0] for x in LOSSES])
def test_update_reduction_equals_per_micro_batch_reduction(name, agg, params):
    """Two micro-batches of 8 rows on data x fsdp x tensor = 2 x 2 x 2 (4 shards of 2 rows):
    parameters after one AdamW update and every metric agree with the default path (itself
    tested against independent references in test_learner / test_family_learner). M2PO's and
    STARE's selections are batch-coupled: computed per shard they would differ."""
    mesh = sh.make_mesh({"data": 2, "fsdp": 2, "tensor": 2})
    batch = _batch(np.random.default_rng(1))
    want, m_want = _update(_lcfg(name, agg, **params), mesh, "micro_batch", batch)
    got, m_got = _update(_lcfg(name, agg, **params), mesh, "update", batch)
    for x, y in zip(got, want, strict=True):
        np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)
    assert set(m_got) == set(m_want)
    for key in m_want:
        np.testing.assert_allclose(m_got[key], m_want[key], rtol=1e-5, atol=1e-6,
                                   equal_nan=True, err_msg=key)


def test_one_row_per_shard_and_single_micro_batch_stare_gate():
    """fsdp 8 with micro-batches of 8 rows (one row per shard, as the r1 config has), and a
    single micro-batch per update, where STARE's gate otherwise reads the loss's own forward."""
    mesh = sh.make_mesh({"data": 1, "fsdp": 8, "tensor": 1})
    batch = _batch(np.random.default_rng(2))
    lcfg = _lcfg("stare", **dict(LOSSES[-1][2]))
    for ocfg in (OCFG, dataclasses.replace(OCFG, micro_batch_size=0)):
        want, m_want = _update(lcfg, mesh, "micro_batch", batch, ocfg)
        got, m_got = _update(lcfg, mesh, "update", batch, ocfg)
        for x, y in zip(got, want, strict=True):
            np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(m_got["stare_entropy_mean"], m_want["stare_entropy_mean"],
                                   rtol=1e-5)
        assert 0 < m_want["stare_reweighted_frac"] < 1


def test_no_batch_axis_falls_back_to_the_default_accumulation():
    """One device, or rows that do not split over the batch axes: nothing to keep unreduced."""
    graphdef, params = _model()
    one = sh.make_mesh({"data": 1, "fsdp": 1, "tensor": 1}, devices=jax.devices()[:1])
    p1 = jax.device_put(params, sh.param_shardings(params, one))
    assert not grad_accum.ShardedAccumulator(p1, 8, jnp.float32).active
    mesh = sh.make_mesh({"data": 1, "fsdp": 8, "tensor": 1})
    p8 = jax.device_put(params, sh.param_shardings(params, mesh))

    def probe(p):  # traced: the mesh is read from the parameters' avals
        acc = grad_accum.ShardedAccumulator(p, 6, jnp.float32)
        assert acc.axes == () and not acc.active
        acc = grad_accum.ShardedAccumulator(p, 16, jnp.float32)
        assert acc.axes == ("fsdp",) and acc.n == 8
        return jax.tree_util.tree_leaves(p)[0]

    jax.jit(probe)(p8)


def test_an_unknown_mode_is_refused_by_name():
    from tseeds_jax.rl.config import TrainConfig, tiny_config

    cd = tiny_config()
    cd.optim.grad_reduce = "sometimes"
    with pytest.raises(ValueError, match=r"optim\.grad_reduce.*sometimes.*micro_batch"):
        TrainConfig.from_config(cd)


def _collective_bytes(mode, n_micro, rows=32):
    mesh = sh.make_mesh({"data": 2, "fsdp": 4, "tensor": 1})
    ocfg = dataclasses.replace(OCFG, micro_batch_size=rows // n_micro)
    learner, params = _learner(_lcfg("dapo"), mesh, mode, ocfg, rows)
    batch = batch_lib.shard_batch(_batch(np.random.default_rng(3), rows), mesh)
    state = learner.init_state(params)
    text = learner.update_pass.lower(state, batch, jax.random.PRNGKey(0), None).compile().as_text()
    cost = hlo_cost(text, num_devices=8)
    return {k: cost.collective_bytes.get(k, 0.0) for k in ("all-reduce", "reduce-scatter")}


def test_gradients_are_reduced_once_per_update():
    """XLA:CPU's program, counted loop by loop (`hlo_cost`): with 4 micro-steps the default path
    all-reduces every weight gradient in each of them; "update" reduce-scatters them once.
    The weight matrices alone are 2 layers x (4 x 16 x 16 + 3 x 16 x 32) + 2 x 16 x 16 float32
    = 22,528 B (biases and norms besides)."""
    micro = _collective_bytes("micro_batch", 4)
    once = _collective_bytes("update", 4)
    grad_bytes = 4 * (2 * (4 * 16 * 16 + 3 * 16 * 32) + 2 * V * 16)
    # Four micro-steps of full-size all-reduces (2 x 7/8 of the gradients each) at least.
    assert micro["all-reduce"] >= 4 * 2 * 7 / 8 * grad_bytes * 0.9
    assert once["reduce-scatter"] > 0
    assert once["all-reduce"] + once["reduce-scatter"] <= 0.25 * micro["all-reduce"]
