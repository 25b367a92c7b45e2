"""The learner of a LoRA run (rl/learn/adapters.py, rl/learn/learner.py): the train state holds
the adapters and their optimizer state only, the frozen base is an argument of the jitted
functions; sharded over 8 devices and with micro-batches (both gradient reductions).

References: the same update computed the pre-LoRA way, every parameter in the train state and an
optimizer that zeroes the base's updates (`optax.multi_transform`); the base's log-probs (the
reference policy) from a plain model with the same weights. Tolerance: float32, 1e-5 of the
largest magnitude (conventions), `jax_default_matmul_precision=highest` (conftest).
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from tseeds_jax.model import ModelConfig, init_model, lora
from tseeds_jax.model import sharding as sh
from tseeds_jax.rl.config import LossConfig, OptimConfig
from tseeds_jax.rl.learn import adapters as adapters_lib
from tseeds_jax.rl.learn.batch import LearnerBatch
from tseeds_jax.rl.learn.learner import Learner, make_optimizer

P, R, B, V = 4, 6, 16, 32
CFG = ModelConfig(model_type="qwen2", vocab_size=V, hidden_size=16, intermediate_size=32,
                  num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2)
LORA = lora.LoraConfig(rank=4, alpha=8.0)
LCFG = LossConfig(name="dapo", clip_low=None, clip_high=None, clip_c=10.0,
                  agg_mode="token-mean", entropy_coef=0.0, kl_coef=0.0, kl_type="k3", params={})
OCFG = OptimConfig(lr=1e-2, warmup_steps=0, weight_decay=0.0, b1=0.9, b2=0.999, eps=1e-3,
                   grad_clip=1.0, mini_batches=2, epochs=1, micro_batch_size=0,
                   old_logp="recompute", train_layers="all")
REL = 1e-5


def _close(a, b, rel=REL, what=""):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    assert a.shape == b.shape, what
    err, scale = np.abs(a - b).max(), np.abs(b).max()
    assert err <= rel * max(scale, 1e-30), (what, err, scale)


def _model(random_b=True):
    """An adapted model; B random so that both adapters get gradients from the first update."""
    model = lora.apply_lora(init_model(CFG, 5), LORA, seed=3)
    if random_b:
        rng = np.random.default_rng(1)
        lora.load_adapters(model, jax.tree.map(
            lambda x: rng.normal(0, 0.05, x.shape).astype(np.float32), lora.adapter_params(model)))
    return model


def _batch(seed=0, n=B):
    rng = np.random.default_rng(seed)
    tokens = rng.integers(1, V, (n, P + R)).astype(np.int32)
    attn = np.ones((n, P + R), np.int32)
    attn[1, :2] = 0
    resp = np.ones((n, R), np.float32)
    resp[3, 4:] = 0
    attn[3, P + 4:] = 0
    seed_mask = np.zeros((n, R), np.float32)
    seed_mask[:6, :2] = 1
    zeros = np.zeros((n, R), np.float32)
    return LearnerBatch(tokens_BT=tokens, attn_mask_BT=attn, resp_mask_BR=resp,
                        seed_mask_BR=seed_mask,
                        behavior_logp_BR=rng.normal(-2.0, 0.5, (n, R)).astype(np.float32),
                        sampler_logp_BR=zeros,
                        old_logp_BR=rng.normal(-2.5, 1.0, (n, R)).astype(np.float32),
                        ref_logp_BR=zeros, advantages_B=rng.normal(0, 1, (n,)).astype(np.float32))


def _lora_learner(ocfg=OCFG, mesh=None, frozen_placed=True):
    graphdef, adapters, frozen = adapters_lib.split(_model(), run_seed=0)
    if mesh is not None:
        adapters = jax.device_put(adapters, sh.param_shardings(adapters, mesh))
        if frozen_placed:
            frozen = frozen.placed(*jax.device_put(frozen.states,
                                                   sh.param_shardings(frozen.states, mesh)))
    learner = Learner(graphdef, adapters, LCFG, ocfg, variant="state+action",
                      old_logp_mode="recompute", kernel_impl="chunked", mesh=mesh, frozen=frozen)
    return learner, adapters, frozen


def _masked_reference(ocfg, batch, steps=2):
    """The update the pre-LoRA way: all parameters in the state, the base's updates zeroed."""
    model = _model()
    graphdef, params = nnx.split(model)
    learner = Learner(graphdef, params, LCFG, ocfg, variant="state+action",
                      old_logp_mode="recompute", kernel_impl="chunked")
    labels = jax.tree_util.tree_map_with_path(
        lambda p, _: "train" if any(str(getattr(k, "key", "")) == "lora" for k in p) else "freeze",
        params)
    learner.tx = optax.multi_transform({"train": make_optimizer(ocfg, None),
                                        "freeze": optax.set_to_zero()}, labels)
    state = learner.init_state(params)
    for _ in range(steps):
        state, _ = learner.update(state, batch)
    return nnx.to_pure_dict(nnx.state(nnx.merge(graphdef, state.params), lora.TRAINABLE)), \
        nnx.to_pure_dict(nnx.state(nnx.merge(graphdef, state.params), lora.FROZEN))


