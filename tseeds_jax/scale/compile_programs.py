"""Every jitted program of a training step, lowered from shapes on a target mesh and compiled.

The programs are the trainer's own jitted functions, called with the arguments the trainer gives
them (abstract: `jax.ShapeDtypeStruct`s carrying the run's shardings; nothing is allocated):
  learner   `Learner.update_pass` (mini- and micro-batches, AdamW) on the sharded train state;
  stats     `Learner.stats_pass` on one row chunk of the statistics pass (rl/learn/row_pass.py:
            refresh, pi_old recompute, reference log-probs: one program, one shape), and
            `Learner.topk_pass` where SIS needs top-K;
  sampler   `core.prefill` for each prompt bucket the driver can form, `core.insert`,
            `core.run_chunk` (the decode loop: memory) and `core.step` (one decode step: cost)
            with the configured slots and cache length, on the sampler-dtype parameters placed
            as `hardware.sampler_placement` places them;
  kernel    `kernels.logprob_entropy` forward + backward at one micro-batch's per-device tokens.

Each program records `extra_live`: bytes per device that are alive while it runs but are not
its arguments (the train state during sampling, the decode state during a prefill), so that
`footprint + extra_live` is the device's peak in that phase.

Letters: B sequences, P prompt width, R response width, T = P + R, K SIS top-K.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import time
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec, SingleDeviceSharding

from tseeds_jax.decode_layout import default_slots
from tseeds_jax.model import sharding as shd
from tseeds_jax.scale.compile_common import Program, abstract, cast_tree, device_bytes
from tseeds_jax.scale.compile_common import sds as _sds

PHASES = ("learner", "stats", "sampler", "kernel")


@dataclasses.dataclass
class Compiled:
    name: str
    phase: str
    note: str
    memory: dict[str, int]  # argument, output, alias, temp, code (bytes per device)
    extra_live: int
    flops: float  # loop-aware count of the optimized HLO + analytic Pallas FLOPs (per device)
    compiler_flops: float  # XLA's cost_analysis(): loop bodies counted once
    bytes_accessed: float  # loop-aware HBM bytes of the optimized HLO (hlo_cost)
    compile_s: float
    executable: Any = None
    hlo_sha256: str = ""
    compiler_bytes: float = 0.0  # XLA's cost_analysis(): loop bodies counted once
    matmul_flops: float = 0.0  # the matmuls' share of `flops` (loop-aware) + analytic Pallas FLOPs
    collective_bytes: dict = dataclasses.field(default_factory=dict)  # kind -> bytes sent
    collective_counts: dict = dataclasses.field(default_factory=dict)  # kind -> executions
    pallas_calls: dict = dataclasses.field(default_factory=dict)  # Pallas kernel -> executions
    unknown_loops: list = dataclasses.field(default_factory=list)
    # the ragged decode kernel's K/V operands, read whole in `bytes_accessed` (hlo_cost)
    decode_cache_bytes: float = 0.0

    @property
    def ici_bytes(self) -> float:
        return float(sum(self.collective_bytes.values()))

    @property
    def footprint(self) -> int:
        m = self.memory
        return m["argument"] + m["output"] - m["alias"] + m["temp"] + m["code"]

    @property
    def peak(self) -> int:
        return self.footprint + self.extra_live

    def to_dict(self) -> dict[str, Any]:
        return dict(name=self.name, phase=self.phase, note=self.note, memory=self.memory,
                    footprint=self.footprint, extra_live=self.extra_live, peak=self.peak,
                    flops=self.flops, matmul_flops=self.matmul_flops,
                    compiler_flops=self.compiler_flops,
                    bytes_accessed=self.bytes_accessed, compiler_bytes=self.compiler_bytes,
                    collective_bytes=self.collective_bytes, ici_bytes=self.ici_bytes,
                    collective_counts=self.collective_counts, unknown_loops=self.unknown_loops,
                    pallas_calls=self.pallas_calls, decode_cache_bytes=self.decode_cache_bytes,
                    compile_s=round(self.compile_s, 2), hlo_sha256=self.hlo_sha256)


@dataclasses.dataclass
class CompileTarget:
    """The run on its target: validated config, model config, mesh of compile-only devices."""

    cfg: Any  # TrainConfig
    mcfg: Any  # ModelConfig
    mesh: Any  # jax.sharding.Mesh over compile-only devices
    topology: str
    family: str
    hbm_bytes: int
    num_hosts: int

    @property
    def rows(self) -> int:
        return self.cfg.rollout.batch_prompts * self.cfg.rollout.group_size

    @property
    def batch_shards(self) -> int:
        return self.mesh.shape["data"] * self.mesh.shape["fsdp"]

    @property
    def widths(self) -> tuple[int, int]:
        return self.cfg.data.max_prompt_len, self.cfg.rollout.max_response_len


@contextlib.contextmanager
def tpu_kernels(generation: str | None = None):
    """Pallas kernels built for Mosaic (TPU `generation`) rather than CPU interpret mode while
    lowering: traced here, the default backend is the host's CPU."""
    try:
        from tseeds_jax.kernels.target import compile_target
    except ImportError:  # kernels without targets: they read jax.default_backend()
        from tseeds_jax.kernels import pallas_kernel

        saved = pallas_kernel._backend
        pallas_kernel._backend = lambda: "tpu"
        try:
            yield
        finally:
            pallas_kernel._backend = saved
        return
    with compile_target("tpu", generation):
        yield


