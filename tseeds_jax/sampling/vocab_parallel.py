"""Sampling from logits whose vocabulary is split over the mesh's `tensor` axis, without
gathering them.

In the decode layout (`layout.py`) the LM head is split over `tensor` along the vocabulary, so
each device of a replica holds float32 logits [slots, V / tensor]. The strategies of
`strategies.py` reduce over the whole vocabulary (argmax, a cumulative sum, top-k): applied to
the sharded array, XLA all-gathers [slots, V] in float32 on every device for every token. Here
each device reduces its own shard and only per-row scalars cross devices:

- Greedy: each shard's max and first arg-max; the winner is the first shard holding the global
  max (ties go to the lowest index, as `first_argmax`).
- Temperature: the inverse-CDF draw of `strategies._categorical`, in two levels: each shard's
  unnormalised mass exp(x / T - M) (M the global max), the row's uniform u scaled by the total
  mass picks a shard by the shards' cumulative masses, and that shard picks the entry inside.
- TopK: each shard's own top k (the global top k are among the shards' top k), gathered as
  [slots, tensor x k] candidates, then the strategy's own draw over them.
- The drawn token's log-prob at the strategy's temperature (`strategies.logprob_temperature`):
  the global log-sum-exp from per-shard sums.

TopP needs the whole sorted distribution and is left to the strategy on the gathered logits.
The draws equal the unsharded strategy's in exact arithmetic; in floating point the mass sums
are taken in a different order, so a temperature draw whose uniform lands within rounding of an
entry boundary may pick the neighbouring entry (greedy and top-k candidate sets are exact).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

import tseeds_jax.sampling.strategies as st
from tseeds_jax.model.attention import _mesh_split

AXIS = "tensor"


def applies(strategy, mesh, vocab: int) -> bool:
    """True when `mesh` splits the vocabulary over `tensor` and `strategy` has a sharded form."""
    if mesh is None:
        return False
    t = dict(mesh.shape).get(AXIS, 1)
    return t > 1 and vocab % t == 0 and isinstance(strategy, (st.Greedy, st.Temperature, st.TopK))


def sample(strategy, logits_BV, keys_B2, mesh):
    """(tokens [B] int32, log-probs [B] float32 at the strategy's temperature) from
    vocabulary-split logits."""
    b = logits_BV.shape[0]
    batch = _mesh_split(mesh, b, 1)[0] or None  # rows over the data axes that divide them
    fn = functools.partial(_local, strategy)
    return jax.shard_map(fn, mesh=mesh, in_specs=(P(batch, AXIS), P(batch, None)),
                         out_specs=(P(batch), P(batch)), check_vma=False)(
        logits_BV.astype(jnp.float32), keys_B2)


def _gather(x_B):
    """[tensor, B]: every shard's value of a per-row scalar."""
    return jax.lax.all_gather(x_B, AXIS)


def _owner_pick(idx_local_B, owner_B, offset):
    """The global index chosen by the owning shard, on every shard."""
    me = jax.lax.axis_index(AXIS)
    return jax.lax.psum(jnp.where(owner_B == me, idx_local_B + offset, 0), AXIS).astype(jnp.int32)


def _first_max_shard(max_TB):
    """The first shard holding the row's maximum."""
    return st.first_true((max_TB == jnp.max(max_TB, axis=0, keepdims=True)).T)


def _local(strategy, x_BV, keys_B2):
    v_local = x_BV.shape[-1]
    offset = jax.lax.axis_index(AXIS) * v_local
    if isinstance(strategy, st.Greedy):
        m_B = jnp.max(x_BV, axis=-1)
        token = _owner_pick(st.first_argmax(x_BV), _first_max_shard(_gather(m_B)), offset)
    elif isinstance(strategy, st.Temperature):
        token = _categorical(x_BV / strategy.temperature, keys_B2, offset)
    else:  # TopK
        k = min(strategy.k, v_local * jax.lax.axis_size(AXIS))
        kl = min(k, v_local)
        top_BK, idx_BK = jax.lax.top_k(x_BV, kl)
        # Candidates of every shard, in shard order: [B, tensor * kl].
        cand = jnp.moveaxis(jax.lax.all_gather(top_BK, AXIS), 0, 1).reshape(x_BV.shape[0], -1)
        cidx = jnp.moveaxis(jax.lax.all_gather(idx_BK + offset, AXIS), 0, 1).reshape(
            x_BV.shape[0], -1)
        # The global top k among the candidates, ordered as lax.top_k orders the full vocabulary
        # (value descending, lower index first on ties): sort by (-value, index).
        order = jnp.lexsort((cidx, -cand), axis=-1)[:, :k]
        top = jnp.take_along_axis(cand, order, axis=-1)
        idx = jnp.take_along_axis(cidx, order, axis=-1)
        pick = st._categorical(top / strategy.temperature, keys_B2)
        token = jnp.take_along_axis(idx, pick[:, None], axis=-1)[:, 0].astype(jnp.int32)
    return token, _logprob(st.tempered(x_BV, st.logprob_temperature(strategy)), token, offset)


def _categorical(scaled_BX, keys_B2, offset):
    u_B = jax.vmap(lambda k: jax.random.uniform(k, (), jnp.float32))(keys_B2)
    m_B = jax.lax.pmax(jnp.max(scaled_BX, axis=-1), AXIS)
    e_BX = jnp.exp(scaled_BX - m_B[:, None])
    mass_TB = _gather(jnp.sum(e_BX, axis=-1))
    total_B = jnp.sum(mass_TB, axis=0)
    target_B = u_B * total_B
    before_TB = jnp.cumsum(mass_TB, axis=0) - mass_TB
    # The shard whose cumulative range holds the target: the last one starting at or below it
    # that has mass (a shard of all-zero mass can hold no draw).
    hold_TB = (before_TB <= target_B[None]) & (mass_TB > 0)
    t = mass_TB.shape[0]
    owner_B = (t - 1) - st.first_true(hold_TB[::-1].T)
    me = jax.lax.axis_index(AXIS)
    mine_before_B = jax.lax.dynamic_index_in_dim(before_TB, me, 0, keepdims=False)
    cdf_BX = jnp.cumsum(e_BX, axis=-1)
    rest_B1 = (target_B - mine_before_B)[:, None]
    idx_B = jnp.sum((cdf_BX <= rest_B1).astype(jnp.int32), axis=-1)
    idx_B = jnp.minimum(idx_B, scaled_BX.shape[-1] - 1)
    after_BX = jnp.arange(scaled_BX.shape[-1])[None, :] >= idx_B[:, None]
    local_B = st.first_true((e_BX > 0) & after_BX)
    return _owner_pick(local_B, owner_B, offset)


def _logprob(x_BV, token_B, offset):
    m_B = jax.lax.stop_gradient(jax.lax.pmax(jnp.max(x_BV, axis=-1), AXIS))
    z_B = jax.lax.psum(jnp.sum(jnp.exp(x_BV - m_B[:, None]), axis=-1), AXIS)
    local_B = token_B - offset
    inside_B = (local_B >= 0) & (local_B < x_BV.shape[-1])
    picked_B = jnp.take_along_axis(x_BV, jnp.clip(local_B, 0, x_BV.shape[-1] - 1)[:, None],
                                   axis=-1)[:, 0]
    picked_B = jax.lax.psum(jnp.where(inside_B, picked_B, 0.0), AXIS)
    return (picked_B - m_B) - jnp.log(z_B)
