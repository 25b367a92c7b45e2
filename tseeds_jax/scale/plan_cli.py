"""`tseeds plan --config configs/NAME.py[:VARIANT] [--config.a.b=value ...] [options]`.

Prints the per-device memory plan of a training config (parameters, optimizer state, gradients,
activations, the fused log-prob kernel, the sampler's KV cache and prefill, the statistics pass,
the host-side seed cache), whether it fits the accelerator's HBM, and ranked changes that make it
fit, each with the estimate after the change. See docs/scale.md.

Options:
  --accelerator NAME   override config.hardware.accelerator (v5p-64, v6e-64, 8xH100, ...)
  --hbm-gib X          HBM per device in GiB (overrides the accelerator table)
  --num-devices N      override the device count
  --kernel-impl pallas|chunked     (default: pallas on TPU/GPU)
  --sampler-placement replica|sharded   override config.hardware.sampler_placement
  --stats-rows N       sequences per statistics forward (default 0: as the trainer chunks them,
                       optim.micro_batch_size rows per forward)
  --compile            also compile the step's programs for the TPU target (`tseeds compile`,
                       learner / stats / sampler, largest prefill bucket) and show each phase's
                       compiled per-device peak beside the plan's, with the ratio; a phase
                       outside +-15% is flagged
  --topology NAME      with --compile: libtpu topology (default: from the accelerator)
  --scheduler-memory-percent P   with --compile: libtpu's scheduler limited to P% of HBM
                       (default 10, the setting the planner is compared at: docs/scale.md; 0 =
                       libtpu's default, which keeps more alive where the chip has room)
  --compiled FILE[,FILE...]   compare with saved `tseeds compile --json` outputs instead of
                       compiling (each phase's peak from the files that have it; a phase in
                       several files takes the largest program)
  --json               machine-readable output
  --update-s X, --max-staleness N, --budget-tokens X, --keep-kv, --async-placement P
                       the step model (sync vs async on-policy step under
                       rollout.length_distribution, decode layout only; docs/scale.md)
"""

from __future__ import annotations

import json
import sys

from tseeds_jax.scale import config_flags_cli


def _parse(argv: list[str]):
    def define(flags, fv):
        flags.DEFINE_string("accelerator", None, "accelerator name, e.g. v5p-64", flag_values=fv)
        flags.DEFINE_float("hbm_gib", None, "HBM per device (GiB)", flag_values=fv)
        flags.DEFINE_integer("num_devices", None, "number of devices", flag_values=fv)
        flags.DEFINE_enum("kernel_impl", None, ["pallas", "chunked"], "log-prob kernel",
                          flag_values=fv)
        flags.DEFINE_enum("sampler_placement", None, ["replica", "sharded", "decode"],
                          "where the sampler and statistics pass run (default: the config's "
                          "hardware.sampler_placement)", flag_values=fv)
        flags.DEFINE_integer("stats_rows", 0, "sequences per statistics forward (0: as the "
                             "trainer)", flag_values=fv)
        flags.DEFINE_bool("json", False, "print JSON", flag_values=fv)
        flags.DEFINE_bool("compile", False, "compile for the TPU target and compare",
                          flag_values=fv)
        flags.DEFINE_string("topology", None, "libtpu topology for --compile", flag_values=fv)
        flags.DEFINE_integer("scheduler_memory_percent", 10, "with --compile: libtpu scheduler's "
                             "share of HBM (0: libtpu's default)", flag_values=fv)
        flags.DEFINE_string("compiled", None, "saved `tseeds compile --json` files to compare "
                            "with (comma-separated)", flag_values=fv)
        from tseeds_jax.scale.step_report import step_model_flags

        step_model_flags(flags, fv)

    return config_flags_cli.parse("tseeds plan", __doc__, argv, define)


