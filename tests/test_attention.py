"""The attention entry point (`tseeds_jax.model.attention`) against an independent reference.

Reference: causal GQA attention written from the formula in torch float64 (forward and autograd
gradients), with padded keys invisible. Every implementation is compared on the real query rows
(padded rows are unspecified by contract) for the forward pass and on the gradients of a loss
that reads only real rows. Splash runs in Pallas interpret mode on CPU (small grids: ~1 ms a
step); cuDNN's row rotation runs through `jax.nn.dot_product_attention`'s XLA path (no GPU here).

Tolerances: float32 inputs 1e-5 (relative to the output scale, atol = rtol = 1e-5); bfloat16
inputs 2e-2 absolute on outputs of scale ~1 (the reference gets the same bf16-rounded inputs;
the implementations cast the probabilities to bf16 before the value product, ~2^-8 relative per
term) and 3e-2 on gradients (normalised by their largest entry).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx
from tseeds_jax.kernels.target import compile_target

from tseeds_jax.model import ModelConfig, init_model
from tseeds_jax.model import attention as A
from tseeds_jax.model.config import ATTENTION_IMPLS
from tseeds_jax.model.transformer import KVCache

B, H, K, E = 2, 4, 2, 16


def _inputs(t, dtype, seed=0):
    rng = np.random.default_rng(seed)
    q = rng.normal(size=(B, t, H, E))
    k = rng.normal(size=(B, t, K, E))
    v = rng.normal(size=(B, t, K, E))
    valid = np.ones((B, t), bool)
    valid[0, :5] = False  # a left-padded prompt
    valid[1, t - 9:] = False  # a short response (right padding)
    cast = lambda x: jnp.asarray(x, dtype)
    return cast(q), cast(k), cast(v), jnp.asarray(valid)


def _torch_reference(q, k, v, valid, w_out):
    """float64 out [B, T, H, E] and d(sum(out * w_out over real rows))/d(q, k, v)."""
    f64 = lambda x: torch.tensor(np.asarray(x, np.float64), requires_grad=True)
    tq, tk, tv = f64(q.astype(jnp.float32)), f64(k.astype(jnp.float32)), f64(v.astype(jnp.float32))
    t = q.shape[1]
    g = H // K
    kk = tk.repeat_interleave(g, dim=2)  # query head h reads kv head h // g
    vv = tv.repeat_interleave(g, dim=2)
    scores = torch.einsum("bthe,bshe->bhts", tq, kk) / np.sqrt(E)
    val = torch.tensor(np.asarray(valid))
    allowed = torch.tril(torch.ones(t, t, dtype=torch.bool))[None] & val[:, None, :]
    scores = scores.masked_fill(~allowed[:, None], float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    probs = torch.nan_to_num(probs)  # fully masked (padded) rows: not compared
    out = torch.einsum("bhts,bshe->bthe", probs, vv)
    loss = (out * torch.tensor(np.asarray(w_out, np.float64)) * val[:, :, None, None]).sum()
    loss.backward()
    return out.detach().numpy(), tq.grad.numpy(), tk.grad.numpy(), tv.grad.numpy()


IMPLS = {
    "xla": A.attention_xla,
    "chunked": lambda *a: A.attention_chunked(*a, chunk=16),
    "splash": A.attention_splash,
    # 128-row tiles at T = 256: several q/kv blocks, so the causal block skipping is exercised.
    "splash_blocks": lambda *a: A.attention_splash(*a, block=128),
    "cudnn_rotation": lambda *a: A.attention_cudnn(*a, implementation="xla"),
}


def _check(name, t, dtype, out_tol, grad_tol):
    q, k, v, valid = _inputs(t, dtype)
    w_out = np.random.default_rng(1).normal(size=(B, t, H, E))
    ref_out, ref_dq, ref_dk, ref_dv = _torch_reference(q, k, v, valid, w_out)
    fn = IMPLS[name]

    def loss(q, k, v):
        out = fn(q, k, v, valid)
        mask = valid[:, :, None, None].astype(jnp.float32)
        return jnp.sum(out.astype(jnp.float32) * jnp.asarray(w_out, jnp.float32) * mask), out

    (_, out), grads = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2), has_aux=True))(q, k, v)
    assert out.dtype == dtype and out.shape == q.shape
    real = np.asarray(valid)[:, :, None, None]
    got = np.where(real, np.asarray(out, np.float64), 0)
    want = np.where(real, ref_out, 0)
    np.testing.assert_allclose(got, want, atol=out_tol, rtol=out_tol, err_msg=f"{name} forward")
    for g, r, what in zip(grads, (ref_dq, ref_dk, ref_dv), "qkv"):
        g = np.asarray(g, np.float64)
        scale = np.abs(r).max()
        np.testing.assert_allclose(g / scale, r / scale, atol=grad_tol, rtol=0,
                                   err_msg=f"{name} d{what}")


@pytest.mark.parametrize("name", sorted(IMPLS))
def test_float32_forward_and_gradients_match_reference(name):
    t = 256 if name == "splash_blocks" else 40
    _check(name, t, jnp.float32, 1e-5, 1e-5)


@pytest.mark.parametrize("name", ["xla", "splash"])
def test_bfloat16_forward_and_gradients_match_reference(name):
    _check(name, 40, jnp.bfloat16, 2e-2, 3e-2)


def test_padded_key_never_reaches_a_real_query():
    """Changing the values at padded positions leaves every real row unchanged (splash)."""
    q, k, v, valid = _inputs(40, jnp.float32)
    noisy_v = jnp.where(valid[:, :, None, None], v, 1e3)
    run = jax.jit(A.attention_splash)
    a, b = run(q, k, v, valid), run(q, k, noisy_v, valid)
    real = np.asarray(valid)[:, :, None, None]
    assert np.all(np.isfinite(np.asarray(b)))
    np.testing.assert_array_equal(np.where(real, a, 0), np.where(real, b, 0))


def test_sharded_splash_matches_reference_on_a_mesh():
    """Under a (data 2, fsdp 2, tensor 2) mesh splash runs per (row, kv-head) shard."""
    mesh = jax.make_mesh((2, 2, 2), ("data", "fsdp", "tensor"))
    q, k, v, valid = _inputs(40, jnp.float32)
    q = jnp.concatenate([q, q[::-1]])  # 4 rows: batch over data x fsdp
    k, v = jnp.concatenate([k, k[::-1]]), jnp.concatenate([v, v[::-1]])
    valid = jnp.concatenate([valid, valid[::-1]])
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    put = lambda x, spec: jax.device_put(x, NamedSharding(mesh, spec))
    qkv = P(("data", "fsdp"), None, "tensor", None)
    args = (put(q, qkv), put(k, qkv), put(v, qkv), put(valid, P(("data", "fsdp"), None)))
    with jax.sharding.use_abstract_mesh(jax.typeof(args[0]).sharding.mesh):
        out = jax.jit(A.attention_splash)(*args)
        hlo = jax.jit(A.attention_splash).lower(*args).as_text()
    assert "shard_map" in hlo or "sdy.manual_computation" in hlo
    ref = A.attention_xla(q, k, v, valid)
    real = np.asarray(valid)[:, :, None, None]
    np.testing.assert_allclose(np.where(real, out, 0), np.where(real, ref, 0), atol=1e-5,
                               rtol=1e-5)


def test_auto_follows_the_target():
    x = jnp.zeros((1, 8, H, E))
    with compile_target("tpu", "v5p"):
        assert A.resolve_impl("auto", 8, x) == "splash"
    with compile_target("gpu"):
        assert A.resolve_impl("auto", 8, x.astype(jnp.bfloat16)) == "cudnn"
        assert A.resolve_impl("auto", 8, x) == "xla"  # cuDNN takes no float32
    with compile_target("cpu"):
        assert A.resolve_impl("auto", A.CHUNKED_MIN_T, x) == "xla"
        assert A.resolve_impl("auto", A.CHUNKED_MIN_T + 1, x) == "chunked"
    assert A.splash_block("v5p", 9216) == 512 and A.splash_block("v4", 9216) == 256
    assert A.splash_block("v6e", 40) == 128


def test_bad_input_names_the_field():
    assert ATTENTION_IMPLS == A.IMPLS
    with pytest.raises(ValueError, match="attention_impl.*'flash'"):
        ModelConfig(attention_impl="flash")
    q, k, v, valid = _inputs(8, jnp.float32)
    with pytest.raises(ValueError, match="attention_impl must be one of"):
        A.causal_attention(q, k, v, valid, impl="flash")
    with pytest.raises(ValueError, match="valid_BT shape"):
        A.causal_attention(q, k, v, valid[:, :4])
    with pytest.raises(ValueError, match="block must be"):
        A.attention_splash(q, k, v, valid, block=100)


def _tiny(impl, layers=2):
    cfg = ModelConfig(model_type="qwen2", vocab_size=32, hidden_size=64, intermediate_size=64,
                      num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                      attention_impl=impl)
    return init_model(cfg, seed=0)


def _jit_call(model, method, *args, **kw):
    graphdef, state = nnx.split(model)

    @jax.jit
    def run(state, *args):
        return getattr(nnx.merge(graphdef, state), method)(*args, **kw)

    return run(state, *args)


@pytest.mark.parametrize("impl", ["xla", "splash"])
def test_empty_cache_prefill_matches_prefill_over_the_cache(impl):
    """The sampler's prefill (`empty_cache=True`, causal kernel) against the cached path."""
    model = _tiny(impl, layers=1)
    tokens = jnp.asarray(np.random.default_rng(3).integers(0, 32, (2, 16)).astype(np.int32))
    lengths = jnp.asarray([16, 11], jnp.int32)
    cache = KVCache.init(model.cfg, 2, 16)
    h_ref, c_ref = _jit_call(model, "hidden", tokens, cache=cache, lengths_B=lengths)
    h, c = _jit_call(model, "hidden", tokens, cache=cache, lengths_B=lengths, empty_cache=True)
    real = (np.arange(16)[None] < np.asarray(lengths)[:, None])[:, :, None]
    np.testing.assert_allclose(np.where(real, h, 0), np.where(real, h_ref, 0), atol=1e-5,
                               rtol=1e-5)
    np.testing.assert_array_equal(c.end_B, c_ref.end_B)
    for a, b in zip(c.k + c.v, c_ref.k + c_ref.v):
        np.testing.assert_allclose(a, b, atol=1e-6, rtol=1e-6)
    with pytest.raises(ValueError, match="empty_cache=True needs a cache of exactly"):
        model.hidden(tokens, cache=KVCache.init(model.cfg, 2, 32), empty_cache=True)


