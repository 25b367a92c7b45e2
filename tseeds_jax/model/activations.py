"""Sharding constraints on the model's activations, from the same rules table as its parameters.

Without them XLA's partitioner chooses activation layouts by propagation alone, and from weights
split along `embed` over fsdp it may keep the hidden states split along D and the batch whole:
every device then computes attention for every row of the mesh. The TPU compiler showed it
(`tseeds compile`): a sharded prefill built f32[16, 2, 4, 8192, 8192] scores on each device, and
the 7B learner update needed 2.7x the planned bytes. Pinning the batch of every activation to
data x fsdp (and heads / MLP width / vocabulary to tensor) gives the FSDP + Megatron layout the
planner assumes: weights are all-gathered per layer, activations never are.

The mesh comes from the traced inputs (jit arguments with NamedShardings carry their abstract mesh
in the aval), so the model needs no mesh argument; with no mesh, or one device, nothing changes.
"""

from __future__ import annotations

import contextlib

import jax

from tseeds_jax.kernels.sharded import held_axes, mesh_of
from tseeds_jax.model.rules import logical_to_pspec


def ambient_mesh():
    """The abstract mesh in scope (see `scope`), or None."""
    mesh = jax.sharding.get_abstract_mesh()
    return mesh if getattr(mesh, "axis_names", ()) and mesh.size > 1 else None


@contextlib.contextmanager
def scope(*arrays):
    """Makes the mesh of `arrays` the ambient abstract mesh while tracing the model (a no-op when
    one is already in scope or none is found)."""
    mesh = None if ambient_mesh() is not None else mesh_of(*arrays, min_devices=2)
    if mesh is None:
        yield
        return
    with jax.sharding.use_abstract_mesh(mesh):
        yield


def constrain(x, *axes):
    """`x` with the layout the rules table gives logical `axes` on the ambient mesh; dimensions
    that do not divide stay replicated (silently: decode batches and test shapes often do not).
    Inside a per-shard vmap the axes it holds are left to it (the batch of one shard is whole)."""
    mesh = ambient_mesh()
    if mesh is None:
        return x
    spec = logical_to_pspec(axes, shape=x.shape, mesh=mesh, warn=False, taken=held_axes())
    return jax.lax.with_sharding_constraint(x, spec)
