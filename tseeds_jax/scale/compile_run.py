"""`compile_config`: a config's target, its programs compiled, and the summary `tseeds compile`
prints (per-phase peaks, fit, roofline step times, decode bound, seeded / on-policy ratio).

Roofline: a program takes at least max(FLOPs / peak FLOP/s, bytes accessed / HBM bandwidth) on
one chip (per-device numbers of the partitioned program, counted loop by loop from its optimized
HLO: `hlo_cost`), so the times are lower bounds and the MFU bound is the learner's FLOPs over the
time that bound allows. Collectives: the bytes a device sends (`hlo_cost`'s ring convention) over
half the chip's bidirectional ICI bandwidth (`chips.chip`) give an ICI time; "overlapped" is
max(compute, HBM, ICI) (a lower bound), "serial" is max(compute, HBM) + ICI (no overlap).
Step times assume every response runs to `max_response_len` (an upper bound on the decode work);
`step_model` (scale/step_model.py) estimates the on-policy step under a length distribution instead.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from tseeds_jax.chips import FIT_FRACTION
from tseeds_jax.scale import compile_programs as cp


class CompileInputError(ValueError):
    """Bad input to `tseeds compile`: the message is one line naming the field and value."""


def make_target(cd, *, topology: str | None = None):
    """A `compile_programs.CompileTarget` from a ConfigDict; CompileInputError on bad input."""
    from tseeds_jax.chips import FAMILIES
    from tseeds_jax.model import sharding as shd
    from tseeds_jax.rl.config import TrainConfig
    from tseeds_jax.scale import topology as topo

    cfg = TrainConfig.from_config(cd)
    acc_name = cfg.hardware.accelerator
    try:
        if topology is None:
            if not acc_name:
                raise CompileInputError("config.hardware.accelerator='': no target; set it "
                                        "(e.g. 'v5p-64') or pass --topology v5p:2x2x1")
            topology = topo.topology_name(acc_name)
        devices = topo.devices_for(topology)
        family = topo.family_of(devices)
    except CompileInputError:
        raise
    except ValueError as e:
        raise CompileInputError(str(e)) from None
    hbm_gib = cfg.hardware.hbm_gib_per_device or FAMILIES[family][0]
    try:
        mesh_sizes = shd.MeshSpec.coerce(cfg.mesh).resolve(len(devices))
    except ValueError as e:
        raise CompileInputError(f"config.mesh={dict(cfg.mesh)}: does not fit the {len(devices)} "
                                f"devices of {topology} ({e})") from None
    rows = cfg.rollout.batch_prompts * cfg.rollout.group_size
    if rows % (mesh_sizes[0] * mesh_sizes[1]):
        raise CompileInputError(
            f"config.rollout.batch_prompts x group_size = {rows} sequences is not divisible by "
            f"the mesh's batch axes data x fsdp = {mesh_sizes[0] * mesh_sizes[1]}")
    try:
        mesh = shd.make_mesh(dict(zip(shd.MESH_AXES, mesh_sizes)), devices=devices)
    except NotImplementedError as e:  # jax.make_mesh: sizes not products of the torus axes
        raise CompileInputError(
            f"config.mesh={dict(cfg.mesh)}: jax.make_mesh cannot lay {mesh_sizes} on the "
            f"{topology} torus (each axis must be a product of physical axis sizes; the "
            f"trainer's make_mesh fails the same way): {str(e).splitlines()[0][:120]}") from None
    hosts = len({d.process_index for d in devices})
    return cp.CompileTarget(cfg=cfg, mcfg=cfg.model.model_config(), mesh=mesh, topology=topology,
                     family=family, hbm_bytes=int(hbm_gib * (1 << 30)), num_hosts=hosts)


def programs_for(t, only=cp.PHASES, *, prefill_buckets: str = "all",
                 kernel_impl: str = "pallas") -> list:
    """kernel_impl "pallas": what the trainer's "auto" resolves to on TPU."""
    learner, state = cp.make_learner(t, kernel_impl)
    progs = []
    if "learner" in only:
        progs += cp.learner_programs(t, learner, state, kernel_impl)
    if "stats" in only:
        progs += cp.stats_programs(t, learner, state, kernel_impl,
                                   t.cfg.hardware.sampler_placement)
    if "sampler" in only and kernel_impl == "pallas":
        progs += cp.sampler_programs(t, state, prefill_buckets, learner=learner)
    if "kernel" in only and kernel_impl == "pallas":
        progs += cp.kernel_programs(t)
    return progs