# ---------------------------------------------------------------------------------------------
# the learner and its statistics passes


def make_learner(t: CompileTarget, kernel_impl: str):
    """(Learner, abstract sharded TrainState) exactly as `rl.setup.make_trainer` builds them."""
    from tseeds_jax.rl.learn.hooks import old_logp_mode as learner_old_logp_mode
    from tseeds_jax.rl.learn.learner import Learner

    if t.cfg.lora.rank:  # the adapters' state; the frozen base as `learner.frozen`
        from tseeds_jax.scale import compile_lora

        return compile_lora.make_learner(t, kernel_impl)
    graphdef, params = nnx.split(shd.abstract_model(t.mcfg))
    cfg = t.cfg
    learner = Learner(graphdef, params, cfg.loss, cfg.optim, variant=cfg.seeds.variant,
                      old_logp_mode=learner_old_logp_mode(cfg), kernel_impl=kernel_impl,
                      temperature=cfg.rollout.temperature)
    state = jax.eval_shape(learner.init_state, params)
    return learner, abstract(state, shd.param_shardings(state, t.mesh))


def kernel_tokens(t: CompileTarget, n: int) -> int:
    """Tokens one device's Pallas call sees of a call over `n` tokens: the kernel runs under
    shard_map with the tokens split over the mesh axes that divide them (kernels/sharded.py)."""
    try:
        from tseeds_jax.kernels.sharded import token_axes
    except ImportError:  # kernels without a sharded wrapper: rows split over the batch axes
        return n // t.batch_shards if n % t.batch_shards == 0 else n
    return n // math.prod(t.mesh.shape[a] for a in token_axes(t.mesh, n))


