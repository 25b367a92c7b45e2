"""Mesh construction, the rules table, sharded init, and sharded == single-device numerics.

Runs on the 8 emulated CPU devices of conftest.py.
"""

import logging

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax.sharding import AxisType, PartitionSpec

from tseeds_jax.model import ModelConfig, init_model
from tseeds_jax.model import sharding as sh

RTOL = 1e-5  # float32, relative to the largest magnitude of each compared array

CFG = ModelConfig(model_type="qwen2", vocab_size=96, hidden_size=32, intermediate_size=64,
                  num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                  tie_word_embeddings=False)


def _mesh222():
    return sh.make_mesh({"data": 2, "fsdp": 2, "tensor": 2})


def test_make_mesh_sizes_and_axis_types():
    assert jax.device_count() == 8
    mesh = sh.make_mesh()
    assert dict(mesh.shape) == {"data": 1, "fsdp": 8, "tensor": 1}
    assert mesh.axis_types == (AxisType.Auto,) * 3
    assert dict(sh.make_mesh({"data": 2, "fsdp": -1, "tensor": 2}).shape)["fsdp"] == 2
    assert dict(sh.make_mesh(sh.MeshSpec(data=-1, fsdp=1, tensor=4)).shape)["data"] == 2
    one = sh.make_mesh(devices=jax.devices()[:1])
    assert one.size == 1


@pytest.mark.parametrize("spec, match", [
    ({"data": -1, "fsdp": -1}, "at most one"),
    ({"data": 3, "fsdp": -1}, "not divisible"),
    ({"data": 2, "fsdp": 2, "tensor": 1}, "multiply to 4"),
    ({"tensor": 0}, "tensor=0"),
    ({"pipeline": 2}, "unknown axes"),
])
def test_make_mesh_rejects_bad_specs(spec, match):
    with pytest.raises(ValueError, match=match):
        sh.make_mesh(spec)


def test_logical_to_pspec_rules():
    assert sh.logical_to_pspec(("embed", "q_heads", "head_dim")) == PartitionSpec("fsdp", "tensor")
    assert sh.logical_to_pspec(("vocab", "embed")) == PartitionSpec("tensor", "fsdp")
    assert sh.logical_to_pspec(("norm",)) == PartitionSpec()
    assert sh.logical_to_pspec(("batch", "length")) == PartitionSpec(("data", "fsdp"))
    # A mesh axis serves one dimension only: activations [B, T, D] keep D whole.
    assert sh.logical_to_pspec(("batch", "length", "embed")) == PartitionSpec(("data", "fsdp"))
    with pytest.raises(ValueError, match="no sharding rule"):
        sh.logical_to_pspec(("bogus",))
    with pytest.raises(TypeError):
        sh.logical_to_pspec("embed")


def test_indivisible_dim_is_replicated_and_logged(caplog):
    mesh = _mesh222()
    with caplog.at_level(logging.WARNING, logger=sh.__name__):
        spec = sh.logical_to_pspec(("vocab", "embed"), shape=(97, 32), mesh=mesh, what="emb")
    assert spec == PartitionSpec(None, "fsdp")
    assert "emb" in caplog.text and "97" in caplog.text


def test_param_shardings_follow_axes_metadata():
    mesh = _mesh222()
    state = nnx.state(sh.abstract_model(CFG))
    shardings = sh.pure_shardings(state, mesh)
    assert shardings["layers"][0]["attn"]["q"].spec == PartitionSpec("fsdp", "tensor")
    assert shardings["layers"][1]["attn"]["o"].spec == PartitionSpec("tensor", None, "fsdp")
    assert shardings["layers"][0]["mlp"]["down"].spec == PartitionSpec("tensor", "fsdp")
    assert shardings["lm_head"].spec == PartitionSpec("fsdp", "tensor")
    assert shardings["final_norm"]["scale"].spec == PartitionSpec()


