"""Running a Pallas kernel on inputs sharded over a device mesh.

Shape letters: N tokens, D model width, V vocabulary.

XLA cannot partition a Mosaic (TPU Pallas) custom call ("Mosaic kernels cannot be automatically
partitioned. Please wrap the call in a shard_map"), so under a multi-device mesh the kernel runs
inside `jax.shard_map`: tokens are split over as many mesh axes (in mesh order) as divide N and
the whole unembedding reaches every shard (what a sharded matmul would gather as well). Per device
the kernel then sees N / (product of those axes) tokens: the per-device shapes of the paper
configs.

Gradients move once: the unembedding enters split along D over the token axes (when they divide
D) and is all-gathered inside the shard_map. The transpose of that gather is a reduce-scatter,
so each device ends with its 1/n slice of d unembed, summed over every token shard, in the
unembedding's own dtype (the parameter dtype) -- instead of every chip all-reducing the whole
[D, V] gradient in float32 and keeping it (measured in the TPU compiler's HLO: docs/scale.md,
"Splash attention in the update"). When D does not divide, the unembedding is replicated
into the shard_map and shard_map's transpose sums d unembed over the token axes (all-reduce).
"""

from __future__ import annotations

import contextlib
import contextvars
import math

import jax
from jax.sharding import PartitionSpec as P

# Mesh axes that an enclosing `jax.vmap(..., spmd_axis_name=axes)` already splits its mapped
# dimension over (the learner's per-shard gradients, rl/learn/learner.py): code traced inside must not
# split another dimension over them (shard_map specs, sharding constraints), or JAX refuses the
# program ("vmap spmd_axis_name cannot appear in shard_map in_specs").
_HELD: contextvars.ContextVar[frozenset] = contextvars.ContextVar("tseeds_held_mesh_axes",
                                                                  default=frozenset())


def held_axes() -> frozenset:
    """The mesh axes held by an enclosing per-shard vmap (see `holding`); empty outside one."""
    return _HELD.get()


@contextlib.contextmanager
def holding(axes):
    """Marks `axes` as taken by the vmap being traced inside this block."""
    token = _HELD.set(_HELD.get() | frozenset(axes))
    try:
        yield
    finally:
        _HELD.reset(token)


def mesh_of(*arrays, min_devices: int = 1):
    """The abstract mesh of the first array whose aval carries a named mesh of at least
    `min_devices` devices; None if none (the one definition, also used by model/ and rl/)."""
    for x in arrays:
        try:
            mesh = jax.typeof(x).sharding.mesh
        except Exception:  # a Python scalar, or an aval without a sharding
            continue
        if getattr(mesh, "axis_names", ()) and mesh.size >= min_devices:
            return mesh
    return None


def _ambient_mesh():
    try:
        mesh = jax.sharding.get_abstract_mesh()
    except Exception:
        return None
    return mesh if getattr(mesh, "axis_names", ()) else None


def batch_axes(mesh, rows: int) -> tuple[str, ...]:
    """The data-like mesh axes ("data", "fsdp", in that order, not held by an enclosing vmap)
    whose sizes multiply to a divisor of `rows`, chosen greedily: the rules table's `batch`."""
    held = held_axes()
    chosen, size = [], 1
    for name in ("data", "fsdp"):
        n = mesh.shape.get(name, 1)
        if name not in held and n > 1 and rows % (size * n) == 0:
            chosen.append(name)
            size *= n
    return tuple(chosen)


def token_axes(mesh, n: int) -> tuple[str, ...]:
    """Mesh axes (in mesh order, not held by an enclosing vmap) whose sizes multiply to a divisor
    of N."""
    chosen, size = [], 1
    held = held_axes()
    for name in mesh.axis_names:
        if name in held:
            continue
        k = mesh.shape[name]
        if k > 1 and n % (size * k) == 0:
            chosen.append(name)
            size *= k
    return tuple(chosen)


def over_tokens(fn, hidden_ND, unembed_DV, targets_N):
    """fn(hidden_ND, unembed_DV, targets_N) -> (logp_N, entropy_N), run per token shard when the
    inputs live on a mesh of more than one device; called directly otherwise."""
    mesh = mesh_of(hidden_ND, unembed_DV, targets_N)
    if mesh is None:
        mesh = _ambient_mesh()
    if mesh is None or mesh.size <= 1:
        return fn(hidden_ND, unembed_DV, targets_N)
    axes = token_axes(mesh, hidden_ND.shape[0])
    tok = P(axes) if axes else P(None)
    split = math.prod(mesh.shape[a] for a in axes) if axes else 1
    d_axes = axes if split > 1 and unembed_DV.shape[0] % split == 0 else ()
    if d_axes:
        def body(h, w_shard, t):
            # Gathered here rather than by XLA outside: its transpose reduce-scatters d unembed.
            return fn(h, jax.lax.all_gather(w_shard, d_axes, axis=0, tiled=True), t)
        w_spec = P(d_axes, None)
    else:
        body, w_spec = fn, P(None, None)
    sharded = jax.shard_map(body, mesh=mesh, in_specs=(P(axes or None, None), w_spec, tok),
                            out_specs=(tok, tok), check_vma=False)
    return sharded(hidden_ND, unembed_DV, targets_N)