def build_plan(cd, *, accelerator=None, hbm_gib=None, num_devices=None, kernel_impl=None,
               sampler_placement=None, stats_rows=0):
    """(MemoryPlan, Accelerator | None) of a ConfigDict; raises ValueError on bad input."""
    from tseeds_jax.chips import parse_accelerator
    from tseeds_jax.rl.config import TrainConfig
    from tseeds_jax.scale import plan as plan_lib

    cfg = TrainConfig.from_config(cd)
    hw = cfg.hardware
    name = accelerator or hw.accelerator
    hbm = hbm_gib or hw.hbm_gib_per_device or None
    acc = parse_accelerator(name, hbm_gib=hbm) if name else None
    if acc is None and hbm is None:
        raise ValueError("no target hardware: set config.hardware.accelerator or pass "
                         "--accelerator / --hbm-gib")
    w = plan_lib.workload_from_config(cfg, accelerator=acc, num_devices=num_devices,
                                      kernel_impl=kernel_impl, sampler_placement=sampler_placement)
    w = w.replace(stats_rows=int(stats_rows or 0))
    hbm_bytes = acc.hbm_bytes if acc else int(hbm * plan_lib.GIB)
    return plan_lib.estimate(w, hbm_bytes=hbm_bytes), acc


def _fmt(nbytes: float) -> str:
    return f"{nbytes / (1 << 30):8.2f}"


def render(plan, ranked, path, *, title: str) -> str:
    from tseeds_jax.chips import FIT_FRACTION

    w = plan.workload
    d, f, t = w.mesh
    lines = [f"memory plan: {title}",
             f"  model: {w.model.model_type} D={w.model.hidden_size} L={w.model.num_hidden_layers} "
             f"V={w.model.vocab_size}  params {w.model.param_dtype}, compute {w.model.dtype}, "
             f"remat={w.model.remat}",
             f"  mesh: data={d} fsdp={f} tensor={t} ({w.num_devices} devices)  batch "
             f"{w.batch_prompts}x{w.group_size}  P={w.prompt_len} R={w.response_len}  "
             f"micro_batch_size={w.micro_batch_size or 'all'}  kernel={w.kernel_impl}  "
             f"sampler={w.sampler_placement} stats_rows={w.stats_rows or 'trainer'}",
             "", f"  {'phase':<9} {'term':<32} {'GiB/device':>10}  note"]
    for term in plan.terms:
        lines.append(f"  {term.phase:<9} {term.name:<32} {_fmt(term.bytes):>10}  {term.note}")
    lines.append("")
    for phase in ("resident", "learner", "sampler", "stats"):
        tot = plan.phase_total("resident") + (plan.phase_total(phase) if phase != "resident" else 0)
        label = "resident only" if phase == "resident" else f"resident + {phase}"
        mark = "  <- peak" if phase == plan.peak_phase else ""
        lines.append(f"  {label:<42} {_fmt(tot):>10}{mark}")
    if plan.hbm_bytes is not None:
        verdict = "FITS" if plan.fits else "DOES NOT FIT"
        lines.append(f"  HBM {_fmt(plan.hbm_bytes).strip()} GiB/device, usable "
                     f"{_fmt(plan.usable_bytes).strip()} ({FIT_FRACTION:.0%}): {verdict} "
                     f"(peak {_fmt(plan.peak_bytes).strip()} GiB in the {plan.peak_phase} phase)")
    for warning in plan.warnings:
        lines.append(f"  warning: {warning}")
    if not plan.fits and ranked:
        lines += ["", "  single changes, ranked by the peak after the change:"]
        for s in ranked:
            ok = "fits" if s.plan.fits else "no fit"
            lines.append(f"    {_fmt(s.plan.peak_bytes)} GiB ({ok:>6})  {s.change}   # {s.why}")
    if not plan.fits and path:
        lines += ["", "  changes applied in turn until it fits:"]
        for s in path:
            ok = "fits" if s.plan.fits else "no fit"
            lines.append(f"    {_fmt(s.plan.peak_bytes)} GiB ({ok:>6})  {s.change}")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    fv = _parse(argv)
    from tseeds_jax.rl.config import ConfigValueError
    from tseeds_jax.scale import suggest

    try:
        plan, acc = build_plan(fv.config, accelerator=fv.accelerator, hbm_gib=fv.hbm_gib,
                               num_devices=fv.num_devices, kernel_impl=fv.kernel_impl,
                               sampler_placement=fv.sampler_placement, stats_rows=fv.stats_rows)
    except (ConfigValueError, ValueError, TypeError) as e:
        print(f"tseeds plan: {e}", file=sys.stderr)
        return 2
    ranked, path = suggest.suggestions(plan)
    try:
        steps = step_estimate(plan, fv)
    except ValueError as e:  # the step model's own flags (--budget-tokens, --max-staleness)
        print(f"tseeds plan: step model: {e}", file=sys.stderr)
        return 2
    compared = None
    if fv.compile:
        from tseeds_jax.scale import compile_run

        if fv.accelerator:  # compile for the target the plan was made for
            fv.config.hardware.accelerator = fv.accelerator
        try:
            res = compile_run.compile_config(
                fv.config, topology=fv.topology, only=("learner", "stats", "sampler"),
                prefill_buckets="max", scheduler_memory_percent=fv.scheduler_memory_percent,
                progress=None if fv.json else lambda m: print(m, file=sys.stderr, flush=True))
        except (ConfigValueError, ValueError) as e:
            print(f"tseeds plan: --compile: {str(e).splitlines()[0]}", file=sys.stderr)
            return 2
        compared = compare(plan, res)
    elif fv.compiled:
        try:
            res = saved_result([x for x in fv.compiled.split(",") if x.strip()])
        except (OSError, ValueError, KeyError, TypeError) as e:
            print(f"tseeds plan: --compiled: {e}", file=sys.stderr)
            return 2
        compared = compare(plan, res)
    if fv.json:
        out = plan.to_dict()
        out["accelerator"] = acc.name if acc else None
        out["suggestions"] = [dict(change=s.change, why=s.why, peak_bytes=s.plan.peak_bytes,
                                   fits=s.plan.fits) for s in ranked]
        out["path_to_fit"] = [dict(change=s.change, peak_bytes=s.plan.peak_bytes, fits=s.plan.fits)
                              for s in path]
        if compared is not None:
            out["compiled"] = compared
        if steps is not None:
            out["step_model"] = steps
        print(json.dumps(out, indent=1))
    else:
        title = f"{acc.name if acc else 'custom'} ({_fmt(plan.hbm_bytes).strip()} GiB/device)"
        print(render(plan, ranked, path, title=title))
        if compared is not None:
            print(render_compared(compared))
        if steps is not None:
            from tseeds_jax.scale.step_report import step_model_lines

            print("\n".join(["", "  " + steps["how"]] + ["  " + x for x in
                                                          step_model_lines(steps)]))
    return 0 if plan.fits is not False else 1


