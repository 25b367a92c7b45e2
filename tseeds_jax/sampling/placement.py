"""Where the sampler's arrays live when the parameters are sharded over a multi-device mesh.

The offline driver (`driver.py`) runs "sharded" when any parameter is a `jax.Array` with a
`NamedSharding` on a mesh of more than one device that is not fully replicated: the parameters are
then used as they are (never gathered), and every array the driver creates -- the decode state,
the output buffers, the prefill inputs and the prefix KV -- is placed with the logical rules of
`tseeds_jax.model.sharding` (slots over "cache_batch", kv heads over "cache_kv_heads", ...). The
jitted sampler core is left to propagate these layouts; placing its inputs keeps every call's
input shardings the same, so nothing recompiles between calls.

Letters: B decode slots, P prefills run together, N output buffer length.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import jax
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding

import tseeds_jax.sampling.core as core
from tseeds_jax.model import sharding as shd


def params_mesh(params) -> Mesh | None:
    """The mesh of the first parameter split over several devices, or None (single device,
    uncommitted or fully replicated parameters: the driver then behaves as unsharded)."""
    for x in jax.tree_util.tree_leaves(params):
        s = getattr(x, "sharding", None)
        if (isinstance(x, jax.Array) and isinstance(s, NamedSharding) and s.mesh.size > 1
                and not s.is_fully_replicated):
            return s.mesh
    return None


def shards_of(mesh: Mesh, logical: str) -> int:
    """How many ways the rules table splits a dimension named `logical` on `mesh`."""
    spec = shd.logical_to_pspec((logical,), mesh=mesh)
    axes = spec[0] if len(spec) else ()
    axes = (axes,) if isinstance(axes, str) else tuple(axes or ())
    return math.prod(mesh.shape[a] for a in axes)


@functools.lru_cache(maxsize=256)
def _sharding(mesh: Mesh, axes: tuple, shape: tuple, what: str) -> NamedSharding:
    # Cached: an indivisible dimension is logged once per shape, not once per driver call.
    return NamedSharding(mesh, shd.logical_to_pspec(axes, shape=shape, mesh=mesh, what=what))


@dataclasses.dataclass(frozen=True)
class SamplerShardings:
    """Shardings of the driver's arrays on `mesh` (from the rules table)."""

    mesh: Mesh

    @property
    def batch_shards(self) -> int:
        """Ways the slot / prefill-row dimension is split ("cache_batch" on this mesh)."""
        return shards_of(self.mesh, "cache_batch")

    def round_rows(self, n: int) -> int:
        """`n` rounded up to a multiple of the batch shards (every device gets whole rows)."""
        k = self.batch_shards
        return -(-n // k) * k

    def rows(self, shape, what: str) -> NamedSharding:
        """Per-slot / per-row arrays [B, ...]: split along the leading dimension only."""
        axes = ("cache_batch",) + (None,) * (len(shape) - 1)
        return _sharding(self.mesh, axes, tuple(shape), what)

    def kv(self, axes, shape) -> NamedSharding:
        return _sharding(self.mesh, tuple(axes), tuple(shape), "sampler KV cache")

    def state_shardings(self, state: core.DecodeState) -> core.DecodeState:
        """A DecodeState of NamedShardings for `state` (arrays or ShapeDtypeStructs). The KV
        layout comes from the cache's own `k_axes` / `v_axes`, so it follows the cache class."""
        cache = state.cache
        out = jax.tree.map(lambda x: self.rows(x.shape, "decode state"), state)
        return out.replace(cache=out.cache.replace(**type(cache).map_layers(cache, self.kv)))

    def prefix_shardings(self, prefix: core.Prefix, cache_cls) -> core.Prefix:
        """A Prefix of NamedShardings: its per-layer KV laid out like the cache it enters."""
        out = jax.tree.map(lambda x: self.rows(x.shape, "prefill rows"), prefix)
        return out.replace(**cache_cls.map_layers(prefix, self.kv))

    def init_buffers(self, cfg, slots: int, cache_len: int, out_len: int):
        """`core.init_buffers` created directly in place: no device ever holds the whole cache."""
        return _placed_init(self.mesh, cfg, slots, cache_len, out_len)()

    def put_rows(self, *arrays_np):
        """Host arrays [P, ...] onto the mesh, split along their leading dimension."""
        return tuple(put(x, self.rows(x.shape, "prefill rows")) for x in arrays_np)

    def place(self, tree, shardings):
        """`tree` re-laid out as `shardings` (a no-op for arrays already there)."""
        return jax.tree.map(lambda x, s: x if x.sharding == s else jax.device_put(x, s),
                            tree, shardings)


@functools.lru_cache(maxsize=32)
def _placed_init(mesh: Mesh, cfg, slots: int, cache_len: int, out_len: int):
    shapes = jax.eval_shape(functools.partial(core.init_buffers, cfg, slots, cache_len, out_len))
    p = SamplerShardings(mesh)
    state, out_t, out_lp = shapes
    out = (p.state_shardings(state), p.rows(out_t.shape, "output buffer"),
           p.rows(out_lp.shape, "output buffer"))
    return jax.jit(lambda: core.init_buffers(cfg, slots, cache_len, out_len), out_shardings=out)


def put(x: np.ndarray, sharding: NamedSharding) -> jax.Array:
    """A host array onto `sharding`; on a multi-process mesh every process passes the same
    value and contributes the shards of its own devices."""
    if sharding.is_fully_addressable:
        return jax.device_put(x, sharding)
    return jax.make_array_from_callback(x.shape, sharding, lambda idx: x[idx])


def fetch(tree):
    """numpy values of a pytree of arrays, gathering shards held by other processes."""
    leaves = jax.tree_util.tree_leaves(tree)
    if all(not isinstance(x, jax.Array) or x.is_fully_addressable for x in leaves):
        return jax.device_get(tree)  # one batched transfer
    return jax.tree.map(
        lambda x: np.asarray(multihost_utils.process_allgather(x, tiled=True)), tree)