def learner_programs(t: CompileTarget, learner, state, kernel_impl: str) -> list[Program]:
    from tseeds_jax.rl.learn import batch as batch_lib

    p, r = t.widths
    n = t.rows
    k = learner.proposal_top_k  # build_batch(top_k=K)
    spec = batch_lib.abstract_batch(n, p, r, top_k=k)
    # the learner's one rule (Learner.update): rows over the batch axes, the rest replicated
    batch = jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), spec,
                         batch_lib.shardings(t.mesh, spec))
    rep = NamedSharding(t.mesh, PartitionSpec())
    rng = abstract(jax.eval_shape(lambda: jax.random.PRNGKey(0)), rep)
    stare = learner.initial_controller_state()
    if stare is not None:
        stare = jax.tree.map(lambda x: jax.ShapeDtypeStruct(jnp.shape(x), jnp.asarray(x).dtype,
                                                            sharding=rep), stare)
    o = t.cfg.optim
    micro = o.micro_batch_size or n // o.mini_batches
    from tseeds_jax.scale.compile_lora import frozen_args

    # reference parameters (a LoRA run's reference is its frozen base, an argument here)
    extra = device_bytes(state.params) if t.cfg.loss.kl_coef and not frozen_args(learner) else 0
    d, v = t.mcfg.hidden_size, t.mcfg.vocab_size
    # The LM head's useful FLOPs: logits (2 N D V) + d hidden and d unembed (4 N D V); logits
    # the kernel recomputes in its backward are not counted (model FLOPs, as for MFU).
    trips = o.epochs * o.mini_batches * ((n // o.mini_batches) // micro)
    kern = (6.0 * trips * kernel_tokens(t, micro * r) * d * v) if kernel_impl == "pallas" else 0.0
    return [Program(
        "learner_update", "learner",
        f"Learner._update: {n} sequences x T={p + r}, {o.mini_batches} mini-batch(es) of "
        f"{n // o.mini_batches}, micro-batches of {micro}, {o.epochs} epoch(s)",
        functools.partial(learner.update_pass.lower, state, batch, rng, stare,
                          *frozen_args(learner)), extra_live=extra,
        analytic_flops=kern)]


def stats_rows(t: CompileTarget, placement: str) -> tuple[int, str]:
    """Global rows of one statistics forward (rl/learn/row_pass.py) and the passes it serves."""
    placement = "sharded" if placement == "decode" else placement  # statistics: learner mesh
    cfg = t.cfg
    passes = []
    n = t.rows
    if cfg.seeded:
        passes.append(("behavior log-probs at refresh", n * (cfg.seeds.refresh_interval - 1)))
    if cfg.loss.kl_coef:
        passes.append(("reference log-probs", n))
    from tseeds_jax.rl.learn.hooks import old_logp_mode as learner_old_logp_mode

    if learner_old_logp_mode(cfg) == "recompute" or (cfg.optim.old_logp == "auto"
                                                    and cfg.optim.updates_per_batch > 1):
        passes.append(("pi_old recompute", n))
    if not passes:
        return 0, ""
    from tseeds_jax.rl.learn.row_pass import stats_chunk_rows

    hosts = 1 if placement == "sharded" else t.num_hosts
    total = max(x for _, x in passes) // hosts
    chunk = stats_chunk_rows(total, cfg.optim.micro_batch_size,
                             t.batch_shards if placement == "sharded" else 1)
    return chunk, ", ".join(name for name, _ in passes)


def stats_programs(t: CompileTarget, learner, state, kernel_impl: str, placement: str) -> list[Program]:
    placement = "sharded" if placement == "decode" else placement  # statistics: learner mesh
    rows, served = stats_rows(t, placement)
    if not rows and not learner.proposal_top_k:
        return []
    rows = rows or min(t.cfg.optim.micro_batch_size or t.rows, t.rows)
    p, r = t.widths
    from tseeds_jax.scale import compile_lora

    # A LoRA run's frozen base is the passes' last argument (`Frozen.like`: replicated with them)
    frozen, f_bytes = compile_lora.frozen_args(learner), compile_lora.frozen_bytes(learner)
    params, resident = state.params, device_bytes(state) + f_bytes
    if placement == "sharded":
        tok = jax.ShapeDtypeStruct((rows, p + r), jnp.int32,
                                   sharding=shd.batch_sharding(t.mesh, (rows, p + r)))
        extra = resident - device_bytes(params) - f_bytes  # these are the program's arguments
    else:  # one device per host holds a full replica (hosts.local_replica)
        one = SingleDeviceSharding(t.mesh.devices.flat[0])
        params = jax.tree.map(lambda x: _sds(x, one), params)
        frozen = compile_lora.on_one_device(frozen, t.mesh.devices.flat[0])
        tok = jax.ShapeDtypeStruct((rows, p + r), jnp.int32, sharding=one)
        extra = resident
    d, v = t.mcfg.hidden_size, t.mcfg.vocab_size
    kern = (2.0 * (kernel_tokens(t, rows * r) if placement == "sharded" else rows * r) * d * v
            if kernel_impl == "pallas" else 0.0)
    out = []
    if served:
        out.append(Program("stats_forward", "stats",
                           f"Learner._stats: {rows} sequences x T={p + r} per forward "
                           f"({placement}); serves: {served}",
                           functools.partial(learner.stats_pass.lower, params, tok, tok, r,
                                             *frozen),
                           extra_live=extra, analytic_flops=kern))
    k = learner.proposal_top_k
    if k:
        out.append(Program("stats_topk", "stats",
                           f"Learner._topk: SIS top-{k} of {rows} sequences per forward",
                           functools.partial(learner.topk_pass.lower, params, tok, tok, r, k,
                                             *frozen),
                           extra_live=extra))
    return out


# ---------------------------------------------------------------------------------------------
# the sampler


def sampler_shapes(t: CompileTarget) -> dict[str, int]:
    """Slots, cache length, output length, prefill buckets of the largest sampler call."""
    from tseeds_jax.sampling import core
    from tseeds_jax.sampling.driver import PREFILL_TOKENS
    from tseeds_jax.scale.plan_sampler import pow2_at_least

    cfg = t.cfg
    p, r = t.widths
    placement = cfg.hardware.sampler_placement
    sharded = placement in ("sharded", "decode")
    requests = t.rows * max(cfg.seeds.refresh_interval - 1, 1) if cfg.seeded else t.rows
    if not sharded:
        requests = -(-requests // t.num_hosts)
    extra = {}
    if placement == "decode":
        choice = target_decode_choice(t, requests)
        shards = choice.layout.replicas
        slots = (cfg.hardware.sampler_slots or choice.slots * shards)
        # the on-policy call: a step's rows, sized as `WeightSync.slots` sizes it
        from tseeds_jax.decode_layout import balanced_slots

        on = cfg.hardware.sampler_slots or balanced_slots(-(-t.rows // shards),
                                                          max(choice.fit, 1)) * shards
        extra = dict(tensor=choice.layout.tensor, choice=choice, onpolicy_slots=min(on, slots))
    else:
        slots = cfg.hardware.sampler_slots or default_slots(requests)
        shards = t.batch_shards if sharded else 1
    slots = -(-slots // shards) * shards
    seed_max = 0
    if cfg.seeded:
        seed_max = (round(r * cfg.seeds.ratio) if cfg.seeds.truncation == "ratio" else r - 1)
    max_prefill = p + r  # setup.make_sample_fn
    top = core.prefill_bucket(p + seed_max, max_prefill)
    buckets, b = [], 16
    while b < top:
        buckets.append(b)
        b *= 2
    buckets.append(top)
    rows = {}
    for tb in buckets:
        per_dev = max(1, PREFILL_TOKENS // tb)
        per_dev = 1 << (per_dev.bit_length() - 1)
        rows[tb] = min(per_dev * shards, -(-pow2_at_least(slots) // shards) * shards)
    return dict(requests=requests, slots=slots, shards=shards,
                cache_len=core.cache_bucket(p + r), n_out=max(16, pow2_at_least(r)),
                buckets=buckets, rows=rows, **extra)


def target_decode_choice(t: CompileTarget, requests: int):
    """The decode layout of this target's largest call, decided as the run decides it
    (`decode_layout.decide_for`: same model numbers, chip, free memory)."""
    from tseeds_jax import chips
    from tseeds_jax import decode_layout as dl
    from tseeds_jax.rl.learn.adapters import lora_shape
    from tseeds_jax.sampling import core, layout

    p, r = t.widths
    devices = list(t.mesh.devices.flat)
    return dl.decide_for(t.mcfg, sampler_dtype=t.cfg.model.sampler_dtype, chip=chips.chip(t.family),
                         devices=len(devices), per_host=layout.devices_per_host(devices),
                         requests=requests, hbm_bytes=t.hbm_bytes,
                         cache_len=core.cache_bucket(p + r), tensor=t.cfg.hardware.sampler_tensor,
                         lora=lora_shape(t.cfg.lora, t.mcfg))


def sampler_programs(t: CompileTarget, state, buckets: str = "all", learner=None) -> list[Program]:
    """learner: its `frozen` makes the sampler a LoRA run's (scale/compile_lora.py)."""
    from tseeds_jax.sampling import core
    from tseeds_jax.sampling.placement import SamplerShardings
    from tseeds_jax.sampling.strategies import make_strategy

    cfg = t.cfg
    s = sampler_shapes(t)
    sdt = cfg.model.sampler_dtype
    decode = cfg.hardware.sampler_placement == "decode"
    sharded = cfg.hardware.sampler_placement == "sharded" or decode
    resident = device_bytes(state)
    graphdef = core.ModelDef(nnx.split(shd.abstract_model(t.mcfg))[0])
    strategy = make_strategy(cfg.rollout.temperature, cfg.rollout.top_k, cfg.rollout.top_p)
    stops = (0,)  # the template's stop ids: static, shape-free
    progs = []
    if decode:
        from tseeds_jax.sampling import layout

        mesh = layout.decode_mesh(list(t.mesh.devices.flat), s["tensor"],
                                  axis_types=t.mesh.axis_types)
        place = SamplerShardings(mesh)
        learner_cast = cast_tree(state.params, sdt)
        out_sh = layout.param_shardings(learner_cast, mesh)
        params = abstract(learner_cast, out_sh)
        rows = place.rows
        kv = place.kv
        progs.append(Program(
            "sampler_reshard", "sampler",
            f"the weight sync: {sdt} parameters from the learner's layout into the decode "
            f"layout ({s['shards']} replicas x tensor {s['tensor']})",
            functools.partial(jax.jit(lambda x: x, out_shardings=out_sh).lower, learner_cast),
            extra_live=resident - device_bytes(learner_cast) * (sdt == t.mcfg.param_dtype)))
    elif sharded:
        place = SamplerShardings(t.mesh)
        params = cast_tree(state.params, sdt)
        rows = place.rows
        kv = place.kv
    else:
        one = SingleDeviceSharding(t.mesh.devices.flat[0])
        params = cast_tree(jax.tree.map(lambda x: _sds(x, one), state.params), sdt)
        rows = lambda shape, what: one  # noqa: E731
        kv = lambda axes, shape: one  # noqa: E731
    if getattr(learner, "frozen", None) is not None:  # LoRA: adapters synced, the base placed once
        from tseeds_jax.scale import compile_lora

        resident += compile_lora.frozen_bytes(learner)
        graphdef, params, cast_bytes, held, progs = compile_lora.sampler_weights(
            t, learner, state, sdt, "decode" if decode else "sharded" if sharded else "replica",
            mesh=mesh if decode else None, device=t.mesh.devices.flat[0])
    else:
        # the trainer's sampler cast returns the params themselves; the decode layout always
        # holds its own copy
        same = sharded and not decode and sdt == t.mcfg.param_dtype
        cast_bytes = 0 if same else device_bytes(params)
        # The decode layout: the learner-layout cast the trainer passes in stays alive beside
        # the decode copy (`WeightSync` keeps it as its key) unless the cast returned the params.
        held = device_bytes(learner_cast) if decode and sdt != t.mcfg.param_dtype else 0
    resident += held
    def decode_state(slots):
        init = functools.partial(core.init_buffers, t.mcfg, slots, s["cache_len"], s["n_out"])
        st, out_t, out_lp = jax.eval_shape(init)
        st = abstract(st, st.replace(
            cache=st.cache.replace(end_B=rows(st.cache.end_B.shape, "decode state"),
                                   **type(st.cache).map_layers(st.cache, kv)),
            **{f: rows(getattr(st, f).shape, "decode state")
               for f in ("token_B", "logprob_B", "step_B", "budget_B", "key_B", "occupied_B",
                         "finish_B")}))
        return st, out_t, out_lp

    st, out_t, out_lp = decode_state(s["slots"])
    out_t, out_lp = (_sds(x, rows(x.shape, "output buffer")) for x in (out_t, out_lp))
    state_bytes, out_bytes = device_bytes(st), device_bytes((out_t, out_lp))
    p_w, r = t.widths
    where = (f"{'sharded over the mesh' if sharded else 'one device per host (replica)'}, "
             f"{sdt} params")
    if decode:
        where = f"decode layout: {s['shards']} replicas x tensor {s['tensor']}, {sdt} params"
    chosen = s["buckets"] if buckets == "all" else s["buckets"][-1:]
    prefix_last = slot_last = None
    for tb in chosen:
        n = s["rows"][tb]

        def row(shape, dtype):
            return jax.ShapeDtypeStruct(shape, dtype, sharding=rows(shape, "prefill rows"))

        args = (row((n, tb), jnp.int32), row((n,), jnp.int32), row((n, 2), jnp.uint32),
                row((n,), jnp.int32), row((n,), jnp.bool_))
        progs.append(Program(
            f"sampler_prefill_{tb}", "sampler",
            f"core.prefill: {n} prompts x {tb} tokens ({where})",
            functools.partial(core.prefill.lower, graphdef, strategy, params, *args),
            extra_live=resident - (cast_bytes == 0) * device_bytes(params) + state_bytes
            + out_bytes))
        prefix_last = (args, n, tb)
    args, n, tb = prefix_last
    prefix = jax.eval_shape(functools.partial(core.prefill, graphdef, strategy), params, *args)
    if sharded:
        prefix = abstract(prefix, place.prefix_shardings(prefix, type(st.cache)))
    else:
        prefix = jax.tree.map(lambda x: _sds(x, one), prefix)
    slot_last = jax.ShapeDtypeStruct((n,), jnp.int32, sharding=rows((n,), "prefill rows"))
    progs.append(Program(
        "sampler_insert", "sampler", f"core.insert: {n} prefills of {tb} tokens into "
        f"{s['slots']} slots", functools.partial(core.insert.lower, prefix, st, slot_last),
        extra_live=resident + cast_bytes + out_bytes))
    decode_extra = resident - (0 if cast_bytes else device_bytes(params))
    progs.append(Program(
        "sampler_decode", "sampler",
        f"core.run_chunk: {s['slots']} slots, cache {s['cache_len']}, output {s['n_out']} "
        f"({where})",
        functools.partial(core.run_chunk.lower, graphdef, strategy, stops, params, st, out_t,
                          out_lp, s["n_out"] + 1, True), extra_live=decode_extra))
    progs.append(Program(
        "sampler_decode_step", "sampler", "core.step: one decode step of all slots (the loop "
        "body of run_chunk; its cost is the per-token roofline)",
        functools.partial(core.step.lower, graphdef, strategy, stops, params, st),
        extra_live=decode_extra + out_bytes))
    on = s.get("onpolicy_slots", s["slots"])
    if on != s["slots"]:
        # The decode layout sizes each call's slots to its requests (`WeightSync.slots`): an
        # on-policy step's call decodes fewer slots than a refresh's, with a cheaper step.
        st_on, _, _ = decode_state(on)
        progs.append(Program(
            "sampler_decode_step_onpolicy", "sampler",
            f"core.step: one decode step of an on-policy call's {on} slots",
            functools.partial(core.step.lower, graphdef, strategy, stops, params, st_on),
            extra_live=decode_extra + out_bytes))
    return progs


def kernel_programs(t: CompileTarget) -> list[Program]:
    """The fused log-prob / entropy forward + backward at one micro-batch's per-device tokens,
    in the compute dtype, on one device."""
    from tseeds_jax import kernels

    o = t.cfg.optim
    micro = o.micro_batch_size or t.rows // o.mini_batches
    _, r = t.widths
    n = max(1, micro // t.batch_shards) * r
    d, v = t.mcfg.hidden_size, t.mcfg.vocab_size
    one = SingleDeviceSharding(t.mesh.devices.flat[0])
    dt = jnp.dtype(t.mcfg.dtype)
    h = jax.ShapeDtypeStruct((n, d), dt, sharding=one)
    w = jax.ShapeDtypeStruct((d, v), dt, sharding=one)
    y = jax.ShapeDtypeStruct((n,), jnp.int32, sharding=one)

    def loss(h_ND, w_DV, y_N):
        logp, ent = kernels.logprob_entropy(h_ND, w_DV, y_N, impl="pallas")
        return jnp.sum(logp) + jnp.sum(ent)

    fn = jax.jit(jax.grad(loss, argnums=(0, 1)))
    return [Program("kernel_logprob_entropy", "kernel",
                    f"kernels.logprob_entropy pallas fwd+bwd, N={n} D={d} V={v} {dt.name}",
                    functools.partial(fn.lower, h, w, y), analytic_flops=6.0 * n * d * v)]


# ---------------------------------------------------------------------------------------------
# compile and measure


def cost(compiled) -> tuple[float, float]:
    c = compiled.cost_analysis()
    if isinstance(c, (list, tuple)):
        c = c[0] if c else {}
    c = c or {}
    return float(c.get("flops", 0.0)), float(c.get("bytes accessed", 0.0))


# libtpu's scheduler flag: the share of HBM its latency-hiding scheduler may fill (libtpu's default
# is 95). With room to spare it keeps buffers alive to overlap collectives with compute (twice
# the memory for the 7B update on v5p: docs/scale.md), so a compile at a low share measures what
# the step needs rather than what the scheduler chose to use.
SCHEDULER_FLAG = "xla_tpu_scheduler_percent_shared_memory_limit"


def compiler_options(scheduler_memory_percent: int = 0) -> dict:
    """XLA options of a TPU compile; 0 keeps libtpu's default."""
    if not scheduler_memory_percent:
        return {}
    if not 1 <= scheduler_memory_percent <= 100:
        raise ValueError(f"scheduler_memory_percent={scheduler_memory_percent}: expected 1..100")
    return {SCHEDULER_FLAG: int(scheduler_memory_percent)}


def lower(prog: Program, generation: str | None = None):
    """(lowered program, sha256 of its HLO text) with the target generation's kernels: the one
    fingerprint that `--out` records and `--check` compares."""
    import hashlib

    with tpu_kernels(generation):
        lowered = prog.lower()
    return lowered, hashlib.sha256(lowered.as_text().encode()).hexdigest()


def compile_program(prog: Program, *, generation: str | None = None, keep: bool = True,
                    scheduler_memory_percent: int = 0) -> Compiled:
    t0 = time.perf_counter()
    lowered, hlo = lower(prog, generation)
    exe = lowered.compile(compiler_options=compiler_options(scheduler_memory_percent))
    dt = time.perf_counter() - t0
    m = exe.memory_analysis()
    mem = dict(argument=int(m.argument_size_in_bytes), output=int(m.output_size_in_bytes),
               alias=int(m.alias_size_in_bytes), temp=int(m.temp_size_in_bytes),
               code=int(m.generated_code_size_in_bytes))
    from tseeds_jax.scale.hlo_cost import hlo_cost

    flops, nbytes = cost(exe)
    hc = hlo_cost(exe.as_text())
    return Compiled(prog.name, prog.phase, prog.note, mem, int(prog.extra_live),
                    hc.flops + prog.analytic_flops, flops, hc.bytes_accessed, dt,
                    exe if keep else None, hlo, compiler_bytes=nbytes,
                    matmul_flops=hc.matmul_flops + prog.analytic_flops,
                    collective_bytes=hc.collective_bytes, collective_counts=hc.collective_counts,
                    unknown_loops=hc.unknown_loops, pallas_calls=hc.pallas_calls,
                    decode_cache_bytes=hc.decode_cache_bytes)