def step_estimate(plan, fv) -> dict | None:
    """The step model (scale/step_model.py) on the decode layout's analytic costs; the update is
    --update-s, else 6 x params x B x (P + R) FLOPs over every chip's peak (a lower bound).
    None when the sampler is not on the decode layout of a known chip."""
    from tseeds_jax.scale import step_model
    from tseeds_jax.scale.step_report import step_model_from_inputs, step_params

    inputs = step_model.plan_inputs(plan.workload, plan.hbm_bytes)
    if inputs is None:
        return None
    params = step_params(fv, getattr(fv, "config", None))
    how = "update: --update-s"
    if params["update_s"] is None:
        params["update_s"] = inputs["update_flops_s"]
        how = "update: 6 x params x tokens FLOPs / peak (lower bound; --update-s to set it)"
        if plan.workload.lora_rank:  # no weight gradients of the frozen base: 2 of the 6
            params["update_s"] *= 4 / 6
            how = ("update: 4 x params x tokens FLOPs / peak (LoRA: forward and activation "
                   "gradients, no weight gradients of the base; lower bound; --update-s)")
    out = step_model_from_inputs(inputs, **params)
    out["how"] = ("step model on the decode layout's analytic decode step (HBM + ICI, no weight "
                  f"sync); {how}")
    return out


