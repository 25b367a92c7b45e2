"""Per-device memory plan of a training config: what lives in HBM, per phase, and does it fit.

Letters: B sequences, P prompt width, R response width, T = P + R, D model width, F MLP width,
H query heads, K kv heads, E head dim, L layers, V vocabulary, N tokens, S cache length,
G group size. Sizes are bytes per device unless a name says otherwise.

The model (docs/scale.md explains each term):

* resident for the whole run: parameters, AdamW's two moments (param dtype, as optax keeps
  them), the frozen reference parameters when `loss.kl_coef > 0`. Each leaf is divided by the
  mesh axes that the rules table of `tseeds_jax.model.sharding` gives it (embed -> fsdp; heads,
  MLP width, vocab -> tensor; a dimension that does not divide is replicated, as there).
* learner step (one micro-batch alive at a time): the gradient accumulator and the micro-batch's
  gradient, the batch, the activations that the backward pass needs (all layers, or only the
  layer inputs with `model.remat` plus one layer recomputed), the backward working set of one
  layer, the fused log-prob kernel's buffers (never [tokens, vocab] logits), FSDP-gathered layer
  weights; or, if larger, the optimizer update's working set.
* sampler (`plan_sampler.py`), by `hardware.sampler_placement`: "replica" -- a full parameter
  copy (and its `model.sampler_dtype` cast) on one device per host with the host's whole KV cache;
  "sharded" -- the learner's parameter shards (one layer gathered over fsdp at a time), the KV
  cache split over the batch axes and kv heads over tensor by the rules table. Plus one batched
  prefill (its attention scores materialised unless the attention is a flash kernel: splash on
  TPU, cuDNN on GPU; `attention_kind`) or one decode step.
* statistics passes (behavior / old / reference log-probs): no-grad forwards of the rows the
  trainer gives one call (`micro_batch_size` rows per forward of rl/learn/row_pass.py, also
  for the passes of rl/learn/hooks.py), on the replica device or split over the mesh.
* host: the seed cache (T-1 batches of B x G seeds: token ids and float32 log-probs / entropies).

On a TPU target with remat and the Pallas kernel, the learner and statistics terms follow what XLA's
TPU compiler was seen to keep alive in the paper configs' compiled updates instead (the TPU_*
constants, `_learner_compiled`; docs/scale.md "The TPU learner model").

Peak HBM = resident + max(learner step, sampler, statistics pass). Activation counts per layer
(how many [N, D], [N, F] and [B, H, T, T] buffers are alive) are the coefficients below; they were
read off the layer code and checked against XLA's buffer assignment (tests/test_plan_xla.py).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from tseeds_jax.chips import FIT_FRACTION, GIB, Accelerator
from tseeds_jax.scale import plan_sampler
from tseeds_jax.scale.plan_common import (
    DTYPE_BYTES,
    ParamLayout,
    adapter_layout,
    param_layout,
    score_rows,
)

# ---- activation coefficients (buffers alive per decoder layer, in units of the named shape) ----
# Saved for the backward pass without remat: residual in/mid, two norm outputs and their float32
# statistics ([N, D]); q, attention output ([N, H*E]), k, v ([N, K*E]); gate, up and
# silu(gate)*up ([N, F]); the float32 softmax of the scores ([B, H, T, T]).
SAVED_ND, SAVED_NF, SAVED_SCORES = 5.0, 3.0, 1.0
# Backward of one layer on top of what is saved: gradients of the MLP and attention
# intermediates, d scores / d probs (float32).
WORK_ND, WORK_NF, WORK_SCORES = 4.0, 4.0, 2.0
# Chunked XLA kernel: logits tiles alive in its backward (z, d z and one temporary).
CHUNKED_TILES = 3
# Optimizer update: per-leaf temporaries (clipped grad, new moments, update) of the largest leaf.
OPT_LEAF_TEMPS = 4

# ---- the learner step as XLA's TPU compiler lays it out (remat, FSDP; `_learner_compiled`) ----
# Read off the buffers alive at the peak of compiled paper-scale updates (libtpu 0.0.42.1,
# `tseeds compile`, HLO dumps; docs/scale.md): the TPU compiler fuses d probs -> d scores, so one
# layer's attention backward holds one float32 [b, H, T, T] buffer and the compute-dtype probs;
# gradients are alive twice (the accumulator and the micro-batch's reduce-scattered float32
# gradients); the float32 unembedding gathered for the log-prob kernel stays alive through the
# layers' backward; the compute-dtype casts of the parameter shards are hoisted out of the
# micro-batch loop (two copies); layer weights are gathered in the compute dtype, one layer at a
# time.
TPU_SCORE_BUFFERS_F32 = 1
TPU_GRAD_COPIES = 2
TPU_PARAM_CASTS = 2
# What the heap needs beyond the live buffers: XLA places multi-GiB temporaries (a float32
# [b, H, T, T] scores buffer, a float32 [D, V]) in one temp allocation, and its size exceeds the
# bytes alive at any moment by a share of the largest such buffer. Fitted to the three compiled
# paper updates (docs/scale.md "The TPU learner model"): the allowance is this share of the
# largest temporary.
TPU_HEAP_SHARE_OF_LARGEST = 0.5
# float32 [D, V]-sized buffers of the log-prob kernel's backward besides the gathered unembedding
# (d unembed; the embedding's full-size gradient before its reduce-scatter; with splash the
# kernel's moment is the update's peak). Read off the splash-era compiles (docs/scale.md).
TPU_KERNEL_DV_F32 = 1
# Compiled program code in HBM (`memory_analysis().generated_code_size_in_bytes`): 0.12-0.15 GiB
# for the paper variants' update and statistics programs.
TPU_PROGRAM_CODE = 128 << 20
# Compute-dtype copies of the gathered unembedding beside the float32 one in the statistics
# forward (the kernel's moment there).
TPU_STATS_HEAD_CASTS = 0
# [N, D]-sized buffers per layer kept from the forward for the backward under remat (the layer
# input and what the compiler keeps beside it).
TPU_SAVED_ND_PER_LAYER = 3
# Further float32 [D, V] copies in the statistics forward when the vocabulary is split over
# `tensor` (the kernel takes the unembedding whole: it is regathered from the tensor layout).
TPU_STATS_TENSOR_DV_F32 = 2
TPU_FAMILIES = ("v4", "v5e", "v5p", "v6e")


@dataclasses.dataclass(frozen=True)
class Workload:
    """Everything the estimate depends on; `from_train_config` builds it from a config."""

    model: Any  # tseeds_jax.model.ModelConfig (param_dtype / dtype / remat included)
    mesh: tuple[int, int, int]  # (data, fsdp, tensor), resolved
    batch_prompts: int
    group_size: int
    prompt_len: int
    response_len: int
    mini_batches: int = 1
    micro_batch_size: int = 0  # global sequences per micro-batch; 0 = the mini-batch
    refresh_interval: int = 1
    truncation: str = "ratio"
    ratio: float = 0.5
    sampler_dtype: str = "float32"
    sampler_slots: int = 0  # 0 = the driver's default: next power of two >= requests, <= 256
    sampler_placement: str = "replica"  # "replica" | "sharded" | "decode" (hardware.*)
    sampler_tensor: int = 0  # "decode": devices per tensor-parallel replica (0: chosen)
    family: str = ""  # accelerator family ("v5p", "h100", ...): the decode layout's roofline
    stats_rows: int = 0  # sequences per statistics forward; 0 = as the trainer chunks them
    plugin_stats: bool = False  # rl/learn/hooks.py runs a statistics pass over each batch (chunked)
    kernel_impl: str = "pallas"  # "pallas" (TPU/GPU) | "chunked" (XLA, CPU default)
    compiler: str = "cpu"  # "tpu" | "gpu" | "cpu": whose buffer assignment the learner terms model
    # rollout.length_distribution: the step model's response lengths (scale/step_model.py)
    length_distribution: str = "lognormal:median=0.3,sigma=1.0"
    kl_coef: float = 0.0
    old_logp_recompute: bool = False
    devices_per_host: int = 1
    grad_reduce: str = "micro_batch"  # optim.grad_reduce: "update" keeps unreduced gradients
    # config.lora (rank 0: full-parameter training): adapters trained on a frozen base
    lora_rank: int = 0
    lora_targets: tuple[str, ...] = ()
    lora_sampler: str = "merged"

    @property
    def sequences(self) -> int:
        return self.batch_prompts * self.group_size

    @property
    def num_devices(self) -> int:
        return math.prod(self.mesh)

    def replace(self, **changes) -> Workload:
        return dataclasses.replace(self, **changes)


@dataclasses.dataclass(frozen=True)
class Term:
    phase: str  # "resident" | "learner" | "sampler" | "stats" | "host"
    name: str
    bytes: int
    note: str = ""


@dataclasses.dataclass(frozen=True)
class MemoryPlan:
    workload: Workload
    terms: tuple[Term, ...]
    hbm_bytes: int | None
    warnings: tuple[str, ...] = ()

    def phase_total(self, phase: str) -> int:
        return sum(t.bytes for t in self.terms if t.phase == phase)

    @property
    def learner_step_bytes(self) -> int:
        """Resident state + the learner step: comparable to XLA's footprint of the update."""
        return self.phase_total("resident") + self.phase_total("learner")

    @property
    def peak_phase(self) -> str:
        return max(("learner", "sampler", "stats"), key=self.phase_total)

    @property
    def peak_bytes(self) -> int:
        return self.phase_total("resident") + self.phase_total(self.peak_phase)

    @property
    def usable_bytes(self) -> int | None:
        return None if self.hbm_bytes is None else int(self.hbm_bytes * FIT_FRACTION)

    @property
    def fits(self) -> bool | None:
        return None if self.hbm_bytes is None else self.peak_bytes <= self.usable_bytes

    def to_dict(self) -> dict[str, Any]:
        w = self.workload
        return {
            "mesh": dict(zip(("data", "fsdp", "tensor"), w.mesh)),
            "terms": [dataclasses.asdict(t) for t in self.terms],
            "phases": {p: self.phase_total(p)
                       for p in ("resident", "learner", "sampler", "stats", "host")},
            "peak_phase": self.peak_phase, "peak_bytes": self.peak_bytes,
            "learner_step_bytes": self.learner_step_bytes,
            "hbm_bytes": self.hbm_bytes, "usable_bytes": self.usable_bytes, "fits": self.fits,
            "warnings": list(self.warnings),
        }