UNPARTITIONED = "cannot be automatically partitioned"


@dataclasses.dataclass
class Result:
    target: Any
    compiled: list  # [compile_programs.Compiled]
    failures: list = dataclasses.field(default_factory=list)  # [(program, kernel_impl, error)]
    scheduler_memory_percent: int = 0  # 0: libtpu's default (compile_programs.SCHEDULER_FLAG)
    # step_model.estimate's own knobs (update_s, max_staleness, budget_tokens, reprefill,
    # placement) for the summary's "step_model"; `tseeds compile` sets them from its flags
    step_params: dict = dataclasses.field(default_factory=dict)

    @property
    def usable(self) -> int:
        return int(self.target.hbm_bytes * FIT_FRACTION)

    def phase_peak(self, phase: str) -> int:
        return max((c.peak for c in self.compiled if c.phase == phase), default=0)

    @property
    def largest(self):
        return max(self.compiled, key=lambda c: c.peak)

    @property
    def pallas_failures(self) -> list:
        """Programs whose Pallas kernel XLA could not partition for this target."""
        return [f for f in self.failures if f[1] == "pallas"]

    @property
    def fits(self) -> bool:
        """Every program compiled, with the kernel a run uses, and fits. A program XLA could not
        compile does not fit; nor does one whose Pallas kernel could not be partitioned: the
        trainer's kernel "auto" resolves to Pallas on TPU, so the run would fail there, and the
        chunked recompile (kept to show its memory) is not what the run executes."""
        return (all(c.peak <= self.usable for c in self.compiled) and not self.failures)

    def by_name(self, name: str):
        return next((c for c in self.compiled if c.name == name), None)

    def summary(self) -> dict[str, Any]:
        from tseeds_jax.chips import chip as chip_row

        t = self.target
        chip = chip_row(t.family)
        cfg = t.cfg
        p, r = t.widths

        def roof(c):
            if c is None:
                return 0.0
            return max(c.flops / chip.bf16_flops, c.bytes_accessed / chip.hbm_bandwidth)

        def ici(c):
            return c.ici_bytes / chip.ici_one_way if c is not None else 0.0

        upd, stats = self.by_name("learner_update"), self.by_name("stats_forward")
        step = self.by_name("sampler_decode_step")
        out: dict[str, Any] = dict(
            topology=t.topology, devices=t.mesh.size, hosts=t.num_hosts, chip=t.family,
            chip_source=chip.source, hbm_bytes=t.hbm_bytes, usable_bytes=self.usable,
            mesh=dict(t.mesh.shape), fits=self.fits,
            scheduler_memory_percent=self.scheduler_memory_percent or "libtpu default",
            phase_peak={ph: self.phase_peak(ph) for ph in cp.PHASES
                        if any(c.phase == ph for c in self.compiled)},
            largest=dict(name=self.largest.name, peak=self.largest.peak) if self.compiled
            else None)
        if upd is not None:
            t_upd = roof(upd)
            out["learner_roofline_s"] = t_upd
            out["learner_compute_bound_fraction"] = (upd.flops / chip.bf16_flops) / t_upd if t_upd else 0.0
            out["learner_ici_s"] = ici(upd)
            out["learner_roofline_ici_overlapped_s"] = max(t_upd, ici(upd))
            out["learner_roofline_ici_serial_s"] = t_upd + ici(upd)
            out["learner_compute_bound_fraction_ici_serial"] = ((upd.flops / chip.bf16_flops)
                                                   / (t_upd + ici(upd)) if t_upd else 0.0)
        out["programs_ici_s"] = {c.name: ici(c) for c in self.compiled}
        if step is not None:
            s = cp.sampler_shapes(t)
            t_step = roof(step)
            per_dev = s["slots"] // s["shards"]
            chips = s["shards"] * (t.mesh.shape["tensor"] if s["shards"] > 1 else 1)
            if cfg.hardware.sampler_placement == "decode":
                chips = t.mesh.size
                out.update(decode_layout_summary(self, step, s, chip))
            out["decode_step_collective_share"] = (step.ici_bytes / step.bytes_accessed
                                                   if step.bytes_accessed else 0.0)
            out["decode_step_roofline_s"] = t_step
            out["decode_step_ici_s"] = ici(step)
            serial = t_step + ici(step)
            out["decode_tokens_per_s_per_chip_bound_ici_serial"] = (
                s["slots"] / serial / chips if sharded(cfg) else per_dev / serial) if serial \
                else 0.0
            # every device of a sharded sampler decodes its slots' tokens; a replica decodes
            # the host's slots on one chip
            out["decode_tokens_per_s_per_chip_bound"] = (
                s["slots"] / t_step / chips if sharded(cfg) else per_dev / t_step) if t_step \
                else 0.0
            f = live_fraction(t)

            def roof_live(c):  # the decode kernel reading a live share f of the cache
                return max(c.flops / chip.bf16_flops,
                           (c.bytes_accessed - (1.0 - f) * c.decode_cache_bytes)
                           / chip.hbm_bandwidth)

            out["generation_s"] = generation_times(self, s, roof, ici, roof_live)
            if upd is not None:
                on = self.by_name("sampler_decode_step_onpolicy")
                out.update(step_times(self, t_upd, t_step + ici(step), roof(stats), s,
                                      t_sync=_sync_s(self, roof, ici),
                                      t_step_on=roof(on) + ici(on) if on else None))
            inputs = step_model_inputs(self, s, roof, ici)
            if inputs is not None:
                out["step_model_inputs"] = inputs
                params = dict(self.step_params)
                if params.get("update_s") is None:
                    params["update_s"] = (out["learner_roofline_ici_serial_s"] if upd is not None
                                          else None)
                from tseeds_jax.scale.step_report import step_model_from_inputs

                try:
                    out["step_model"] = step_model_from_inputs(inputs, **params)
                except ValueError as e:  # the step model's flags for this call's slots
                    out["step_model_error"] = str(e)
        return out


