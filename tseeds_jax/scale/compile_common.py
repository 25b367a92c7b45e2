"""What compile_programs.py and compile_lora.py share: a program to compile and the abstract
(`jax.ShapeDtypeStruct`) trees with shardings its arguments are made of."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp


@dataclasses.dataclass
class Program:
    name: str
    phase: str
    note: str
    lower: Any  # () -> jax.stages.Lowered
    extra_live: int = 0
    analytic_flops: float = 0.0  # FLOPs inside Pallas calls (the compiler does not count them)


def sds(x, sharding):
    return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding)


def abstract(tree, shardings):
    """`tree` of shapes -> ShapeDtypeStructs with `shardings` (same structure, NNX Variables
    included)."""
    return jax.tree.map(sds, tree, shardings)


def device_bytes(tree) -> int:
    """Bytes one device holds of a tree of sharded ShapeDtypeStructs (the largest shard)."""
    total = 0
    for x in jax.tree_util.tree_leaves(tree):
        shape = x.sharding.shard_shape(x.shape) if x.sharding is not None else x.shape
        total += math.prod(shape) * jnp.dtype(x.dtype).itemsize
    return total


def cast_tree(tree, dtype: str):
    """Float leaves as `dtype` (the trainer's sampler-dtype cast, same shardings)."""
    def one(x):
        if jnp.issubdtype(x.dtype, jnp.floating):
            return jax.ShapeDtypeStruct(x.shape, jnp.dtype(dtype), sharding=x.sharding)
        return x
    return jax.tree.map(one, tree)