@pytest.mark.slow  # two learner updates per path, splash interpreted (~30 s on 2 cores)
def test_two_training_steps_with_splash_match_the_reference_path():
    from tseeds_jax.rl.config import LossConfig, OptimConfig
    from tseeds_jax.rl.learn.batch import LearnerBatch
    from tseeds_jax.rl.learn.learner import Learner

    lcfg = LossConfig(name="dapo", clip_low=0.2, clip_high=0.28, clip_c=10.0,
                      agg_mode="token-mean", entropy_coef=0.0, kl_coef=0.0, kl_type="k3")
    ocfg = OptimConfig(lr=1e-2, warmup_steps=0, weight_decay=0.0, b1=0.9, b2=0.999, eps=1e-3,
                       grad_clip=1e9, mini_batches=1, epochs=1, micro_batch_size=0,
                       old_logp="auto", train_layers="all")
    rng = np.random.default_rng(4)
    p, r, b = 6, 10, 2
    tokens = rng.integers(0, 32, (b, p + r)).astype(np.int32)
    attn = np.ones((b, p + r), np.int32)
    attn[1, :2] = 0
    attn[0, p + 6:] = 0
    resp = attn[:, p:].astype(np.float32)
    zeros = np.zeros((b, r), np.float32)
    seed = np.zeros((b, r), np.float32)
    seed[:, :4] = 1  # seed tokens: ratio against the behaviour log-probs, so the loss moves
    batch = LearnerBatch(tokens_BT=tokens, attn_mask_BT=attn, resp_mask_BR=resp,
                         seed_mask_BR=seed, behavior_logp_BR=rng.normal(-3, .5, (b, r)).astype(
                             np.float32), sampler_logp_BR=zeros, old_logp_BR=zeros,
                         ref_logp_BR=zeros, advantages_B=rng.normal(0, 1, (b,)).astype(np.float32))
    losses = {}
    for impl in ("xla", "splash"):
        graphdef, params = nnx.split(_tiny(impl, layers=1))
        learner = Learner(graphdef, params, lcfg, ocfg, variant="state+action",
                          old_logp_mode="auto", kernel_impl="chunked")
        state = learner.init_state(params)
        out = []
        for _ in range(2):
            state, metrics = learner.update(state, batch)
            out += [float(metrics["loss"]), float(metrics["grad_norm"])]
        losses[impl] = out
    assert losses["xla"][0] != losses["xla"][2]  # the first step changed the weights
    np.testing.assert_allclose(losses["splash"], losses["xla"], rtol=1e-5, atol=1e-6)
