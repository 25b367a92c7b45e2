"""Activations follow the rules table on a mesh: the batch of every sequence-length activation is
split over data x fsdp, so no device computes attention for rows it does not own.

Without the constraints of `tseeds_jax.model.activations`, XLA's partitioner kept the hidden states
split along D (the `embed` dim of FSDP weights) and the batch whole: the TPU compiler showed a
sharded prefill building every row's [K, G, T, S] scores on each device. The check reads the
partitioned HLO on the 8 emulated CPU devices of conftest.py (the SPMD partitioner is XLA's, the
same on every backend).
"""

import re

import jax
import jax.numpy as jnp
import pytest
from flax import nnx
from tseeds_jax.kernels.sharded import mesh_of

from tseeds_jax.model import ModelConfig, init_model
from tseeds_jax.model import sharding as sh
from tseeds_jax.model.activations import constrain, scope
from tseeds_jax.sampling import core, placement, strategies

CFG = ModelConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
ROWS, T = 8, 48  # T: distinct from every other dimension, so score shapes are recognisable


def _scores_leading_dims(hlo: str, t: int, s: int) -> set[int]:
    """Leading (row) dimension of every f32 array whose trailing dims are [..., t, s] with 5 dims:
    the attention scores / probabilities [B, K, G, T, S]."""
    dims = set()
    for m in re.finditer(r"f32\[(\d+),(\d+),(\d+),(\d+),(\d+)\]", hlo):
        b, _, _, tt, ss = map(int, m.groups())
        if (tt, ss) == (t, s):
            dims.add(b)
    return dims


@pytest.fixture(scope="module")
def model_split():
    return nnx.split(init_model(CFG, seed=0))


@pytest.mark.parametrize("mesh_spec", [{"data": 1, "fsdp": 4, "tensor": 2},
                                       {"data": 2, "fsdp": 4, "tensor": 1}])
def test_prefill_scores_are_split_over_the_batch_axes(model_split, mesh_spec):
    graphdef, params = model_split
    mesh = sh.make_mesh(mesh_spec)
    params = jax.device_put(params, sh.param_shardings(params, mesh))
    place = placement.SamplerShardings(mesh)
    rows = lambda shape, dt: jax.ShapeDtypeStruct(shape, dt, sharding=place.rows(shape, "t"))  # noqa: E731
    args = (rows((ROWS, T), jnp.int32), rows((ROWS,), jnp.int32), rows((ROWS, 2), jnp.uint32),
            rows((ROWS,), jnp.int32), rows((ROWS,), bool))
    hlo = core.prefill.lower(graphdef, strategies.Greedy(), params, *args).compile().as_text()
    shards = mesh_spec["data"] * mesh_spec["fsdp"]
    assert _scores_leading_dims(hlo, T, T) == {ROWS // shards}


def test_learner_forward_scores_are_split_over_the_batch_axes(model_split):
    graphdef, params = model_split
    mesh = sh.make_mesh({"data": 1, "fsdp": 8, "tensor": 1})
    params = jax.device_put(params, sh.param_shardings(params, mesh))
    tokens = jax.ShapeDtypeStruct((ROWS, T), jnp.int32, sharding=sh.batch_sharding(mesh, (ROWS, T)))

    def loss(p, tok):
        h, _ = nnx.merge(graphdef, p).hidden(tok)
        return jnp.sum(h.astype(jnp.float32) ** 2)

    hlo = jax.jit(jax.grad(loss)).lower(params, tokens).compile().as_text()
    assert _scores_leading_dims(hlo, T, T) == {ROWS // 8}


def test_no_mesh_means_no_constraint():
    x = jnp.ones((4, 6))
    assert mesh_of(x) is None
    with scope(x):
        assert constrain(x, "batch", None) is x