def sharded(cfg) -> bool:
    """The sampler's slots are split over the devices (learner layout or decode layout)."""
    return cfg.hardware.sampler_placement in ("sharded", "decode")


def live_fraction(t) -> float:
    """Mean share of the cache bucket a decode step reads when the decode kernel reads only the
    live positions: every prompt at the full prompt width and every response running to the full
    response width (so the mean live length is prompt + R / 2; an upper bound)."""
    from tseeds_jax.sampling import core

    p, r = t.widths
    return min(1.0, (p + r / 2) / core.cache_bucket(p + r))


def decode_layout_summary(res: Result, step, s, chip) -> dict[str, Any]:
    """The decode layout's choice, its bound at live context (the ragged kernel's cache operands
    scaled to the live share) and the analytic HBM limit of the same layout and slots."""
    from tseeds_jax import decode_layout as dl

    t = res.target
    choice = s["choice"]
    f = live_fraction(t)
    from tseeds_jax.rl.learn.adapters import lora_shape

    m = dl.DecodeModel.of(t.mcfg, t.cfg.model.sampler_dtype, lora_shape(t.cfg.lora, t.mcfg))
    slots_rep = s["slots"] // s["shards"]
    tensor = s["tensor"]
    live_bytes = step.bytes_accessed - (1.0 - f) * step.decode_cache_bytes
    ici_s = step.ici_bytes / chip.ici_one_way
    t_live = max(step.flops / chip.bf16_flops, live_bytes / chip.hbm_bandwidth)
    per_chip = slots_rep / tensor

    def limit(kv_tokens):
        hbm, ici = dl.step_time(m, tensor, slots_rep, kv_tokens, chip.hbm_bandwidth,
                                chip.ici_one_way)
        return per_chip / (hbm + ici)

    cache_len = s["cache_len"]
    return dict(
        decode_layout=dict(tensor=tensor, replicas=s["shards"], slots_per_replica=slots_rep,
                           fit_slots_per_replica=choice.fit, why=choice.why),
        decode_live_fraction=f,
        decode_step_live_bytes=live_bytes,
        decode_tokens_per_s_per_chip_bound_live_ici_serial=per_chip / (t_live + ici_s)
        if t_live + ici_s else 0.0,
        decode_hbm_limit_tokens_per_s_per_chip=dict(full_cache=limit(cache_len),
                                                      live_context=limit(f * cache_len)))


