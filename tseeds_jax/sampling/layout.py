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

Which tensor width and how many slots: `tseeds_jax.decode_layout.decide`, the one decision that
`tseeds plan` and `tseeds compile` make too, from the same inputs.
"""

from __future__ import annotations

import logging

import jax
import numpy as np
from jax.sharding import Mesh

from tseeds_jax import decode_layout as dl
from tseeds_jax.model import sharding as shd
from tseeds_jax.model.rules import MESH_AXES

log = logging.getLogger(__name__)


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
    `hbm_bytes`: HBM per device (config or chip table; None: unknown, e.g. CPU). `recorded`: the
    layout a `tseeds compile` manifest holds (`expect_compiled`): the run refuses another one.
    """

    def __init__(self, model_cfg, *, sampler_dtype: str, requests: int, cache_len: int,
                 tensor: int = 0, chip=None, hbm_bytes: float | None = None, lora=None):
        """lora: a LoRA run's `decode_layout.LoraShape` (the weights synced are its adapters)."""
        self.model_cfg, self.sampler_dtype, self.lora = model_cfg, sampler_dtype, lora
        self.requests, self.cache_len = int(requests), int(cache_len)
        self.tensor, self.chip, self.hbm_bytes = int(tensor), chip, hbm_bytes
        self.recorded: dict | None = None
        self.recorded_where = ""
        self.choice: dl.Choice | None = None
        self.mesh: Mesh | None = None
        self.seconds = 0.0
        self.count = 0
        self._src = self._dst = None

    def expect_compiled(self, recorded: dict | None, where: str) -> None:
        """Refuse (at the first weight sync, before any sampling) a layout other than the one
        `tseeds compile` recorded in `where`."""
        self.recorded, self.recorded_where = recorded, where

    def decide(self, devices) -> dl.Choice:
        """The layout for `devices` (the learner mesh's, in its order): `decode_layout.decide`,
        as `tseeds plan` and `tseeds compile` call it."""
        return dl.decide_for(self.model_cfg, sampler_dtype=self.sampler_dtype, chip=self.chip,
                             devices=len(devices), per_host=devices_per_host(devices),
                             requests=self.requests, hbm_bytes=self.hbm_bytes,
                             cache_len=self.cache_len, tensor=self.tensor, lora=self.lora)

    def _choose(self, devices, axis_types=None) -> None:
        self.choice = self.decide(devices)
        dl.check_recorded(self.choice, self.recorded, self.recorded_where)
        log.info("decode layout: tensor %d x %d replicas, %d slots per replica (%s)",
                 self.choice.layout.tensor, self.choice.layout.replicas, self.choice.slots,
                 self.choice.why)
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
        return dl.balanced_slots(-(-n_requests // c.layout.replicas), max(c.fit, 1)) \
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
