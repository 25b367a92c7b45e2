"""Where the micro-batches' weight gradients are summed across devices: every micro-step, or once
per optimizer update (`optim.grad_reduce`).

Letters: S batch shards (the product of the mesh's batch axes that divide the micro-batch), b rows
per shard.

"micro_batch" (the default): `jax.grad` of each micro-batch's loss, accumulated in a buffer laid
out like the parameters. Under fsdp every weight gradient is then reduced across the batch axes
inside every micro-step. The TPU compiler does that as a full-size bfloat16 all-reduce followed
by a slice of the device's shard, whatever the program asks for (measurements: docs/scale.md,
"Gradients that move once").

"update": each device keeps the gradient of its own rows unreduced (a `jax.vmap` over S shards of
the micro-batch with `spmd_axis_name` = the batch axes, so shard s lives on the devices of batch
position s and nothing couples them), sums it over the micro-steps in float32 on the device,
and the update reduces the [S, ...] sums once, in the compute dtype, into the parameters'
layout. Gradient collectives fall by the number of micro-steps; the price is a full-size
(per tensor shard) float32 accumulator on every device instead of 1/fsdp of it (`tseeds plan`
counts it). The same idea as PyTorch DDP's `no_sync`.
Exact up to float rounding: each loss is a sum over rows with mini-batch denominators, and the
learner computes every batch-coupled quantity (M2PO / STARE selections, STARE's entropy gate)
over the whole mini-batch before the per-shard pass.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from flax import nnx
from jax.sharding import PartitionSpec as P

from tseeds_jax.kernels import sharded
from tseeds_jax.model.sharding import variable_pspec


def _is_var(x) -> bool:
    return isinstance(x, nnx.Variable)


def _specs(params, mesh, taken) -> list:
    """PartitionSpec per parameter leaf, in leaf order, batch axes in `taken` left out."""
    return [variable_pspec(x, mesh, warn=False, taken=taken) if _is_var(x) else P()
            for x in jax.tree_util.tree_leaves(params, is_leaf=_is_var)]


def _constrain(x, mesh, spec):
    with jax.sharding.use_abstract_mesh(mesh):
        return jax.lax.with_sharding_constraint(x, spec)


class ShardedAccumulator:
    """Per-shard gradients of one mini-batch's micro-steps, reduced once (`reduce`)."""

    def __init__(self, params, micro_rows: int, reduce_dtype):
        self.mesh = sharded.mesh_of(*jax.tree_util.tree_leaves(params), min_devices=2)
        self.axes = sharded.batch_axes(self.mesh, micro_rows) if self.mesh is not None else ()
        self.n = math.prod(self.mesh.shape[a] for a in self.axes) if self.axes else 1
        self.reduce_dtype = jnp.dtype(reduce_dtype)
        self._treedef = jax.tree_util.tree_structure(params)
        if self.axes:
            inner = _specs(params, self.mesh, frozenset(self.axes))
            self._acc_specs = [P(self.axes, *spec) for spec in inner]
            self._param_specs = _specs(params, self.mesh, frozenset())

    @property
    def active(self) -> bool:
        """False without a batch axis to keep unreduced (one device, or rows that do not split):
        the caller then accumulates as "micro_batch" does."""
        return bool(self.axes)

    def zeros(self, params):
        """Float32 [S, *shape] per parameter, shard s on the devices of batch position s."""
        leaves = jax.tree_util.tree_leaves(params)
        out = [_constrain(jnp.zeros((self.n,) + x.shape, jnp.float32), self.mesh, spec)
               for x, spec in zip(leaves, self._acc_specs)]
        return jax.tree_util.tree_unflatten(self._treedef, out)

    def grads(self, grad_fn, params, mb, shared: dict, per_row: dict, *args):
        """(gradients [S, ...] of each shard's rows, aux with a leading S axis).

        grad_fn(params, mb, *args, extra) as the learner's; `mb` and `per_row` split by rows into
        S contiguous blocks (the rows each batch position already holds), `shared` and `args`
        broadcast."""
        split = lambda x: x.reshape((self.n, x.shape[0] // self.n) + x.shape[1:])
        mb_S = jax.tree_util.tree_map(split, mb)
        per_row_S = jax.tree_util.tree_map(split, per_row)

        def one(mb_b, per_row_b):
            return grad_fn(params, mb_b, *args, {**shared, **per_row_b})

        with sharded.holding(self.axes), jax.sharding.use_abstract_mesh(self.mesh):
            return jax.vmap(one, spmd_axis_name=self.axes)(mb_S, per_row_S)

    def add(self, acc_S, g_S):
        leaves = [_constrain(a + g.astype(jnp.float32), self.mesh, spec)
                  for a, g, spec in zip(jax.tree_util.tree_leaves(acc_S),
                                        jax.tree_util.tree_leaves(g_S), self._acc_specs)]
        return jax.tree_util.tree_unflatten(self._treedef, leaves)

    def reduce(self, acc_S, params):
        """The summed gradients in the parameters' dtype and layout: one cross-device sum per
        leaf, in `reduce_dtype` (the compute dtype: what "micro_batch" reduces in as well).

        Written as a `psum_scatter` over the batch axes that split the parameter (`psum` over the
        rest) inside a `shard_map` over those axes only: each device receives the sum of its own
        slice, S (n-1)/n bytes, where an all-reduce and a slice move twice that."""
        out = []
        for a, p, spec in zip(jax.tree_util.tree_leaves(acc_S), jax.tree_util.tree_leaves(params),
                              self._param_specs):
            out.append(self._reduce_leaf(a.astype(self.reduce_dtype), spec).astype(p.dtype))
        return jax.tree_util.tree_unflatten(self._treedef, out)

    def _reduce_leaf(self, a_S, spec):
        entries = tuple(spec) + (None,) * (a_S.ndim - 1 - len(spec))
        names = lambda e: () if e is None else (e,) if isinstance(e, str) else tuple(e)
        # The dimension the parameter splits over batch axes (fsdp's `embed`), if any.
        dims = [i for i, e in enumerate(entries) if set(names(e)) & set(self.axes)]
        manual = frozenset(self.axes)
        keep = lambda e: tuple(n for n in names(e) if n in manual) or None
        out_spec = P(*(keep(e) for e in entries))
        scatter = names(entries[dims[0]]) if dims else ()
        if any(n not in manual for n in scatter):
            raise ValueError(f"grad_reduce='update': parameter spec {spec} mixes batch and other "
                             "mesh axes on one dimension")
        rest = tuple(n for n in self.axes if n not in scatter)

        def local(x_1):
            x = x_1[0]
            if scatter:
                x = jax.lax.psum_scatter(x, scatter, scatter_dimension=dims[0], tiled=True)
            return jax.lax.psum(x, rest) if rest else x

        with jax.sharding.use_abstract_mesh(self.mesh):
            g = jax.shard_map(local, mesh=self.mesh, in_specs=P(self.axes), out_specs=out_spec,
                              axis_names=manual, check_vma=False)(a_S)
            return jax.lax.with_sharding_constraint(g, spec)
