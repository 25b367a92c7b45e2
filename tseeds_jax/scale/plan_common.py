"""What the memory plan's phases share (scale/plan.py, scale/plan_sampler.py): dtype sizes, the
parameters' layout under the sharding rules, the attention a workload runs, the sampler's cache
length. `w` below is a `plan.Workload`."""

from __future__ import annotations

import dataclasses
import functools
import math
import types
from collections.abc import Mapping

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


def attention_kind(w, t_len: int, dtype: str | None = None) -> str:
    """The attention implementation the model runs for this workload (`model.attention_impl`,
    "auto" resolved as `model.attention.resolve_impl` does on the workload's compiler):
    "splash" / "cudnn" keep no [T, T] score buffer in HBM, "chunked" one [C, T] block per
    (row, head), "xla" the whole [T, T]."""
    from tseeds_jax.model import attention

    impl = getattr(w.model, "attention_impl", "auto")
    if impl != "auto":
        return impl
    if w.compiler == "tpu":
        return "splash"
    if w.compiler == "gpu" and DTYPE_BYTES[dtype or w.model.dtype] == 2:
        return "cudnn"
    return "chunked" if t_len > attention.CHUNKED_MIN_T else "xla"


def score_rows(w, t_len: int, dtype: str | None = None) -> int:
    """Query rows of one float32 score block per (sequence, head) that the attention keeps in
    HBM: T (xla), min(C, T) (chunked), 0 (a flash kernel: splash on TPU, cuDNN on GPU)."""
    from tseeds_jax.model import attention

    kind = attention_kind(w, t_len, dtype)
    return {"xla": t_len, "chunked": min(attention.CHUNK, t_len)}.get(kind, 0)


@functools.lru_cache(maxsize=64)
def _leaf_shapes(mcfg):
    """[(path, shape, logical axes)] of every parameter, from an abstract model (no memory)."""
    from flax import nnx

    from tseeds_jax.model.sharding import abstract_model

    state = nnx.state(abstract_model(mcfg))
    out = []
    for path, var in nnx.to_flat_state(state):
        axes = var.get_metadata().get("axes")
        out.append((tuple(str(p) for p in path), tuple(var.value.shape), axes))
    return tuple(out)


def shard_factor(shape, axes, mesh_sizes: Mapping[str, int]) -> int:
    """How many ways a parameter is split: the rules table's PartitionSpec on this mesh."""
    from tseeds_jax.model.sharding import logical_to_pspec

    if axes is None:
        return 1
    fake = types.SimpleNamespace(shape=dict(mesh_sizes))
    import logging

    logger = logging.getLogger("tseeds_jax.model.sharding")
    level = logger.level
    logger.setLevel(logging.ERROR)  # replication of indivisible dims is reported by the plan
    try:
        spec = logical_to_pspec(axes, shape=shape, mesh=fake, what="plan")
    finally:
        logger.setLevel(level)
    factor = 1
    for entry in spec:
        for axis in (entry if isinstance(entry, tuple) else (entry,)):
            if axis is not None:
                factor *= mesh_sizes[axis]
    return factor


@dataclasses.dataclass(frozen=True)
class ParamLayout:
    total: int  # parameters (count)
    per_device: float  # parameters held by one device (count, fractional shards averaged)
    largest_leaf_per_device: float
    layer_per_tensor: float  # one decoder layer, gathered over fsdp, split over tensor (count)
    unembed: int  # D x V (count)
    per_tensor: float = 0.0  # all parameters split over tensor only (count): unreduced gradients


@functools.lru_cache(maxsize=256)
def param_layout(mcfg, mesh: tuple[int, int, int]) -> ParamLayout:
    sizes = dict(zip(("data", "fsdp", "tensor"), mesh))
    total = per_dev = largest = layer = per_tensor = 0.0
    tensor_only = {"data": 1, "fsdp": 1, "tensor": sizes["tensor"]}
    for path, shape, axes in _leaf_shapes(mcfg):
        n = math.prod(shape)
        share = n / shard_factor(shape, axes, sizes)
        total += n
        per_dev += share
        largest = max(largest, share)
        per_tensor += n / shard_factor(shape, axes, tensor_only)
        if len(path) > 1 and path[0] == "layers" and path[1] == "0":
            layer += n / shard_factor(shape, axes, tensor_only)
    unembed = mcfg.hidden_size * mcfg.vocab_size
    return ParamLayout(int(total), per_dev, largest, layer, unembed, per_tensor)


def cache_bucket(length: int) -> int:
    """The sampler's cache length for `length` positions (tseeds_jax.sampling.core.cache_bucket)."""
    from tseeds_jax.sampling.core import cache_bucket as bucket

    return bucket(length)


@functools.lru_cache(maxsize=64)
def adapter_layout(mcfg, mesh: tuple[int, int, int], rank: int, targets: tuple) -> ParamLayout:
    """The LoRA adapters' layout (rl/learn/adapters.py): A [I, R] split like its weight's input
    axis, B [R, O] like its output axis, the rank replicated (model/lora.py TARGETS)."""
    from tseeds_jax.model.lora import TARGETS, adapter_features

    sizes = dict(zip(("data", "fsdp", "tensor"), mesh))
    tensor_only = {"data": 1, "fsdp": 1, "tensor": sizes["tensor"]}
    total = per_dev = largest = layer = per_tensor = 0.0
    for t in targets:
        i, o = adapter_features(mcfg, t)
        _, _, _, in_axis, out_axis = TARGETS[t]
        for shape, axes in (((i, rank), (in_axis, "lora_rank")),
                            ((rank, o), ("lora_rank", out_axis))):
            n = math.prod(shape)
            share = n / shard_factor(shape, axes, sizes)
            total += n * mcfg.num_hidden_layers
            per_dev += share * mcfg.num_hidden_layers
            largest = max(largest, share)
            layer += n / shard_factor(shape, axes, tensor_only)
            per_tensor += n / shard_factor(shape, axes, tensor_only) * mcfg.num_hidden_layers
    return ParamLayout(int(total), per_dev, largest, layer, 0, per_tensor)


def lora_shape(w):
    """A LoRA workload's `decode_layout.LoraShape` (None when `w.lora_rank` is 0)."""
    if not w.lora_rank:
        return None
    from tseeds_jax.decode_layout import LoraShape

    total = adapter_layout(w.model, w.mesh, w.lora_rank, w.lora_targets).total
    return LoraShape(total, w.lora_sampler == "merged")