def _flat(tree):
    return {jax.tree_util.keystr(p): np.asarray(x)
            for p, x in jax.tree_util.tree_flatten_with_path(tree)[0]}


def test_state_holds_adapters_and_their_optimizer_state_only():
    learner, adapters, frozen = _lora_learner()
    state = learner.init_state(adapters)
    n_adapter = sum(x.size for x in jax.tree_util.tree_leaves(adapters))
    n_base = sum(x.size for x in jax.tree_util.tree_leaves(frozen.base))
    assert n_adapter < n_base
    assert sum(x.size for x in jax.tree_util.tree_leaves(state.params)) == n_adapter
    # AdamW: mu and nu per adapter, plus scalar counters; nothing of the base's size
    opt = sum(x.size for x in jax.tree_util.tree_leaves(state.opt_state))
    assert 2 * n_adapter <= opt <= 2 * n_adapter + 8
    paths = {k for k in _flat(state.params)}
    assert paths and all("'lora'" in k for k in paths)


def test_update_equals_the_masked_full_parameter_update():
    """Two batches' updates (2 mini-batches each, pi_old recomputed): adapters as the masked
    full-parameter learner computes them; the base (an argument) is left as it was."""
    batch = _batch()
    learner, adapters, frozen = _lora_learner()
    base_before = _flat(nnx.to_pure_dict(frozen.base))
    state = learner.init_state(adapters)
    for _ in range(2):
        state, metrics = learner.update(state, batch)
    want_ad, want_base = _masked_reference(OCFG, batch)
    got, want = _flat(nnx.to_pure_dict(state.params)), _flat(want_ad)
    assert sorted(got) == sorted(want)
    moved = 0
    for k in want:
        _close(got[k], want[k], what=k)
        moved += not np.array_equal(got[k], _flat(lora.adapter_params(_model()))[k])
    assert moved == len(want)  # every adapter (A and B) was updated
    for k, v in _flat(want_base).items():
        np.testing.assert_array_equal(v, base_before[k], err_msg=k)  # the reference's too
    for k, v in _flat(nnx.to_pure_dict(frozen.base)).items():
        np.testing.assert_array_equal(v, base_before[k], err_msg=k)
    assert int(state.step) == 4 and np.isfinite(metrics["loss"])


def test_reference_pass_is_the_base_without_adapters():
    """The KL reference of a LoRA run: the plain model over the same base arrays."""
    batch = _batch()
    learner, adapters, frozen = _lora_learner()
    got = learner.reference_pass(frozen.base, jnp.asarray(batch.tokens_BT),
                                 jnp.asarray(batch.attn_mask_BT), R)
    plain = lora.strip_lora(_model())
    pgd, pparams = nnx.split(plain)
    ref = Learner(pgd, pparams, LCFG, OCFG, variant="state+action", old_logp_mode="recompute",
                  kernel_impl="chunked")
    want = ref.stats(pparams, batch.tokens_BT, batch.attn_mask_BT, R)
    policy = learner.stats(adapters, batch.tokens_BT, batch.attn_mask_BT, R)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(np.asarray(g), w)
    assert np.abs(policy[0] - want[0]).max() > 1e-3  # the adapters matter (B random)


@pytest.mark.parametrize("grad_reduce", ["micro_batch", "update"])
def test_sharded_micro_batched_update_equals_one_device(grad_reduce):
    """8 devices (data 2 x fsdp 4), micro-batches of 4 rows: the same adapters as one device
    with whole mini-batches; adapters laid out by the rule (A: the weight's input axis, B: its
    output axis, the rank replicated), the base as full training lays it out."""
    batch = _batch()
    mesh = sh.make_mesh(sh.MeshSpec(data=2, fsdp=4, tensor=1))
    ocfg = dataclasses.replace(OCFG, micro_batch_size=4, grad_reduce=grad_reduce)
    learner, adapters, frozen = _lora_learner(ocfg, mesh)
    state = jax.device_put(learner.init_state(adapters),
                           sh.param_shardings(learner.init_state(adapters), mesh))
    for _ in range(2):
        state, _ = learner.update(state, batch)
    one, one_adapters, _ = _lora_learner()
    want = one.init_state(one_adapters)
    for _ in range(2):
        want, _ = one.update(want, batch)
    got_f, want_f = _flat(nnx.to_pure_dict(state.params)), _flat(nnx.to_pure_dict(want.params))
    for k in want_f:
        _close(got_f[k], want_f[k], what=k)
    q = state.params["layers"][0]["attn"]["lora"]["q"]
    assert _spec(q["lora_a"]) == ("fsdp", None)  # [D, R]: embed over fsdp
    assert _spec(q["lora_b"]) == (None, None)  # [R, H E]: heads over tensor (1 here)
    down = state.params["layers"][0]["mlp"]["lora"]["down"]
    assert _spec(down["lora_a"]) == (None, None) and _spec(down["lora_b"]) == (None, "fsdp")
    assert _spec(frozen.base["layers"][0]["attn"]["q"])[0] == "fsdp"


def _spec(x) -> tuple:
    spec = tuple(x.sharding.spec)
    return spec + (None,) * (x.ndim - len(spec))
