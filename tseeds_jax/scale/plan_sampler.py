"""The sampler and statistics-pass terms of the memory plan (`plan.estimate`; docs/scale.md).

Letters as in `plan.py`: B sequences, P prompt width, R response width, T = P + R, D, F, H, K, E,
L, V, S cache length. Sizes are bytes per device.

Two placements (`hardware.sampler_placement`, `tseeds_jax.rl.hosts.sampler_params`):
* "replica": each host samples its own share of the requests on ONE device that holds a full
  copy of the parameters (and their `sampler_dtype` cast), the host's whole KV cache and every
  statistics forward;
* "decode": statistics as "sharded"; the driver runs on a decode layout of its own over the same
  devices (`sampling/layout.py`): tensor-parallel replicas chosen by an HBM roofline, slots per
  replica from the HBM left after the learner's state and the replica's weight shard;
* "sharded": the driver runs on the learner's mesh: parameters as the learner shards them (one
  layer gathered at a time over fsdp), slots and prefill rows split over the batch axes
  ("cache_batch"), kv heads over tensor when they divide (the KV cache layout is read off
  `KVCache.k_axes` / `v_axes`), statistics chunks split like the update's micro-batches. On a
  multi-host mesh every host runs the driver on the gathered global request list (data x fsdp
  must be a multiple of the host count: `rl/run/hosts.py check_sampler_placement`).
"""

from __future__ import annotations

import dataclasses
import math

from tseeds_jax.decode_layout import default_slots
from tseeds_jax.scale.plan_common import (
    adapter_layout,
    attention_kind,
    cache_bucket,
    lora_shape,
    score_rows,
    shard_factor,
)


