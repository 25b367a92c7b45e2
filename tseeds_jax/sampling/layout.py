"""The sampler's own decode layout (`hardware.sampler_placement = "decode"`).

Why a layout of its own: the learner's fsdp layout splits every weight matrix along `embed`
over all chips. XLA partitions a decode step on it by keeping each shard in place and
all-reducing activations, so every chip computes every slot on 1/fsdp of the weights and the
float32 logits [slots, vocab] are all-reduced for every token: the step is capped by collectives
whatever the batch. Decoding wants the opposite: each chip reads its weight shard once per step
for as many slots as its memory holds, and moves only [slots, D] activations.

The decode layout is a ("data", "fsdp", "tensor") mesh of shape (replicas, 1, tensor) over the
same devices as the learner's mesh, in the same order: `tensor` consecutive devices (ICI
neighbours in `jax.make_mesh`'s order; a width that divides a host's devices) hold one
tensor-parallel replica of the weights (heads, MLP width and vocabulary split, as the
rules table says for `tensor`), and the replicas split the slots. With tensor = 1 every device
holds a whole copy and decodes its own slots with no collective at all. The learner's parameters
are moved into it at each weight sync (`reshard`: one jitted program whose collectives
`tseeds compile` counts as the `sampler_reshard` program).

`choose_tensor` picks the tensor width from an HBM roofline per device (weights / tensor read
once per step, plus the slots' KV cache, plus the tensor-parallel all-reduces at the chips'
interconnect bandwidth), among the widths that divide the devices of a host and the KV heads,
subject to memory. The slot count is chosen from memory too (`slots_per_replica`), up to the
requests of the call.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import numpy as np
from jax.sharding import Mesh

from tseeds_jax.model import sharding as shd
from tseeds_jax.model.rules import MESH_AXES

# Memory a decode call may use on a device is this share of what is free after the weights:
# the rest covers the prefill's activations, the output buffers and allocator fragmentation.
MEMORY_SHARE = 0.85


def kv_element_bytes(cfg) -> tuple[int, int]:
    """(bytes per cached key / value element, scale bytes per position and kv head) of the cache
    `cfg.kv_cache_dtype` asks for: the compute dtype and no scales, or int8 and a float32 scale."""
    from tseeds_jax.model.decode_attention import KV_SCALE_BYTES, cache_dtype

    item = cache_dtype(cfg.kv_cache_dtype, cfg.dtype).itemsize
    return item, (KV_SCALE_BYTES if cfg.kv_cache_dtype == "int8" else 0)


def kv_bytes_per_token(cfg) -> int:
    """Bytes of one cached position over all layers and KV heads: keys + values (+ an int8
    cache's scales)."""
    item, scale = kv_element_bytes(cfg)
    return 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * (cfg.head_size * item + scale)


@dataclasses.dataclass(frozen=True)
class DecodeModel:
    """The numbers of a model that the layout choice needs (bytes in the sampler's dtypes)."""

    weight_bytes: int  # all parameters, sampler dtype
    kv_bytes_per_token: int  # keys + values (+ int8 scales) of one position, all layers, heads
    hidden: int
    layers: int
    kv_heads: int
    heads: int
    act_bytes: int = 2  # activation dtype bytes (the all-reduced [slots, D])

    @classmethod
    def of(cls, cfg, sampler_dtype: str = "bfloat16") -> DecodeModel:
        """From a `ModelConfig` (parameter count from its abstract model)."""
        import jax.numpy as jnp

        n_params = sum(math.prod(x.shape) for x in jax.tree.leaves(
            jax.eval_shape(lambda: shd.abstract_model(cfg))))
        return cls(weight_bytes=n_params * jnp.dtype(sampler_dtype).itemsize,
                   kv_bytes_per_token=kv_bytes_per_token(cfg),
                   hidden=cfg.hidden_size, layers=cfg.num_hidden_layers,
                   kv_heads=cfg.num_key_value_heads, heads=cfg.num_attention_heads,
                   act_bytes=jnp.dtype(cfg.dtype).itemsize)


@dataclasses.dataclass(frozen=True)
class DecodeLayout:
    """`tensor` devices per replica, `replicas` replicas."""

    tensor: int
    replicas: int

    @property
    def devices(self) -> int:
        return self.tensor * self.replicas


def tensor_candidates(m: DecodeModel, devices: int, per_host: int) -> list[int]:
    """Widths that split the KV heads and the query heads evenly and fit in one host."""
    return [t for t in range(1, per_host + 1)
            if per_host % t == 0 and devices % t == 0 and m.kv_heads % t == 0
            and m.heads % t == 0]


def slots_per_replica(m: DecodeModel, tensor: int, free_bytes: float, cache_len: int) -> int:
    """Slots one replica holds: what is free on a device after its weight shard, over one slot's
    KV on a device (its share of the KV heads), at `MEMORY_SHARE`."""
    left = MEMORY_SHARE * free_bytes - m.weight_bytes / tensor
    per_slot = m.kv_bytes_per_token * cache_len / tensor
    return max(0, int(left // per_slot))


def balanced_slots(per_replica: int, fit: int) -> int:
    """Slots per replica for `per_replica` requests when memory holds `fit`: the fewest waves,
    with the requests spread evenly over them (1,792 requests at 1,328 slots would run a full
    wave and a 35% one, each as long as the longest response; two waves of 896 cost less)."""
    if fit <= 0:
        return 0
    waves = -(-per_replica // fit)
    return -(-per_replica // waves)


def step_time(m: DecodeModel, tensor: int, slots: int, kv_tokens: float, hbm_bw: float,
              ici_bw: float) -> tuple[float, float]:
    """(HBM seconds, interconnect seconds) of one decode step on a device of a replica with
    `slots` slots reading `kv_tokens` cached positions per slot on average."""
    hbm = (m.weight_bytes + slots * kv_tokens * m.kv_bytes_per_token) / tensor / hbm_bw
    # Two all-reduces of [slots, D] per layer (attention out, MLP out), ring: 2 S (t-1)/t each.
    ar = 2 * m.layers * 2 * slots * m.hidden * m.act_bytes * (tensor - 1) / tensor
    return hbm, ar / ici_bw if ici_bw else 0.0


@dataclasses.dataclass(frozen=True)
class Choice:
    layout: DecodeLayout
    slots: int  # per replica, for the planned call
    fit: int  # per replica, what memory holds
    tokens_per_s_per_device: float  # serial bound: HBM + interconnect
    why: str


def choose(m: DecodeModel, *, devices: int, per_host: int, requests: int, free_bytes: float,
           cache_len: int, kv_tokens: float | None = None, hbm_bw: float = 1.0,
           ici_bw: float = 0.0, tensor: int = 0) -> Choice:
    """The decode layout with the highest tokens/s per device for a call of `requests` sequences
    (`tensor` > 0 forces the width). `free_bytes`: HBM per device not held by the learner's
    state; `kv_tokens`: cached positions read per slot per step (default the whole cache)."""
    kv_tokens = cache_len if kv_tokens is None else kv_tokens
    cands = [tensor] if tensor else tensor_candidates(m, devices, per_host)
    best, notes = None, []
    for t in cands:
        if devices % t:
            raise ValueError(f"decode layout: tensor={t} does not divide the {devices} devices")
        reps = devices // t
        fit = slots_per_replica(m, t, free_bytes, cache_len) if math.isfinite(free_bytes) \
            else 1 << 30
        s = balanced_slots(-(-requests // reps), fit)
        if s == 0:
            notes.append(f"tensor {t}: the weights leave no memory for a slot")
            continue
        hbm, ici = step_time(m, t, s, kv_tokens, hbm_bw, ici_bw)
        rate = s / t / (hbm + ici)
        notes.append(f"tensor {t}: {s} slots/replica, {rate:,.0f} tok/s/device")
        if best is None or rate > best.tokens_per_s_per_device * 1.0001:
            best = Choice(DecodeLayout(t, reps), s, fit, rate, "")
    if best is None:
        raise ValueError("decode layout: no tensor width leaves memory for one slot (" +
                         "; ".join(notes) + ")")
    return dataclasses.replace(best, why="; ".join(notes))


def devices_per_host(devices) -> int:
    counts: dict[int, int] = {}
    for d in devices:
        counts[d.process_index] = counts.get(d.process_index, 0) + 1
    return min(counts.values())


def decode_mesh(devices, tensor: int, axis_types=None) -> Mesh:
    """The (replicas, 1, tensor) mesh over `devices` in their order: consecutive devices form a
    replica. Pass the learner mesh's flat order: `jax.make_mesh` puts ICI neighbours next to
    each other on TPU and a host's GPUs together, and a jitted reshard needs both meshes to list
    the same devices in the same order."""
    devs = list(devices)
    per_host = devices_per_host(devs)
    if tensor <= 0 or len(devs) % tensor or per_host % tensor:
        raise ValueError(f"decode layout: tensor={tensor} must divide the {per_host} devices of "
                         f"a host and the {len(devs)} devices")
    grid = np.asarray(devs, dtype=object).reshape(len(devs) // tensor, 1, tensor)
    return Mesh(grid, MESH_AXES, axis_types=axis_types)


def param_shardings(params, mesh: Mesh):
    """NamedShardings of `params` (an `nnx.State`) in the decode layout: the rules table on the
    decode mesh (`embed` is on fsdp, which is 1 here: weights split only over tensor)."""
    return shd.param_shardings(params, mesh)


def reshard(params, mesh: Mesh):
    """`params` moved into the decode layout on `mesh` (same devices): one jitted copy whose
    collectives are the weight sync's cost."""
    shardings = param_shardings(params, mesh)
    return jax.device_put(params, shardings)


class WeightSync:
    """The sampler's parameters in the decode layout, moved there once per weight sync.

    Called with the learner's (cast) parameters before every sampler call; the resharded copy is
    kept for the parameters object it came from, so the calls of one step (a refresh's behavior
    generation and the step's own, DAPO top-up rounds) share one reshard. `seconds` accumulates
    the time of the reshards (blocked until the copy is complete) for the step's metrics.
    """

    def __init__(self, model_cfg, *, sampler_dtype: str, requests: int, cache_len: int,
                 tensor: int = 0, chip=None):
        self.model = DecodeModel.of(model_cfg, sampler_dtype)
        self.requests, self.cache_len = int(requests), int(cache_len)
        self.tensor, self.chip = int(tensor), chip
        self.choice: Choice | None = None
        self.mesh: Mesh | None = None
        self.seconds = 0.0
        self.count = 0
        self._src = self._dst = None

    def _choose(self, devices, axis_types=None) -> None:
        per_host = devices_per_host(devices)
        free = free_bytes(devices[0])
        if free is None:  # CPU: no memory figure; slots are bounded by the call's requests
            free = float("inf")
        if self.tensor == 0 and self.chip is None:
            # No bandwidth figures (CPU): a whole copy per device, no collectives.
            tensor = 1
        else:
            tensor = self.tensor
        hbm, ici = (self.chip.hbm_bandwidth, self.chip.ici_bandwidth) if self.chip else (1.0, 0.0)
        self.choice = choose(self.model, devices=len(devices), per_host=per_host,
                             requests=self.requests, free_bytes=free, cache_len=self.cache_len,
                             hbm_bw=hbm, ici_bw=ici, tensor=tensor)
        self.mesh = decode_mesh(devices, self.choice.layout.tensor, axis_types)

    def __call__(self, params):
        if self._src is params:
            return self._dst
        import time

        devices, axis_types = _devices_of(params)
        if self.mesh is None or list(self.mesh.devices.flat) != devices:
            self._choose(devices, axis_types)
        self._src = self._dst = None  # drop the previous copy before making the next
        t0 = time.perf_counter()
        out = reshard(params, self.mesh)
        jax.block_until_ready(out)
        self.seconds += time.perf_counter() - t0
        self.count += 1
        self._src, self._dst = params, out
        return out

    def take_seconds(self) -> float:
        """Reshard seconds since the last call."""
        s, self.seconds = self.seconds, 0.0
        return s

    def slots(self, n_requests: int) -> int:
        """Slots for a call of `n_requests`: per replica the fewer of the requests' share and
        what memory holds, times the replicas."""
        c = self.choice
        return balanced_slots(-(-n_requests // c.layout.replicas), max(c.fit, 1)) \
            * c.layout.replicas


def _devices_of(params) -> tuple[list, tuple | None]:
    """The devices `params` live on, in their mesh's order (a single device or an uncommitted
    array: that device), and the mesh's axis types."""
    for x in jax.tree_util.tree_leaves(params):
        if not isinstance(x, jax.Array):
            continue
        s = x.sharding
        if isinstance(s, jax.sharding.NamedSharding):
            return list(s.mesh.devices.flat), s.mesh.axis_types
        return sorted(s.device_set, key=lambda d: d.id), None
    return [jax.devices()[0]], None


def free_bytes(device) -> float | None:
    """HBM of `device` not in use now (None where the backend reports no memory figures)."""
    try:
        stats = device.memory_stats()
    except Exception:  # noqa: BLE001 -- backends without memory stats
        return None
    if not stats or "bytes_limit" not in stats:
        return None
    return float(stats["bytes_limit"] - stats.get("bytes_in_use", 0))
