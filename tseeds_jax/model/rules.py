"""The logical-axis -> mesh-axis rules table and its PartitionSpecs.

Kept apart from `sharding` (which builds meshes and sharded models and imports the model) so that
the model itself can name the layout of its activations (`activations.constrain`) without an
import cycle. `sharding` re-exports everything here.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from typing import Any

from jax.sharding import AbstractMesh, Mesh, PartitionSpec

log = logging.getLogger(__name__)

MESH_AXES = ("data", "fsdp", "tensor")

MeshAxes = str | tuple[str, ...] | None

# logical axis name -> mesh axis (or tuple of mesh axes, or None = replicated).
LOGICAL_RULES: dict[str, MeshAxes] = {
    # parameters
    "vocab": "tensor",
    "embed": "fsdp",
    "q_heads": "tensor",
    "kv_heads": "tensor",
    "head_dim": None,
    "mlp": "tensor",
    "norm": None,
    "layers": None,
    # LoRA adapters (`lora_layer.LoraAdapter`): A [in, rank] and B [rank, out] take the base
    # weight's input / output axis names; the rank is replicated.
    "lora_rank": None,
    # activations: the batch is split over every data-like axis; the model width of activations
    # stays whole (`embed` of weights is on fsdp, which activations already use for the batch).
    "batch": ("data", "fsdp"),
    "length": None,
    "sequence": None,
    "activation_embed": None,
    "activation_heads": "tensor",
    "activation_kv_heads": "tensor",
    "activation_mlp": "tensor",
    "activation_vocab": "tensor",
    # KV cache: keys [B, K, E, S], values [B, K, S, E] (KVCache.k_axes / v_axes)
    "cache_batch": ("data", "fsdp"),
    "cache_length": None,
    "cache_kv_heads": "tensor",
    "cache_head_dim": None,
}


def _mesh_axes(name: str | None, rules: Mapping[str, MeshAxes]) -> tuple[str, ...]:
    if name is None:
        return ()
    if name not in rules:
        raise ValueError(f"logical axis {name!r} has no sharding rule; known: {sorted(rules)}")
    target = rules[name]
    if target is None:
        return ()
    return (target,) if isinstance(target, str) else tuple(target)


def logical_to_pspec(axes: Sequence[str | None], rules: Mapping[str, MeshAxes] | None = None,
                     *, shape: Sequence[int] | None = None, mesh: Mesh | AbstractMesh | None = None,
                     what: str = "array", warn: bool = True,
                     taken: frozenset | set = frozenset()) -> PartitionSpec:
    """The PartitionSpec for an array whose dimensions have logical names `axes`.

    A mesh axis is used at most once per array (the first dimension that asks for it wins);
    `taken` axes are not used at all (held by an enclosing per-shard vmap).
    With `shape` and `mesh`, a dimension not divisible by the product of its mesh axis sizes is
    replicated instead (logged at WARNING, naming `what`, unless `warn` is False).
    """
    rules = LOGICAL_RULES if rules is None else rules
    if isinstance(axes, str):
        raise TypeError(f"axes must be a sequence of names, got the string {axes!r}")
    if shape is not None and len(shape) != len(axes):
        raise ValueError(f"{what}: {len(axes)} logical axes {tuple(axes)} for shape {tuple(shape)}")
    used: set[str] = set(taken)
    out: list[Any] = []
    for i, name in enumerate(axes):
        mesh_axes = tuple(a for a in _mesh_axes(name, rules) if a not in used)
        if mesh is not None:
            mesh_axes = tuple(a for a in mesh_axes if mesh.shape.get(a, 1) > 1)
        if shape is not None and mesh is not None and mesh_axes:
            size = math.prod(mesh.shape[a] for a in mesh_axes)
            if shape[i] % size:
                if warn:
                    log.warning("%s: dim %d (%s) of size %d is not divisible by mesh axes %s "
                                "(size %d); replicating it", what, i, name, shape[i], mesh_axes,
                                size)
                mesh_axes = ()
        used.update(mesh_axes)
        out.append(None if not mesh_axes else mesh_axes[0] if len(mesh_axes) == 1 else mesh_axes)
    while out and out[-1] is None:
        out.pop()
    return PartitionSpec(*out)
