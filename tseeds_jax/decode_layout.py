"""The one decode-layout decision: `decide(model, chip, devices, requests, free bytes) -> Choice`.

The sampler's decode layout (`hardware.sampler_placement = "decode"`, sampling/layout.py) is a
(replicas, 1, tensor) mesh over the learner's devices: `tensor` consecutive devices hold one
tensor-parallel replica of the weights and the replicas split the decode slots. The run
(`sampling.layout.WeightSync`), `tseeds plan` (scale/plan_sampler.py) and `tseeds compile`
(scale/compile_programs.py) all call `decide` with inputs built by the same helpers here, so that
the run decodes on the layout that was planned and compiled (and `tseeds compile --check`
covers what runs):

* interconnect: the chip table's one-way figure (`chips.Chip.ici_one_way`, half the
  bidirectional number), as every other roofline of the project counts collective bytes;
* memory: `planned_free_bytes` -- the usable share of the device's HBM (`chips.FIT_FRACTION`;
  HBM from `hardware.hbm_gib_per_device` or the chip table) minus the learner's resident state
  (parameters and Adam's two float32 moments, split evenly over the devices). Not the memory a
  device reports free at run time: that depends on what else happens to be alive at the first
  weight sync and is unknown to the planner and the compiler, so a layout chosen from it could
  be one that was never compiled.

`choose_tensor`'s search: an HBM roofline per device (weights / tensor read once per step, plus
the slots' KV cache, plus the tensor-parallel all-reduces at the interconnect bandwidth), among
the widths that divide the devices of a host and the heads, subject to memory; the slots per
replica from memory too (`slots_per_replica`), up to the requests of the call.

Pure arithmetic: no JAX (callers describe the devices by counts).
"""

from __future__ import annotations

import dataclasses
import math

from tseeds_jax.chips import FIT_FRACTION

# Decode slots of a sampler call without `num_slots` (config.hardware.sampler_slots = 0): the
# one rule the driver, the occupancy metrics, `tseeds plan` and `tseeds compile` share.
MAX_DEFAULT_SLOTS = 256


def default_slots(n_requests: int) -> int:
    """The next power of two >= the requests, at most MAX_DEFAULT_SLOTS."""
    return min(MAX_DEFAULT_SLOTS, 1 << (max(n_requests, 1) - 1).bit_length())

# Memory a decode call may use on a device is this share of what is free after the weights:
# the rest covers the prefill's activations, the output buffers and allocator fragmentation.
MEMORY_SHARE = 0.85
# Bytes per element of the dtype names configs use.
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
ADAM_MOMENT_BYTES = 8  # two float32 moments per parameter


@dataclasses.dataclass(frozen=True)
class LoraShape:
    """A LoRA run as the layout sees it (rl/learn/adapters.py): the frozen base has no optimizer
    state; the float32 adapters and their two moments are the trained state; a "merged" sampler
    keeps its base copy beside the merged weights, a "lowrank" one reads the adapters too."""

    adapter_params: int
    merged: bool
    ADAPTER_BYTES = 4  # float32 adapters (and each Adam moment)


@dataclasses.dataclass(frozen=True)
class DecodeModel:
    """The numbers of a model that the layout choice needs (bytes in the sampler's dtypes)."""

    weight_bytes: int  # all parameters, sampler dtype
    kv_bytes_per_token: int  # keys + values (+ int8 scales) of one position, all layers, heads
    hidden: int  # D: the all-reduced activation width
    layers: int  # decoder layers (two all-reduces each)
    kv_heads: int  # a tensor width must divide them
    heads: int  # and the query heads
    act_bytes: int = 2  # activation dtype bytes (the all-reduced [slots, D])
    held_bytes: int = 0  # kept beside the weights a step reads (a merged LoRA sampler's base)

    @classmethod
    def of(cls, cfg, sampler_dtype: str, lora: LoraShape | None = None) -> DecodeModel:
        """From a `ModelConfig` (its analytic parameter count; no abstract model needed).
        lora: a LoRA run's adapters and how its sampler gets them."""
        weight, held = cfg.num_params * DTYPE_BYTES[sampler_dtype], 0
        if lora is not None and lora.merged:  # the base (param dtype) beside the merged weights
            held = cfg.num_params * DTYPE_BYTES[cfg.param_dtype]
        elif lora is not None:  # low-rank terms: the float32 adapters read at every step too
            weight += lora.adapter_params * LoraShape.ADAPTER_BYTES
        return cls(weight_bytes=weight,
                   kv_bytes_per_token=cfg.kv_bytes_per_token, hidden=cfg.hidden_size,
                   layers=cfg.num_hidden_layers, kv_heads=cfg.num_key_value_heads,
                   heads=cfg.num_attention_heads, act_bytes=DTYPE_BYTES[cfg.dtype],
                   held_bytes=held)


@dataclasses.dataclass(frozen=True)
class DecodeLayout:
    """`tensor` devices per replica, `replicas` replicas."""

    tensor: int
    replicas: int

    @property
    def devices(self) -> int:
        return self.tensor * self.replicas


@dataclasses.dataclass(frozen=True)
class Choice:
    layout: DecodeLayout
    slots: int  # per replica, for the planned call
    fit: int  # per replica, what memory holds
    tokens_per_s_per_device: float  # serial bound: HBM + interconnect
    why: str

    def record(self) -> dict:
        """What `tseeds compile` writes into its manifest and the run compares with."""
        return dict(tensor=self.layout.tensor, replicas=self.layout.replicas,
                    slots_per_replica=self.slots, fit_slots_per_replica=self.fit)