def step_model_inputs(res: Result, s, roof, ici) -> dict[str, Any] | None:
    """What `step_model` needs, from the compiled on-policy call (a step's rows on the slots the
    decode layout sizes for them): the decode step split into its KV-cache reads (the ragged
    kernel's operands, read only up to each slot's length at run time) and the rest, the prefill
    cost per token (the largest bucket's program over its rows x width), the weight sync. JSON
    only, so that a saved `tseeds compile --json` output can be estimated again
    (`python -m tseeds_jax.scale.step_model_cli`)."""
    from tseeds_jax.chips import chip as chip_row
    from tseeds_jax.rl.config import lengths as length_distribution

    t = res.target
    cfg = t.cfg
    chip = chip_row(t.family)
    step = res.by_name("sampler_decode_step_onpolicy") or res.by_name("sampler_decode_step")
    pre = [c for c in res.compiled if c.name.startswith("sampler_prefill_")]
    if step is None or not sharded(cfg):
        return None
    slots = s.get("onpolicy_slots", s["slots"]) if step.name.endswith("onpolicy") else s["slots"]
    p, r = t.widths
    prefill = 0.0
    if pre:
        top = max(pre, key=lambda c: int(c.name.rsplit("_", 1)[1]))
        width = int(top.name.rsplit("_", 1)[1])
        prefill = (roof(top) + ici(top)) / (s["rows"][width] * width)
    return dict(
        topology=t.topology,
        chips=t.mesh.size, replicas=s["shards"], requests=t.rows, slots=slots, prompt_len=p,
        max_response_len=r, cache_len=s["cache_len"],
        length_distribution=cfg.rollout.length_distribution,
        default_length_distribution=length_distribution.DEFAULT,
        decode_fixed_s=(step.bytes_accessed - step.decode_cache_bytes) / chip.hbm_bandwidth,
        decode_kv_s_per_token=step.decode_cache_bytes / (slots * s["cache_len"])
        / chip.hbm_bandwidth,
        decode_flops_s=step.flops / chip.bf16_flops, decode_ici_s=ici(step),
        decode_program=step.name, prefill_s_per_token=prefill,
        sync_s=_sync_s(res, roof, ici))


def _sync_s(res: Result, roof, ici) -> float:
    """The weight sync's time (the decode layout's reshard; a LoRA run's: of the adapters, and
    the merge of a "merged" sampler), 0 for the other placements."""
    return sum(roof(c) + ici(c) for c in map(res.by_name, ("sampler_reshard", "lora_merge"))
               if c is not None)