PHASE_TOLERANCE = 0.15  # a phase whose plan / compiled is outside 1 +- this is flagged


def saved_result(paths: list[str]):
    """A compile result (what `compare` reads: topology, programs' phase and peak, failures)
    from `tseeds compile --json` outputs; the files must be of one topology."""
    import types

    programs, failures, topo = [], [], None
    for path in paths:
        path = path.strip()
        with open(path) as fh:
            d = json.load(fh)
        if not isinstance(d, dict) or "programs" not in d or "summary" not in d:
            raise ValueError(f"{path}: not a `tseeds compile --json` output (no 'programs' / "
                             "'summary')")
        t = d["summary"].get("topology")
        if topo is not None and t != topo:
            raise ValueError(f"{path}: topology {t!r} differs from the other files' {topo!r}")
        topo = t
        for i, p in enumerate(d["programs"]):
            for key in ("name", "phase", "peak"):
                if key not in p:
                    raise ValueError(f"{path}: programs[{i}] has no {key!r}")
            programs.append(types.SimpleNamespace(name=p["name"], phase=p["phase"],
                                                  peak=int(p["peak"])))
        failures += [(f.get("program", "?"), f.get("kernel_impl", "?"), f.get("error", "?"))
                     if isinstance(f, dict) else tuple(f) for f in d.get("failures", [])]
    if not paths:
        raise ValueError("no file given")

    def phase_peak(phase):
        return max((c.peak for c in programs if c.phase == phase), default=0)

    return types.SimpleNamespace(target=types.SimpleNamespace(topology=topo), compiled=programs,
                                 failures=failures, phase_peak=phase_peak)


def compare(plan, res) -> dict:
    """Per phase: the plan's resident + phase bytes beside the compiled peak of that phase (the
    largest program's footprint plus what is alive outside it; `tseeds compile`), their ratio,
    and whether it is within +-PHASE_TOLERANCE. Phases are compared with each other, never the
    plan's largest phase with the compiler's largest (they may be different phases)."""
    rows = {}
    for phase in ("learner", "stats", "sampler"):
        comp = res.phase_peak(phase)
        planned = plan.phase_total("resident") + plan.phase_total(phase)
        if comp:
            ratio = planned / comp
            rows[phase] = dict(plan=planned, compiled=comp, ratio=ratio,
                               within=abs(ratio - 1) <= PHASE_TOLERANCE)
    peak = max(v["compiled"] for v in rows.values()) if rows else 0
    return dict(topology=res.target.topology, phases=rows, tolerance=PHASE_TOLERANCE,
                all_within=all(r["within"] for r in rows.values()), plan_peak=plan.peak_bytes,
                plan_peak_phase=plan.peak_phase, compiled_peak=peak,
                failures=[f"{n} ({i}): {e}" for n, i, e in res.failures],
                programs={c.name: c.peak for c in res.compiled})


def render_compared(c: dict) -> str:
    tol = c.get("tolerance", PHASE_TOLERANCE)
    lines = ["", f"  compiled for {c['topology']} (XLA's TPU compiler; GiB/device), per phase:",
             f"  {'phase':<9} {'plan':>8} {'compiled':>9} {'plan/compiled':>14}"]
    for phase, r in c["phases"].items():
        flag = "" if r["within"] else f"  <- OUTSIDE +-{tol:.0%}"
        lines.append(f"  {phase:<9} {_fmt(r['plan'])} {_fmt(r['compiled']):>9} "
                     f"{r['ratio']:>14.3f}{flag}")
    bad = [p for p, r in c["phases"].items() if not r["within"]]
    lines.append(f"  every phase within +-{tol:.0%}" if not bad else
                 f"  {len(bad)} phase(s) outside +-{tol:.0%}: {', '.join(bad)}")
    for f in c["failures"]:
        lines.append(f"  compile failure: {f}")
    return "\n".join(lines)
