"""Running a Pallas kernel on inputs sharded over a device mesh.

Shape letters: N tokens, D model width, V vocabulary.

XLA cannot partition a Mosaic (TPU Pallas) custom call ("Mosaic kernels cannot be automatically
partitioned. Please wrap the call in a shard_map"), so under a multi-device mesh the kernel runs
inside `jax.shard_map`: tokens are split over as many mesh axes (in mesh order) as divide N, the
unembedding is replicated into every shard (what a sharded matmul would gather as well), and the
d unembed of each shard is summed over the token axes by shard_map's transpose. Per device the
kernel then sees N / (product of those axes) tokens: the per-device shapes of the paper configs.
"""

from __future__ import annotations

import jax
from jax.sharding import PartitionSpec as P


def mesh_of(*arrays):
    """The (abstract) mesh carried by the arrays' shardings, else the ambient one; None if none."""
    for x in arrays:
        try:
            mesh = jax.typeof(x).sharding.mesh
        except Exception:  # no sharding in the aval
            continue
        if getattr(mesh, "axis_names", ()):
            return mesh
    try:
        mesh = jax.sharding.get_abstract_mesh()
    except Exception:
        return None
    return mesh if getattr(mesh, "axis_names", ()) else None


def token_axes(mesh, n: int) -> tuple[str, ...]:
    """Mesh axes (in mesh order) whose sizes multiply to a divisor of N."""
    chosen, size = [], 1
    for name in mesh.axis_names:
        k = mesh.shape[name]
        if k > 1 and n % (size * k) == 0:
            chosen.append(name)
            size *= k
    return tuple(chosen)


def over_tokens(fn, hidden_ND, unembed_DV, targets_N):
    """fn(hidden_ND, unembed_DV, targets_N) -> (logp_N, entropy_N), run per token shard when the
    inputs live on a mesh of more than one device; called directly otherwise."""
    mesh = mesh_of(hidden_ND, unembed_DV, targets_N)
    if mesh is None or mesh.size <= 1:
        return fn(hidden_ND, unembed_DV, targets_N)
    axes = token_axes(mesh, hidden_ND.shape[0])
    tok = P(axes) if axes else P(None)
    sharded = jax.shard_map(fn, mesh=mesh, in_specs=(P(axes or None, None), P(None, None), tok),
                            out_specs=(tok, tok), check_vma=False)
    return sharded(hidden_ND, unembed_DV, targets_N)