@pytest.fixture(scope="module")
def ref_model():
    """A single-device model with numpy-random parameters: matrices and biases N(0, 0.04^2),
    norm scales 1 + N(0, 0.1^2) (so biases and norms shape the result; no eager JAX init)."""
    rng = np.random.default_rng(0)
    graphdef, state = nnx.split(sh.abstract_model(CFG))

    def fill(x):
        if len(x.shape) == 1:
            return jnp.asarray(1.0 + rng.normal(0, 0.1, x.shape), x.dtype)
        return jnp.asarray(rng.normal(0, 0.04, x.shape), x.dtype)

    return nnx.merge(graphdef, jax.tree.map(fill, state))


def test_sharded_init_lays_params_out_on_the_mesh():
    mesh = _mesh222()
    model = sh.sharded_init(CFG, mesh, seed=3)
    q = model.layers[0].attn.q.get_value()
    assert q.sharding.mesh == mesh and q.sharding.spec == PartitionSpec("fsdp", "tensor")
    assert len(q.addressable_shards) == 8
    assert q.addressable_shards[0].data.shape == (16, 2, 8)
    ref = init_model(CFG, seed=3)
    # Same RNG stream; jit vs eager may fuse the normal sampler differently (~1 ulp).
    for a, b in zip(jax.tree.leaves(nnx.state(model)), jax.tree.leaves(nnx.state(ref))):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=0, atol=1e-6)


def test_sharded_init_on_a_single_device_mesh():
    mesh = sh.make_mesh(devices=jax.devices()[:1])
    model = sh.sharded_init(CFG, mesh)
    emb = model.embed.get_value()
    assert emb.shape == (CFG.vocab_size, CFG.hidden_size) and emb.sharding.mesh.size == 1


def test_shard_batch():
    mesh = _mesh222()
    batch = sh.shard_batch({"tokens": np.zeros((8, 5), np.int32), "n": np.int32(3)}, mesh)
    assert batch["tokens"].sharding.spec == PartitionSpec(("data", "fsdp"))
    assert batch["n"].sharding.spec == PartitionSpec()
    odd = sh.shard_batch(np.zeros((3, 5), np.int32), mesh)  # 3 rows over 4: replicated
    assert odd.sharding.spec == PartitionSpec()


def _loss(model, tokens_BT):
    logits_BTV = model(tokens_BT[:, :-1])
    logp = jax.nn.log_softmax(logits_BTV, axis=-1)
    return -jnp.mean(jnp.take_along_axis(logp, tokens_BT[:, 1:, None], axis=-1))


def _loss_and_grads(model, tokens_BT):
    return nnx.jit(nnx.value_and_grad(_loss))(model, tokens_BT)


def _close(a, b, what):
    a, b = np.asarray(a), np.asarray(b)
    err = np.abs(a - b).max() / max(np.abs(b).max(), 1e-30)
    assert err <= RTOL, (what, err)


def test_sharded_forward_and_grad_equal_single_device(ref_model):
    rng = np.random.default_rng(1)
    tokens = jnp.asarray(rng.integers(0, CFG.vocab_size, (8, 12)), jnp.int32)
    loss_ref, grads_ref = _loss_and_grads(ref_model, tokens)

    mesh = _mesh222()
    model = sh.shard_model(nnx.clone(ref_model), mesh)
    assert model.layers[0].mlp.gate.get_value().sharding.spec == PartitionSpec("fsdp", "tensor")
    tokens_sharded = sh.shard_batch(tokens, mesh)
    forward = nnx.jit(lambda m, t: m(t))
    _close(forward(model, tokens_sharded), forward(ref_model, tokens), "logits")
    loss, grads = _loss_and_grads(model, tokens_sharded)
    _close(loss, loss_ref, "loss")
    flat, flat_ref = nnx.to_flat_state(grads), nnx.to_flat_state(grads_ref)
    assert len(flat) == len(flat_ref)
    for (path, g), (path_ref, g_ref) in zip(flat, flat_ref):
        assert path == path_ref
        _close(g.get_value(), g_ref.get_value(), path)