def generation_times(res: Result, s, roof, ici, roof_live=None) -> dict[str, Any]:
    """Estimated wall time of a refresh's behavior generation (the T - 1 batches of a cycle) and
    of one on-policy generation: weight sync, prefills (the largest bucket's program per call of
    its rows) and decode waves of the slots, every response to the full width; per-program
    roofline + ICI time (serial). `total_live_s`: the same with the decode steps reading only
    the live share of the cache (`live_fraction`; equal to `total_s` without the ragged kernel,
    whose cache operands are `decode_cache_bytes`)."""
    t = res.target
    cfg = t.cfg
    _, r = t.widths
    n = t.rows if sharded(cfg) else -(-t.rows // t.num_hosts)
    step = res.by_name("sampler_decode_step")
    step_on = res.by_name("sampler_decode_step_onpolicy") or step
    pre = [c for c in res.compiled if c.name.startswith("sampler_prefill_")]
    out = {}
    big_t = cfg.seeds.refresh_interval if cfg.seeded else 8
    for what, requests in (("on_policy", n), ("refresh_behavior", (big_t - 1) * n)):
        prog, slots = ((step_on, s.get("onpolicy_slots", s["slots"])) if what == "on_policy"
                       else (step, s["slots"]))
        t_step = roof(prog) + ici(prog)
        sync = _sync_s(res, roof, ici)
        prefill = 0.0
        if pre:
            top = max(pre, key=lambda c: int(c.name.rsplit("_", 1)[1]))
            rows = s["rows"][int(top.name.rsplit("_", 1)[1])]
            prefill = math.ceil(requests / rows) * (roof(top) + ici(top))
        decode = math.ceil(requests / slots) * r * t_step
        live = decode if roof_live is None else \
            math.ceil(requests / slots) * r * (roof_live(prog) + ici(prog))
        out[what] = dict(requests=requests, slots=slots, decode_step_s=t_step, sync_s=sync,
                         prefill_s=prefill, decode_s=decode, total_s=sync + prefill + decode,
                         decode_live_s=live, total_live_s=sync + prefill + live)
    return out


def step_times(res: Result, t_upd: float, t_step: float, t_stats: float, s,
               t_sync: float = 0.0, t_step_on: float | None = None) -> dict[str, Any]:
    """Roofline step time of an on-policy step and of a Thinking Seeds step averaged over one
    refresh cycle of T steps (decode waves of `slots` requests, each to the full response width;
    behavior log-probs in `stats_forward` chunks; one weight sync per step), and their ratio.
    `t_step`: a decode step with its collectives (serial); `t_step_on`: the same for a call of
    one step's rows when the decode layout sizes it smaller (`onpolicy_slots`)."""
    t = res.target
    cfg = t.cfg
    _, r = t.widths
    n = t.rows if sharded(cfg) else -(-t.rows // t.num_hosts)
    slots, slots_on = s["slots"], s.get("onpolicy_slots", s["slots"])
    t_on = t_step if t_step_on is None else t_step_on

    def decode(requests: int, length: int) -> float:
        if requests <= slots_on:  # one step's rows: the on-policy-sized call
            return math.ceil(requests / slots_on) * length * t_on
        return math.ceil(requests / slots) * length * t_step

    on_policy = decode(n, r) + t_upd + t_sync
    big_t = cfg.seeds.refresh_interval if cfg.seeded else 8
    ratio = cfg.seeds.ratio if cfg.seeded else 0.3
    rows, _ = cp.stats_rows(t, cfg.hardware.sampler_placement)
    rows = rows or n
    behavior = (big_t - 1) * n
    cycle = (decode(n, r) + decode(behavior, r) + (big_t - 1) * decode(n, round((1 - ratio) * r))
             + math.ceil(behavior / rows) * t_stats + big_t * (t_upd + t_sync))
    seeded = cycle / big_t
    return dict(onpolicy_step_s=on_policy, seeded_step_s=seeded,
                seeded_over_onpolicy=seeded / on_policy if on_policy else 0.0,
                ratio_assumed=dict(ratio=ratio, T=big_t))


def compile_config(cd, *, topology: str | None = None, only=cp.PHASES, prefill_buckets="all",
                   keep_executables: bool = False, progress=None,
                   scheduler_memory_percent: int = 0) -> Result:
    """Compiles every program of `only`. A learner / statistics program whose Pallas kernel XLA
    cannot partition over the mesh is recorded in `failures` (so the result does not fit) and
    compiled again with the chunked XLA kernel (named in its note), so that its memory is still
    shown."""
    t = make_target(cd, topology=topology)
    say = progress or (lambda msg: None)
    compiled, failures, retry = [], [], []
    for prog in programs_for(t, only, prefill_buckets=prefill_buckets):
        say(f"compiling {prog.name} ...")
        try:
            c = cp.compile_program(prog, generation=t.family, keep=keep_executables,
                                   scheduler_memory_percent=scheduler_memory_percent)
        except NotImplementedError as e:
            if UNPARTITIONED not in str(e):
                raise
            line = str(e).strip().splitlines()[0]
            failures.append((prog.name, "pallas", line))
            retry.append(prog.name)
            say(f"  {prog.name}: FAILED with the Pallas kernel: {line}")
            continue
        except Exception as e:  # noqa: BLE001 -- XLA's errors (e.g. scoped VMEM OOM): recorded
            if type(e).__name__ != "JaxRuntimeError":
                raise
            line = " ".join(str(e).split())[:300]
            failures.append((prog.name, "compile", line))
            say(f"  {prog.name}: FAILED to compile: {line}")
            continue
        say(f"  {prog.name}: {c.compile_s:.1f} s, peak {c.peak / 2**30:.2f} GiB/device")
        compiled.append(c)
    if retry:
        for prog in programs_for(t, only, kernel_impl="chunked"):
            if prog.name not in retry:
                continue
            prog.note += " [kernel_impl=chunked: the Pallas kernel failed to partition]"
            say(f"compiling {prog.name} with the chunked kernel ...")
            c = cp.compile_program(prog, generation=t.family, keep=keep_executables,
                                   scheduler_memory_percent=scheduler_memory_percent)
            say(f"  {prog.name}: {c.compile_s:.1f} s, peak {c.peak / 2**30:.2f} GiB/device")
            compiled.append(c)
    order = {p: i for i, p in enumerate(cp.PHASES)}
    compiled.sort(key=lambda c: order[c.phase])
    return Result(t, compiled, failures, scheduler_memory_percent)