def pow2_at_least(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


def num_hosts(w) -> int:
    return max(w.num_devices // max(w.devices_per_host, 1), 1)


def sampler_requests(w) -> int:
    """Requests of the largest sampler call of one driver loop: a refresh samples the T-1 seeded
    batches at once (rl/methods/seeds.py, the refresh); with "replica" each host runs its own
    share."""
    n = w.sequences * max(w.refresh_interval - 1, 1)
    return -(-n // num_hosts(w)) if w.sampler_placement == "replica" else n


def _split(sizes, logical: str, n: int) -> int:
    """How many ways the rules table splits a dimension `logical` of size n on this mesh."""
    return shard_factor((n,), (logical,), sizes)


@dataclasses.dataclass(frozen=True)
class SamplerMemory:
    """Per-device bytes of the sampler (one driver loop) and their notes."""

    extra_params: int  # copies on top of the resident parameters (replica, cast)
    extra_note: str
    params_read: int  # the parameters the decode call reads (sampler dtype)
    kv: int
    kv_note: str
    gathered: int  # one FSDP-gathered layer (sharded placement, fsdp > 1)
    prefill: int
    prefill_note: str
    decode: int  # one decode call's working set and output buffers

    @property
    def decode_call(self) -> int:
        """Comparable with XLA's footprint of `core.run_chunk` (tests/test_plan_xla.py)."""
        return self.params_read + self.kv + self.gathered + self.decode


def workload_decode_choice(w, hbm_bytes=None):
    """(DecodeModel, Choice): the decode layout of the workload's largest call, decided as the
    run decides it (`decode_layout.decide_for`: same model numbers, chip, free memory)."""
    from tseeds_jax import chips
    from tseeds_jax import decode_layout as dl

    m = w.model
    chip = chips.chip(w.family) if w.family in chips.FAMILIES else None
    choice = dl.decide_for(m, sampler_dtype=w.sampler_dtype, chip=chip, devices=w.num_devices,
                           per_host=w.devices_per_host, requests=sampler_requests(w),
                           hbm_bytes=hbm_bytes,
                           cache_len=cache_bucket(w.prompt_len + w.response_len),
                           tensor=w.sampler_tensor, lora=lora_shape(w))
    return dl.DecodeModel.of(m, w.sampler_dtype, lora_shape(w)), choice


def _decode_memory(w, lay, dtype_bytes, hbm_bytes) -> SamplerMemory:
    """The decode layout: a tensor-parallel copy of the weights per replica, the replica's
    slots' KV split over its KV heads, prefill rows split over the replicas."""
    from tseeds_jax.sampling.driver import PREFILL_TOKENS
    m = w.model
    pb, a, sb = (dtype_bytes[x] for x in (m.param_dtype, m.dtype, w.sampler_dtype))
    dm, c = workload_decode_choice(w, hbm_bytes)
    t, reps = c.layout.tensor, c.layout.replicas
    slots_rep = (-(-w.sampler_slots // reps) if w.sampler_slots else c.slots)
    s = cache_bucket(w.prompt_len + w.response_len)
    copy = (dm.weight_bytes + dm.held_bytes) // t  # LoRA merged: the base beside the weights
    # the learner-layout cast, kept as the key (LoRA: the adapters are the key)
    held = lay.per_device * sb if sb != pb and not w.lora_rank else 0
    kv = slots_rep * s * dm.kv_bytes_per_token // t
    h_dev, k_dev = m.num_attention_heads // t, m.num_key_value_heads // t
    t_pre = _prefill_width(w)
    rows = max(1, PREFILL_TOKENS // t_pre)
    rows = min(1 << (rows.bit_length() - 1), pow2_at_least(slots_rep))
    d, f = m.hidden_size, m.intermediate_size
    q_rows = score_rows(w, t_pre)
    prefill = (rows * h_dev * q_rows * t_pre * (4 + 4 + a)
               + rows * t_pre * dm.kv_bytes_per_token // t
               + rows * t_pre * (4 * d + 3 * f // t) * a)
    n_out = max(16, pow2_at_least(w.response_len))
    decode = slots_rep * (3 * m.vocab_size // t * 4 + h_dev * s * 8) + slots_rep * 2 * 4 * n_out
    return SamplerMemory(
        int(copy + held), f"decode layout: {reps} replicas x tensor {t}, the weights' "
        f"{w.sampler_dtype} copy split over tensor" + (" + the learner-layout cast" if held else "")
        + _lora_note(w), int(dm.weight_bytes // t), int(kv),
        f"{slots_rep} slots x S={s} x {m.num_hidden_layers} layers x 2 x "
        f"{k_dev} kv heads x E={m.head_size}{_kv_note(m)}", 0, int(prefill),
        f"{rows} rows x {t_pre} tokens per device, {_scores_note(w, t_pre)}", int(decode))


def _lora_note(w) -> str:
    if not w.lora_rank:
        return ""
    return ("; LoRA: the adapters merged into a copy of the weights at each sync"
            if w.lora_sampler == "merged" else "; LoRA: the adapters read at every step")


def _kv_note(m) -> str:
    return " int8 + float32 scales" if m.kv_cache_dtype == "int8" else ""


def _scores_note(w, t: int) -> str:
    kind = attention_kind(w, t)
    return {"xla": "scores materialised", "chunked": "scores in query chunks"}.get(
        kind, f"{kind} attention: no [t, t] scores")


def _prefill_width(w) -> int:
    if w.refresh_interval > 1:
        seed_max = (round(w.response_len * w.ratio) if w.truncation == "ratio"
                    else w.response_len - 1)
    else:
        seed_max = 0
    return min(max(16, pow2_at_least(w.prompt_len + seed_max)), w.prompt_len + w.response_len)


def sampler_memory(w, lay, dtype_bytes, hbm_bytes=None) -> SamplerMemory:
    if w.sampler_placement == "decode":
        return _decode_memory(w, lay, dtype_bytes, hbm_bytes)
    from tseeds_jax.model import KVCache
    from tseeds_jax.sampling.driver import PREFILL_TOKENS  # padded prefill tokens per device

    m = w.model
    sizes = dict(zip(("data", "fsdp", "tensor"), w.mesh))
    pb, a, sb = (dtype_bytes[x] for x in (m.param_dtype, m.dtype, w.sampler_dtype))
    sharded = w.sampler_placement == "sharded"
    requests = sampler_requests(w)
    slots = w.sampler_slots or default_slots(requests)
    if sharded:
        shards = sizes["data"] * sizes["fsdp"]  # "cache_batch"
        slots = -(-slots // shards) * shards  # the driver rounds slots up to whole rows per device
        extra = lay.per_device * sb if sb != pb else 0
        extra_note = f"{w.sampler_dtype} cast of this device's parameter shards"
        params_read = lay.per_device * sb
        if w.lora_rank:  # merged: a merged copy of the shards; low-rank: the adapters read too
            ad = adapter_layout(m, w.mesh, w.lora_rank, tuple(w.lora_targets)).per_device * 4
            extra = lay.per_device * sb if w.lora_sampler == "merged" else extra + ad
            params_read += 0 if w.lora_sampler == "merged" else ad
    else:
        shards = 1
        single = w.num_devices == 1  # local_replica of a one-device state is the state itself
        extra = (0 if single else lay.total * pb) + (lay.total * sb if sb != pb else 0)
        extra_note = "full replica on one device per host" + (" + cast copy" if sb != pb else "")
        params_read = lay.total * sb
        if w.lora_rank:
            ad = adapter_layout(m, w.mesh, w.lora_rank, tuple(w.lora_targets)).total * 4
            merged = w.lora_sampler == "merged"
            extra = (0 if single else lay.total * pb) + (
                lay.total * sb if merged or sb != pb else 0) + ad
            params_read += 0 if merged else ad
        extra_note += _lora_note(w)
    s = cache_bucket(w.prompt_len + w.response_len)
    dims = {"cache_batch": slots, "cache_length": s, "cache_kv_heads": m.num_key_value_heads,
            "cache_head_dim": m.head_size}
    kv_sizes = sizes if sharded else {"data": 1, "fsdp": 1, "tensor": 1}
    kv = 0
    ci, sc = m.kv_element_bytes
    for axes, item in ((KVCache.k_axes, ci), (KVCache.v_axes, ci), (KVCache.scale_axes, sc),
                       (KVCache.scale_axes, sc)):
        shape = tuple(dims[x] for x in axes)
        kv += math.prod(shape) // shard_factor(shape, axes, kv_sizes) * m.num_hidden_layers * item
    slots_dev = slots // shards
    k_dev = m.num_key_value_heads // (_split(kv_sizes, "cache_kv_heads", m.num_key_value_heads))
    kv_note = (f"{slots_dev} slots x S={s} x {m.num_hidden_layers} layers x 2 x {k_dev} kv heads "
               f"x E={m.head_size}{_kv_note(m)}")
    h_dev = m.num_attention_heads // _split(kv_sizes, "activation_heads", m.num_attention_heads)
    gathered = int(lay.layer_per_tensor * sb) if sharded and sizes["fsdp"] > 1 else 0

    t_pre = _prefill_width(w)
    rows = max(1, PREFILL_TOKENS // t_pre)
    rows = min(1 << (rows.bit_length() - 1), -(-pow2_at_least(requests) // shards))
    d, f = m.hidden_size, m.intermediate_size
    q_rows = score_rows(w, t_pre)  # 0 with a flash kernel (splash on TPU): no [t, t] buffer
    prefill = (rows * h_dev * q_rows * t_pre * (4 + 4 + a)  # scores, softmax (f32), probs
               + rows * t_pre * m.num_hidden_layers * 2 * k_dev * (m.head_size * ci + sc)  # own KV
               + rows * t_pre * (4 * d + 3 * f) * a)
    n_out = max(16, pow2_at_least(w.response_len))
    # The logits stay split over tensor along the vocabulary (sampling/vocab_parallel.py; a
    # top-p rollout gathers them, which this does not model).
    v_dev = m.vocab_size // _split(kv_sizes, "activation_vocab", m.vocab_size)
    decode = slots_dev * (3 * v_dev * 4 + h_dev * s * 8) + slots_dev * 2 * 4 * n_out
    return SamplerMemory(int(extra), extra_note, int(params_read), int(kv), kv_note, gathered,
                         int(prefill), f"{rows} rows x {t_pre} tokens per device, "
                         f"{_scores_note(w, t_pre)}", int(decode))


def stats_rows_per_device(w) -> tuple[int, str]:
    """(sequences per statistics forward on one device, note).

    The statistics pass (rl/learn/row_pass.py: refresh behavior log-probs, reference log-probs,
    the hooks' passes: old log-probs recompute, stale annotate, SIS top-K) runs
    `micro_batch_size` rows per forward (all rows when 0): host-local rows with "replica"; with
    "sharded" global rows (one global array of every host's rows on a multi-host mesh), rounded
    up to whole rows per device.
    `w.stats_rows` overrides every pass's rows per forward."""
    sharded = w.sampler_placement in ("sharded", "decode")  # decode: statistics as sharded
    hosts = 1 if sharded else num_hosts(w)
    shards = w.mesh[0] * w.mesh[1] if sharded else 1
    passes = []
    if w.refresh_interval > 1:
        passes.append(("refresh", w.sequences * (w.refresh_interval - 1), w.micro_batch_size))
    if w.kl_coef:
        passes.append(("reference", w.sequences, w.micro_batch_size))
    if w.plugin_stats:
        passes.append(("plugin", w.sequences, w.micro_batch_size))
    from tseeds_jax.rl.learn.row_pass import stats_chunk_rows  # the trainer's own chunking

    best, note = 0, ""
    for name, total, chunk in passes:
        total = -(-total // hosts)
        chunk = min(w.stats_rows or chunk or total, total)
        per_dev = stats_chunk_rows(total, chunk, shards) // shards
        if per_dev > best:
            best, note = per_dev, f"{name} pass: {chunk} sequences per forward"
    return best, note