# ---------------------------------------------------------------------------------------------
# parameters under the sharding rules


def _div(n: int, k: int) -> tuple[int, bool]:
    """(n / k, True) when k divides n, else (n, False): indivisible dims are replicated."""
    return (n // k, True) if k > 1 and n % k == 0 else (n, k == 1)


# ---------------------------------------------------------------------------------------------
# the estimate


def estimate(w: Workload, *, hbm_bytes: int | None = None) -> MemoryPlan:
    """The per-device memory plan of `w` (see the module docstring for the model)."""
    m = w.model
    data, fsdp, tensor = w.mesh
    if min(w.mesh) < 1:
        raise ValueError(f"mesh {w.mesh}: every axis must be resolved to a size >= 1")
    warns: list[str] = []
    pb, a = DTYPE_BYTES[m.param_dtype], DTYPE_BYTES[m.dtype]
    lay = param_layout(m, w.mesh)
    d, f, v, e = m.hidden_size, m.intermediate_size, m.vocab_size, m.head_size
    h, k, nl = m.num_attention_heads, m.num_key_value_heads, m.num_hidden_layers
    h_t, ok_h = _div(h, tensor)
    k_t, ok_k = _div(k, tensor)
    f_t, ok_f = _div(f, tensor)
    if tensor > 1 and not (ok_h and ok_k and ok_f):
        warns.append(f"mesh.tensor={tensor} does not divide heads={h} / kv_heads={k} / "
                     f"mlp={f}: those activations are replicated over tensor")
    terms: list[Term] = []
    add = lambda phase, name, nbytes, note="": terms.append(  # noqa: E731
        Term(phase, name, int(nbytes), note))

    # ---- resident ----
    param_bytes = lay.per_device * pb
    add("resident", "parameters", param_bytes,
        f"{lay.total / 1e9:.2f}B params x {pb} B / (fsdp x tensor shards)"
        + ("; the frozen base: no gradient, no optimizer state" if w.lora_rank else ""))
    # What is trained: every parameter, or (LoRA) the float32 adapters, laid out by their rule.
    tl = adapter_layout(m, w.mesh, w.lora_rank, tuple(w.lora_targets)) if w.lora_rank else lay
    tb = 4 if w.lora_rank else pb
    train_bytes = tl.per_device * tb
    if w.lora_rank:
        add("resident", "LoRA adapters", train_bytes, f"{tl.total / 1e6:.1f}M float32 "
            f"(rank {w.lora_rank}, {len(w.lora_targets)} targets)")
    add("resident", "optimizer state", 2 * train_bytes, "AdamW mu + nu in the param dtype"
        + (" (of the adapters)" if w.lora_rank else ""))
    if w.kl_coef and not w.lora_rank:  # LoRA: the reference is the base without adapters
        add("resident", "reference parameters", param_bytes, "loss.kl_coef > 0")

    # ---- learner step ----
    n_seq = w.sequences
    batch_shards = data * fsdp
    mini = n_seq // w.mini_batches
    micro = w.micro_batch_size or mini
    b, ok_b = _div(micro, batch_shards)
    if batch_shards > 1 and not ok_b:
        warns.append(f"micro-batch of {micro} sequences is not divisible by data x fsdp = "
                     f"{batch_shards}: it is replicated on every device")
    t_len = w.prompt_len + w.response_len
    n_tok = b * t_len
    n_resp = b * w.response_len
    rows_dev = n_seq // batch_shards if n_seq % batch_shards == 0 else n_seq
    batch_bytes = rows_dev * (2 * t_len * 4 + 7 * w.response_len * 4 + 4)
    add("learner", "batch", batch_bytes, f"{rows_dev} sequences x T={t_len} on this device")
    # optim.grad_reduce = "update" (rl/learn/grad_accum.py): every device keeps its rows' gradients
    # unreduced, whole but for the tensor split, in a float32 accumulator until the update's
    # one reduction.
    unreduced = w.grad_reduce == "update" and batch_shards > 1 and ok_b
    grad_bytes = tl.per_tensor * 4 if unreduced else train_bytes
    add("learner", "gradient accumulator", grad_bytes,
        "float32, unreduced: whole per device but for the tensor split (grad_reduce='update')"
        if unreduced else
        "param dtype; this micro-batch's gradients replace the activations they free")
    nd, nf = n_tok * d * a, n_tok * f_t * a
    n_he = n_tok * (2 * h_t + 2 * k_t) * e * a
    q_rows = score_rows(w, t_len)  # 0 with a flash kernel: no [T, T] buffer at all
    scores = b * h_t * q_rows * t_len * (4 + (a if a != 4 else 0))
    saved_layer = SAVED_ND * nd + SAVED_NF * nf + n_he + SAVED_SCORES * scores
    work_layer = WORK_ND * nd + WORK_NF * nf + n_he + WORK_SCORES * b * h_t * q_rows * t_len * 4
    outside = 2 * nd + n_resp * d * a + b * q_rows * t_len  # embeddings, final norm, slice, mask
    if m.remat:
        saved = nl * nd + outside
        layer_bwd = saved_layer + work_layer
        note = f"remat: {nl} layer inputs; {b} seq x T={t_len} per device"
    else:
        saved = nl * saved_layer + outside
        layer_bwd = work_layer
        note = f"{nl} layers' residuals; {b} seq x T={t_len} per device"
    other = (nl * saved_layer + outside + work_layer if m.remat
             else nl * nd + outside + saved_layer + work_layer)
    note += f"; {'without' if m.remat else 'with'} remat: {other / GIB:.2f} GiB incl. layer backward"
    add("learner", "saved activations", saved, note)
    if w.compiler == "tpu" and m.remat and w.kernel_impl == "pallas":
        _learner_compiled(w, lay, add, n_tok=n_tok, n_resp=n_resp, b=b, t_len=t_len,
                          h_t=h_t, k_t=k_t, f_t=f_t, param_bytes=train_bytes,
                          unreduced=unreduced)
        return _after_learner(w, lay, terms, add, warns, hbm_bytes, h=h, f=f, h_t=h_t, f_t=f_t,
                              t_len=t_len, n_seq=n_seq)
    cdt = 4 if 4 in (pb, a) else a
    if w.kernel_impl == "chunked":
        bn, bv = min(2048, n_resp), min(2048, v)
        kern = CHUNKED_TILES * bn * bv * 4 + d * v * 4 + 2 * n_resp * d * 4 + 6 * n_resp * 4
        knote = f"chunked kernel ({CHUNKED_TILES} [{bn}x{bv}] f32 tiles, f32 d unembed)"
    else:
        np_, nv = -(-n_resp // 256) * 256, -(-v // 512)
        kern = 4 * nv * np_ * 4 + d * v * 4 + np_ * d * 4 + 256 * 512 * 4 * 4
        knote = "pallas kernel (partial softmax stats, f32 d unembed and d hidden)"
    if fsdp * tensor > 1:
        kern += d * v * cdt
        knote += " + gathered unembed"
    # The kernel's backward runs before the layers' backward: the two working sets never overlap.
    lnote = ("one layer recomputed + its backward" if m.remat else "one layer's backward")
    if kern >= layer_bwd:
        add("learner", "backward working set", kern,
            f"{knote}; > {lnote} ({layer_bwd / GIB:.2f} GiB)")
    else:
        add("learner", "backward working set", layer_bwd,
            f"{lnote}; > {knote} ({kern / GIB:.2f} GiB)")
    if fsdp > 1 or pb != a:
        gathered = 2 * lay.layer_per_tensor * (pb + a) if fsdp > 1 else lay.layer_per_tensor * a
        add("learner", "gathered layer weights", gathered,
            "FSDP all-gather of 2 layers (+ compute-dtype copy)" if fsdp > 1 else
            "compute-dtype copy of one layer's weights")
    opt_work = OPT_LEAF_TEMPS * tl.largest_leaf_per_device * 4
    backward = sum(t.bytes for t in terms if t.phase == "learner")
    optimizer = batch_bytes + 2 * grad_bytes + opt_work
    if optimizer > backward:  # the optimizer update dominates: replace the backward terms
        terms = [t for t in terms if t.phase != "learner"]
        add("learner", "batch", batch_bytes)
        add("learner", "gradients", 2 * grad_bytes, "accumulator + last micro-batch's")
        add("learner", "optimizer update temporaries", opt_work)

    return _after_learner(w, lay, terms, add, warns, hbm_bytes, h=h, f=f, h_t=h_t, f_t=f_t,
                          t_len=t_len, n_seq=n_seq)


def _after_learner(w, lay, terms, add, warns, hbm_bytes, *, h, f, h_t, f_t, t_len, n_seq) -> MemoryPlan:
    """The sampler, statistics and host phases (shared by both learner models)."""
    m = w.model
    data, fsdp, tensor = w.mesh
    pb, a = DTYPE_BYTES[m.param_dtype], DTYPE_BYTES[m.dtype]
    d, v = m.hidden_size, m.vocab_size
    # ---- sampler (plan_sampler.py) ----
    sm = plan_sampler.sampler_memory(w, lay, DTYPE_BYTES, hbm_bytes=hbm_bytes)
    if sm.extra_params:
        add("sampler", "sampler parameters", sm.extra_params, sm.extra_note)
    add("sampler", "KV cache", sm.kv, sm.kv_note)
    if sm.gathered:
        add("sampler", "gathered layer weights", sm.gathered,
            "one layer all-gathered over fsdp per decode step")
    if sm.prefill >= sm.decode:
        add("sampler", "prefill", sm.prefill, sm.prefill_note)
    else:
        add("sampler", "decode step", sm.decode,
            "logits / sampling buffers, attention scores, output buffers")
    hosts = plan_sampler.num_hosts(w)
    if w.sampler_placement in ("sharded", "decode") and hosts > 1 and \
            (w.mesh[0] * w.mesh[1]) % hosts:
        # rl/run/hosts.py check_sampler_placement: every process must own whole row blocks.
        warns.append(f"sampler_placement='sharded' on {hosts} hosts: the mesh's batch axes "
                     f"(data x fsdp = {w.mesh[0] * w.mesh[1]}) must be a multiple of the process "
                     "count (the trainer raises)")

    # ---- statistics passes (no grad) ----
    srows, snote = plan_sampler.stats_rows_per_device(w)
    if srows:
        sharded = w.sampler_placement in ("sharded", "decode")
        s_h, s_f = (h_t, f_t) if sharded else (h, f)
        sn = srows * t_len
        q_rows = score_rows(w, t_len)  # 0 with a flash kernel (splash on TPU)
        if w.compiler == "tpu" and w.kernel_impl == "pallas":
            # Compiled (docs/scale.md): the softmax fuses into one float32 scores buffer (none
            # with splash), and the log-prob kernel's moment (the float32 unembedding gathered
            # + its compute-dtype cast) is apart from the layers'.
            layer_fwd = srows * s_h * q_rows * t_len * 4 + sn * (4 * d + 3 * s_f) * a
            if sharded and fsdp > 1:  # the layer's weights gathered (+ compute-dtype copy)
                layer_fwd += lay.layer_per_tensor * (pb + a)
            head = ((d * v * (pb + TPU_STATS_HEAD_CASTS * a) if w.num_devices > 1 else 0)
                    + (TPU_STATS_TENSOR_DV_F32 * d * v * 4 if tensor > 1 else 0)
                    + 4 * -(-v // 512) * sn * 4)
            st = max(layer_fwd, head) + TPU_PROGRAM_CODE
        else:
            st = (srows * s_h * q_rows * t_len * (8 + a) + sn * (4 * d + 3 * s_f) * a
                  + srows * w.response_len * 16)
            st += (CHUNKED_TILES * min(2048, srows * w.response_len) * min(2048, v) * 4
                   if w.kernel_impl == "chunked"
                   else 4 * -(-v // 512) * srows * w.response_len * 4)
        add("stats", "forward of the batch", st, f"{srows} sequences per device ({snote})")
        if not sharded and w.num_devices > 1:
            add("stats", "parameter replica", lay.total * pb, "full replica on one device per host")
        elif sharded and fsdp > 1 and not (w.compiler == "tpu" and w.kernel_impl == "pallas"):
            add("stats", "gathered layer weights", lay.layer_per_tensor * (pb + a),
                "one layer all-gathered over fsdp (+ compute-dtype copy)")

    # ---- host ----
    if w.refresh_interval > 1:
        seeds = (w.refresh_interval - 1) * n_seq * w.response_len * (4 + 4 + 4)
        add("host", "seed cache (host RAM)", seeds,
            f"(T-1)={w.refresh_interval - 1} batches x {n_seq} x R={w.response_len} x "
            "(id + log-prob + entropy)")
    return MemoryPlan(w, tuple(terms), hbm_bytes, tuple(warns))


def _learner_compiled(w: Workload, lay: ParamLayout, add, *, n_tok, n_resp, b, t_len, h_t, k_t,
                      f_t, param_bytes, unreduced) -> None:
    """The learner terms after "saved activations" for XLA's TPU compiler with remat: the peak is
    the larger of the log-prob kernel's backward and one layer's backward (see the TPU_*
    constants), on top of what both share."""
    m = w.model
    data, fsdp, tensor = w.mesh
    pb, a = DTYPE_BYTES[m.param_dtype], DTYPE_BYTES[m.dtype]
    d, v, e = m.hidden_size, m.vocab_size, m.head_size
    if TPU_SAVED_ND_PER_LAYER > 1:
        add("learner", "remat residuals", (TPU_SAVED_ND_PER_LAYER - 1) * m.num_hidden_layers
            * n_tok * d * a, f"{TPU_SAVED_ND_PER_LAYER:g} [N, D] per layer kept for the backward "
            "(the layer input counted above)")
    if not unreduced:
        add("learner", "micro-batch gradients", (TPU_GRAD_COPIES - 1) * param_bytes,
            "float32 reduce-scattered gradients of the micro-batch, beside the accumulator")
    # Unreduced (grad_reduce "update"), the compiler adds each layer's gradient into the
    # accumulator as the backward produces it: at the planned 10% schedule no second whole
    # copy is alive (at libtpu's default schedule it keeps one; docs/scale.md "Gradients that
    # move once").
    if pb != a:
        add("learner", "compute-dtype parameter casts", TPU_PARAM_CASTS * lay.per_device * a,
            f"{TPU_PARAM_CASTS} casts of the parameter shards, hoisted out of the micro-batch loop")
    sharded_head = fsdp * tensor > 1
    gathered_unembed = d * v * pb if sharded_head else 0
    if sharded_head:
        add("learner", "gathered unembedding", gathered_unembed,
            "float32 [D, V] all-gathered for the kernel, alive until the layers' backward ends")
    np_, nv = -(-n_resp // 256) * 256, -(-v // 512)
    kern = TPU_KERNEL_DV_F32 * d * v * 4 + d * v * a + 4 * nv * np_ * 4 + np_ * d * 4
    knote = (f"kernel backward: {TPU_KERNEL_DV_F32} float32 [D, V] (d unembed, d embed), "
             "compute-dtype unembed, partials, d hidden")
    nd, nf = n_tok * d * a, n_tok * f_t * a
    n_he = n_tok * (2 * h_t + 2 * k_t) * e * a
    q_rows = score_rows(w, t_len)
    scores = b * h_t * q_rows * t_len
    # With splash (the TPU default) the attention's backward holds no [T, T] buffer: its own
    # float32 dq / dk / dv beside q / k / v / o / do in the compute dtype, float32 row statistics.
    flash = (0 if q_rows else n_tok * (h_t + 2 * k_t) * e * 4 + n_tok * h_t * e * a
             + 2 * b * h_t * t_len * 4)
    layer = (scores * (TPU_SCORE_BUFFERS_F32 * 4 + a) + flash + 2 * nf + 4 * nd + n_he
             + lay.layer_per_tensor * a * (fsdp > 1))
    lnote = ("one layer's backward: " + (
        f"float32 d scores + probs [{b},{h_t},{q_rows},{t_len}]" if q_rows else
        "splash attention (float32 dq / dk / dv, no [T, T] buffer)")
        + ", MLP and attention tiles, the layer gathered")
    if kern >= layer:
        add("learner", "backward working set", kern, f"{knote}; > {lnote} ({layer / GIB:.2f} GiB)")
    else:
        add("learner", "backward working set", layer, f"{lnote}; > {knote} ({kern / GIB:.2f} GiB)")
    largest = max(scores * 4, d * v * 4)
    add("learner", "heap allowance", TPU_HEAP_SHARE_OF_LARGEST * largest,
        f"{TPU_HEAP_SHARE_OF_LARGEST:g} x the largest temporary ({largest / GIB:.2f} GiB): "
        "fragmentation of XLA's temp allocation (docs/scale.md)")
    if TPU_PROGRAM_CODE:
        add("learner", "program code", TPU_PROGRAM_CODE, "the compiled update's code (measured)")


# ---------------------------------------------------------------------------------------------
# from a config


def workload_from_config(cfg, *, accelerator: Accelerator | None = None,
                         num_devices: int | None = None, kernel_impl: str | None = None,
                         sampler_placement: str | None = None, read_hf: bool = True) -> Workload:
    """A Workload from a validated `TrainConfig` (its `hardware` section fills the gaps;
    `sampler_placement` overrides `hardware.sampler_placement`)."""
    from tseeds_jax.model.sharding import MeshSpec

    hw = getattr(cfg, "hardware", None)
    hw = dataclasses.asdict(hw) if dataclasses.is_dataclass(hw) else dict(hw or {})
    n = num_devices or hw.get("num_devices") or (accelerator.devices if accelerator else None)
    if not n:
        raise ValueError("plan: the number of devices is unknown: set config.hardware.accelerator "
                         "(e.g. 'v5p-64') or config.hardware.num_devices")
    mesh = MeshSpec.coerce(cfg.mesh).resolve(int(n))
    fam = accelerator.family if accelerator else ""
    if kernel_impl is None:
        kernel_impl = "chunked" if fam in ("", "cpu") else "pallas"
    compiler = "tpu" if fam in TPU_FAMILIES else "cpu" if fam in ("", "cpu") else "gpu"
    per_host = (accelerator.devices_per_host if accelerator and accelerator.devices_per_host
                else min(int(n), 8))
    o = cfg.optim
    old_logp_recompute = (o.old_logp == "recompute" or
                          (o.old_logp == "auto" and o.updates_per_batch > 1))
    from tseeds_jax.rl.config import family

    top_k = family.from_loss_config(cfg.loss)[2].proposal_top_k
    stale = getattr(getattr(cfg, "stale", None), "steps", 0)
    lo = getattr(cfg, "lora", None)
    return Workload(
        model=cfg.model.model_config(read_hf=read_hf), mesh=mesh,
        batch_prompts=cfg.rollout.batch_prompts, group_size=cfg.rollout.group_size,
        prompt_len=cfg.data.max_prompt_len, response_len=cfg.rollout.max_response_len,
        mini_batches=o.mini_batches, micro_batch_size=o.micro_batch_size,
        refresh_interval=cfg.seeds.refresh_interval, truncation=cfg.seeds.truncation,
        ratio=cfg.seeds.ratio, sampler_dtype=cfg.model.sampler_dtype,
        sampler_slots=int(hw.get("sampler_slots", 0) or 0),
        sampler_placement=sampler_placement or hw.get("sampler_placement") or "replica",
        sampler_tensor=int(hw.get("sampler_tensor", 0) or 0), family=fam,
        length_distribution=cfg.rollout.length_distribution,
        kernel_impl=kernel_impl, compiler=compiler, kl_coef=cfg.loss.kl_coef,
        old_logp_recompute=old_logp_recompute, grad_reduce=o.grad_reduce,
        lora_rank=lo.rank if lo else 0, lora_targets=tuple(lo.targets) if lo else (),
        lora_sampler=lo.sampler if lo else "merged",
        # rl/learn/hooks.py statistics passes over a batch (chunked: rl/learn/row_pass.py)
        plugin_stats=bool(old_logp_recompute or stale
                               or (top_k and cfg.seeds.refresh_interval > 1)),
        devices_per_host=per_host)


def sampler_decode_bytes(w: Workload) -> int:
    """Per-device bytes of one sampler decode call (parameters read, KV cache, gathered layer,
    working set and output buffers): comparable with XLA's footprint of `core.run_chunk`."""
    return plan_sampler.sampler_memory(w, param_layout(w.model, w.mesh), DTYPE_BYTES).decode_call


def gib(nbytes: float) -> float:
    return nbytes / GIB