def learner_state_bytes(cfg, devices: int, lora: LoraShape | None = None) -> int:
    """Bytes per device of the learner's resident state: parameters in their dtype and Adam's
    two float32 moments, split evenly over `devices` (a LoRA run: the moments of the adapters
    only)."""
    if lora is not None:
        n = lora.adapter_params * (LoraShape.ADAPTER_BYTES + ADAM_MOMENT_BYTES)
        return (cfg.num_params * DTYPE_BYTES[cfg.param_dtype] + n) // devices
    return cfg.num_params * (DTYPE_BYTES[cfg.param_dtype] + ADAM_MOMENT_BYTES) // devices


def planned_free_bytes(cfg, devices: int, hbm_bytes: float | None,
                       lora: LoraShape | None = None) -> float:
    """HBM per device the decode layout plans with (module doc); inf when the HBM is unknown
    (CPU: slots are then bounded by the call's requests)."""
    if not hbm_bytes:
        return float("inf")
    return hbm_bytes * FIT_FRACTION - learner_state_bytes(cfg, devices, lora)


def tensor_candidates(m: DecodeModel, devices: int, per_host: int) -> list[int]:
    """Widths that split the KV heads and the query heads evenly and fit in one host."""
    return [t for t in range(1, per_host + 1)
            if per_host % t == 0 and devices % t == 0 and m.kv_heads % t == 0
            and m.heads % t == 0]


def slots_per_replica(m: DecodeModel, tensor: int, free_bytes: float, cache_len: int) -> int:
    """Slots one replica holds: what is free on a device after its weight shard, over one slot's
    KV on a device (its share of the KV heads), at `MEMORY_SHARE`."""
    left = MEMORY_SHARE * free_bytes - (m.weight_bytes + m.held_bytes) / tensor
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


def choose_tensor(m: DecodeModel, *, devices: int, per_host: int, requests: int,
                  free_bytes: float, cache_len: int, kv_tokens: float | None = None,
                  hbm_bw: float = 1.0, ici_bw: float = 0.0, tensor: int = 0) -> Choice:
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


def decide(m: DecodeModel, *, chip, devices: int, per_host: int, requests: int,
           free_bytes: float, cache_len: int, tensor: int = 0) -> Choice:
    """The decode layout of a sampler call of `requests` sequences over `devices` devices
    (`per_host` of them per host) of `chip` (a `chips.Chip`, None when unknown: CPU), with
    `free_bytes` per device from `planned_free_bytes`. `tensor` > 0 forces the width; without
    a chip's bandwidth figures the width is 1 (a whole copy per device, no collectives)."""
    if chip is None:
        return choose_tensor(m, devices=devices, per_host=min(per_host, devices),
                             requests=requests, free_bytes=free_bytes, cache_len=cache_len,
                             tensor=tensor or 1)
    return choose_tensor(m, devices=devices, per_host=min(per_host, devices), requests=requests,
                         free_bytes=free_bytes, cache_len=cache_len, hbm_bw=chip.hbm_bandwidth,
                         ici_bw=chip.ici_one_way, tensor=tensor)


def decide_for(cfg, *, sampler_dtype: str, chip, devices: int, per_host: int, requests: int,
               hbm_bytes: float | None, cache_len: int, tensor: int = 0,
               lora: LoraShape | None = None) -> Choice:
    """`decide` for a `ModelConfig` on devices with `hbm_bytes` of HBM each: what the run, the
    planner and the compiler call (the model's numbers and the free memory built here). lora:
    a LoRA run's `LoraShape` (`rl.learn.adapters.lora_shape`), or None."""
    return decide(DecodeModel.of(cfg, sampler_dtype, lora), chip=chip, devices=devices,
                  per_host=per_host, requests=requests,
                  free_bytes=planned_free_bytes(cfg, devices, hbm_bytes, lora),
                  cache_len=cache_len, tensor=tensor)


def decode_requests(batch_prompts: int, group_size: int, refresh_interval: int) -> int:
    """Sequences of the run's largest sampler call: a refresh samples the T-1 seeded batches at
    once (ThinkingSeeds._refresh (rl/methods/seeds.py)), else a step's rows."""
    return batch_prompts * group_size * max(refresh_interval - 1, 1)


def read_recorded(where: str) -> tuple[str, dict | None]:
    """(path, the decode layout recorded or None) of a `tseeds compile --out` folder or its
    manifest.json (scale/compile_manifest.py writes it; read here so that the run needs no
    import of `scale`)."""
    import json
    import os

    path = where if os.path.isfile(where) else os.path.join(where, "manifest.json")
    try:
        with open(path) as f:
            manifest = json.load(f)
    except FileNotFoundError:
        raise ValueError(f"{path}: no manifest (write it with `tseeds compile --out`)") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not JSON ({e})") from None
    if not isinstance(manifest, dict) or "programs" not in manifest:
        raise ValueError(f"{path}: not a `tseeds compile --out` manifest")
    return path, manifest.get("decode_layout")


def check_recorded(choice: Choice, recorded: dict | None, where: str) -> None:
    """Raises when the run's choice is not the layout `tseeds compile` recorded in `where`: the
    programs checked there (memory, `--check`) are then not the ones that would run."""
    if recorded is None:
        return
    got = choice.record()
    keys = ("tensor", "replicas", "slots_per_replica")
    if any(got[k] != recorded.get(k) for k in keys):
        raise ValueError(
            f"decode layout: this run chooses tensor {got['tensor']} x {got['replicas']} "
            f"replicas, {got['slots_per_replica']} slots per replica, but {where} was compiled "
            f"for tensor {recorded.get('tensor')} x {recorded.get('replicas')} replicas, "
            f"{recorded.get('slots_per_replica')} slots per replica: recompile for these "
            "devices, or set hardware.sampler_tensor / sampler_slots to the compiled values")
