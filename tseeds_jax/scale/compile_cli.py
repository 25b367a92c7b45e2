"""`tseeds compile --config FILE[:VARIANT] [--topology NAME] [--only learner,stats,sampler,kernel]
[--out DIR | --check DIR] [--json] [--prefill-buckets all|max] [--config.a.b=value ...]`

Compiles every jitted program of a training step with XLA's TPU compiler for the config's target
(`hardware.accelerator`, e.g. v5p-64 -> topology v5p:2x4x4, 32 devices on 8 hosts; or
--topology v5p:2x2x1), from this machine: no TPU is needed or used (libtpu compiles for
compile-only devices; requirements-tpu.txt). Parameters and optimizer state are abstract, with the
run's shardings. For each program it prints per-device argument / output / temp / code bytes, the
device's peak in that phase and whether it fits HBM with the planner's margin, FLOPs and bytes
accessed, compile time; then per-phase peaks, roofline step times, the decode tokens/s bound and
the estimated seeded / on-policy step-time ratio (docs/scale.md).

--out DIR writes the serialized executables and manifest.json (fingerprints of the config and of
every program's HLO). Nothing is written when an input is bad or a program does not fit; the exit
code is then non-zero (2: bad input, 1: does not fit).

--scheduler-memory-percent P compiles with libtpu's latency-hiding scheduler limited to P% of HBM
(default 95): with room to spare it keeps buffers alive to overlap collectives, so a low P shows
what a step needs; a run gets the same schedule with
LIBTPU_INIT_ARGS=--xla_tpu_scheduler_percent_shared_memory_limit=P.

Step model (scale/step_model.py, docs/scale.md "Step time over a response-length distribution"):
the summary's `step_model` estimates an on-policy step under `rollout.length_distribution`, sync
vs async (partial rollouts); --update-s X (default: the compiled update, else left out),
--max-staleness N, --budget-tokens X, --keep-kv, --async-placement interleaved|split.

--record PATH writes the summary and the per-program table as a result record
(tseeds_jax.results_record, kind "compile-only bound": nothing ran on a TPU), the file the docs'
tables are rendered from (python -m tseeds_jax.results_render).

--check DIR tells a launch whether it runs what was compiled into DIR: with the flags the compile
had, it lowers (no compile: fast) the programs of DIR/manifest.json for this config and code, and
compares the config, the topology (default: from the config, else DIR's), jax / jaxlib / libtpu
versions and every program's HLO. Exit 0 and one line "DIR matches: ..."; 1 and one line naming the
first difference (a config field with both values, the topology, a version, a program); 2 on bad
input. DIR may also be the manifest file itself. Nothing is written.
"""

from __future__ import annotations

import json
import sys

from tseeds_jax.scale import config_flags_cli, step_report


def _parse(argv: list[str]):
    def define(flags, fv):
        flags.DEFINE_string("topology", None, "libtpu topology, e.g. v5p:2x2x1 (default: from "
                            "config.hardware.accelerator)", flag_values=fv)
        flags.DEFINE_string("only", "learner,stats,sampler,kernel", "programs to compile",
                            flag_values=fv)
        flags.DEFINE_string("out", None, "folder for serialized executables + manifest.json",
                            flag_values=fv)
        flags.DEFINE_string("check", None, "folder written by --out: does this config and code "
                            "lower to what it holds? (nothing is compiled or written)",
                            flag_values=fv)
        flags.DEFINE_enum("prefill_buckets", "all", ["all", "max"], "prefill programs: every "
                          "prompt bucket, or only the largest", flag_values=fv)
        flags.DEFINE_integer("scheduler_memory_percent", 0, "share of HBM libtpu's scheduler "
                             "may fill (its xla_tpu_scheduler_percent_shared_memory_limit; 0: "
                             "libtpu's default, 95)", flag_values=fv)
        flags.DEFINE_bool("json", False, "print JSON", flag_values=fv)
        step_report.step_model_flags(flags, fv)
        flags.DEFINE_string("record", None, "also write the result as a result record (JSON, "
                            "kind 'compile-only bound') to this path, e.g. "
                            "docs/results/NAME.json (tseeds_jax.results_record)", flag_values=fv)

    return config_flags_cli.parse("tseeds compile", __doc__, argv, define)


def _gib(n: float) -> str:
    return f"{n / (1 << 30):.2f}"


def markdown(res, plan=None) -> str:
    """The per-program table and the summary, as markdown."""
    s = res.summary()
    lines = [f"target {s['topology']}: {s['devices']} devices on {s['hosts']} host(s), mesh "
             f"{s['mesh']}, HBM {_gib(s['hbm_bytes'])} GiB/device, usable "
             f"{_gib(s['usable_bytes'])} GiB", "",
             "| program | phase | argument | output | temp | code | peak (+ live outside) "
             "| fits | TFLOP | GB accessed | GB collectives | ICI ms | compile s |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for c in res.compiled:
        m = c.memory
        lines.append(
            f"| {c.name} | {c.phase} | {_gib(m['argument'])} | {_gib(m['output'])} | "
            f"{_gib(m['temp'])} | {_gib(m['code'])} | {_gib(c.peak)} (+{_gib(c.extra_live)}) | "
            f"{'yes' if c.peak <= res.usable else '**NO**'} | {c.flops / 1e12:.3g} | "
            f"{c.bytes_accessed / 1e9:.3g} | {c.ici_bytes / 1e9:.3g} | "
            f"{s['programs_ici_s'].get(c.name, 0.0) * 1e3:.3g} | {c.compile_s:.1f} |")
    lines += ["", "GiB per device; peak = argument + output - alias + temp + code + bytes alive "
              "outside the program in that phase (train state during sampling, ...). TFLOP, GB "
              "accessed and GB collectives (bytes one device sends) per device, every loop "
              "counted with its trips (hlo_cost); ICI ms = collectives over half the chip's "
              "bidirectional ICI bandwidth.", ""]
    for c in res.compiled:
        kinds = ", ".join(f"{k} {v / 1e9:.3g} GB x{c.collective_counts.get(k, 0)}"
                          for k, v in sorted(c.collective_bytes.items()))
        lines.append(f"- {c.name}: {c.note}" + (f"; collectives: {kinds}" if kinds else "")
                     + (f"; loops of unknown trip count (counted once): {c.unknown_loops}"
                        if c.unknown_loops else ""))
    lines.append("")
    peaks = ", ".join(f"{ph} {_gib(v)}" for ph, v in s["phase_peak"].items())
    lines.append(f"peak per phase (GiB/device): {peaks}")
    if plan is not None:
        lines.append(plan_line(res, plan))
    if "learner_roofline_s" in s:
        # executed FLOPs (remat's recompute included) / peak over the roofline time: 1.00 means
        # compute-bound, not 100% model FLOPs utilisation, so it is not called MFU
        lines.append(f"learner update roofline: {s['learner_roofline_s']:.3f} s, compute-bound "
                     f"fraction {s['learner_compute_bound_fraction']:.2f}; with collectives "
                     f"({s['learner_ici_s']:.3f} s ICI): overlapped "
                     f"{s['learner_roofline_ici_overlapped_s']:.3f} s, serial "
                     f"{s['learner_roofline_ici_serial_s']:.3f} s, compute-bound fraction (serial) "
                     f"{s['learner_compute_bound_fraction_ici_serial']:.2f} "
                     f"({s['chip']}: {s['chip_source']})")
    if "decode_step_roofline_s" in s:
        lines.append(f"decode step roofline: {s['decode_step_roofline_s'] * 1e3:.2f} ms; decode "
                     f"bound {s['decode_tokens_per_s_per_chip_bound']:.0f} tokens/s per chip; "
                     f"with collectives ({s['decode_step_ici_s'] * 1e3:.2f} ms ICI, serial) "
                     f"{s['decode_tokens_per_s_per_chip_bound_ici_serial']:.0f} tokens/s per chip; "
                     f"collectives {s['decode_step_collective_share']:.1%} of the step's HBM bytes")
    if "decode_layout" in s:
        d, lim = s["decode_layout"], s["decode_hbm_limit_tokens_per_s_per_chip"]
        lines.append(
            f"decode layout: {d['replicas']} replicas x tensor {d['tensor']}, "
            f"{d['slots_per_replica']} slots per replica (memory holds {d['fit_slots_per_replica']}); "
            f"at live context ({s['decode_live_fraction']:.0%} of the cache read) "
            f"{s['decode_tokens_per_s_per_chip_bound_live_ici_serial']:.0f} tokens/s per chip with "
            f"collectives; HBM limit of this layout and slots {lim['full_cache']:.0f} (full cache) / "
            f"{lim['live_context']:.0f} (live context) tokens/s per chip. Choice: {d['why']}")
    for what, g in s.get("generation_s", {}).items():
        lines.append(f"{what.replace('_', ' ')} generation ({g['requests']} sequences): "
                     f"{g['total_s']:.1f} s = weight sync {g['sync_s']:.2f} + prefill "
                     f"{g['prefill_s']:.2f} + decode {g['decode_s']:.1f} ({g['slots']} slots; "
                     f"{g['total_live_s']:.1f} s reading the live cache only)")
    if "seeded_over_onpolicy" in s:
        a = s["ratio_assumed"]
        lines.append(f"roofline step time: on-policy {s['onpolicy_step_s']:.1f} s, Thinking Seeds "
                     f"{s['seeded_step_s']:.1f} s (ratio {a['ratio']}, T {a['T']}): "
                     f"seeded / on-policy = {s['seeded_over_onpolicy']:.2f}")
    if "step_model" in s:
        lines += step_report.step_model_lines(s["step_model"])
    if "step_model_error" in s:
        lines.append(f"step model: {s['step_model_error']}")
    for name, impl, err in res.failures:
        lines.append(f"FAILED: {name} with kernel_impl={impl}: {err}")
    lines.append(f"fits: {'yes' if s['fits'] else 'NO'}")
    return "\n".join(lines)


def plan_line(res, plan) -> str:
    """Plan / compiled per phase (plan_cli.compare), each ratio, phases outside +-15% flagged."""
    from tseeds_jax.scale import plan_cli

    c = plan_cli.compare(plan, res)
    parts = [f"{ph} {_gib(r['plan'])} / {_gib(r['compiled'])} = {r['ratio']:.3f}"
             + ("" if r["within"] else " (OUTSIDE)") for ph, r in c["phases"].items()]
    return (f"plan / compiled per phase (GiB/device, +-{c['tolerance']:.0%}): "
            + "; ".join(parts))


def main(argv: list[str]) -> int:
    fv = _parse(argv)
    from tseeds_jax.rl.config import ConfigValueError
    from tseeds_jax.scale import compile_manifest, compile_run
    from tseeds_jax.scale.compile_programs import PHASES

    only = tuple(x.strip() for x in fv.only.split(",") if x.strip())
    bad = [x for x in only if x not in PHASES]
    if bad or not only:
        print(f"tseeds compile: --only={fv.only!r}: unknown program group {bad}; known: "
              f"{','.join(PHASES)}", file=sys.stderr)
        return 2
    if not 0 <= fv.scheduler_memory_percent <= 100:
        print(f"tseeds compile: --scheduler-memory-percent={fv.scheduler_memory_percent}: "
              "expected 1..100 (0: libtpu's default)", file=sys.stderr)
        return 2
    if fv.check is not None:
        return _check(fv, only)
    if fv.out:
        try:
            compile_manifest.check_out_dir(fv.out)
        except ValueError as e:
            print(f"tseeds compile: {e}", file=sys.stderr)
            return 2
    progress = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731 (stdout: result)
    try:
        res = compile_run.compile_config(fv.config, topology=fv.topology, only=only,
                                         prefill_buckets=fv.prefill_buckets,
                                         keep_executables=bool(fv.out), progress=progress,
                                         scheduler_memory_percent=fv.scheduler_memory_percent)
    except (ConfigValueError, ValueError) as e:
        print(f"tseeds compile: {str(e).splitlines()[0]}", file=sys.stderr)
        return 2
    res.step_params = step_report.step_params(fv, fv.config)
    broken = [(n, e) for n, kind, e in res.failures if kind == "compile"]
    unpartitioned = res.pallas_failures
    if unpartitioned:
        n, _, e = unpartitioned[0]
        print(f"tseeds compile: does not fit: {len(unpartitioned)} program(s) cannot use the "
              f"Pallas kernel the run would use (kernel 'auto' = Pallas on TPU) on "
              f"{res.target.topology}, first {n}: {e[:200]}; nothing written", file=sys.stderr)
    elif broken:
        print(f"tseeds compile: {len(broken)} program(s) failed to compile, first "
              f"{broken[0][0]}: {broken[0][1][:200]}; nothing written", file=sys.stderr)
    elif not res.fits:
        big = res.largest
        print(f"tseeds compile: does not fit: {big.name} needs {_gib(big.peak)} GiB per device "
              f"(> {_gib(res.usable)} GiB usable of {_gib(res.target.hbm_bytes)} GiB HBM on "
              f"{res.target.topology}); nothing written", file=sys.stderr)
    plan = _plan(fv.config, res)
    if fv.json:
        out = dict(programs=[c.to_dict() for c in res.compiled], summary=res.summary(),
                   failures=[dict(program=n, kernel_impl=i, error=e) for n, i, e in res.failures])
        if plan is not None:
            from tseeds_jax.scale import plan_cli

            out["plan_peak_bytes"] = plan.peak_bytes
            out["plan_vs_compiled"] = plan_cli.compare(plan, res)
        print(json.dumps(out, indent=1, default=str))
    else:
        print(markdown(res, plan))
    if fv.record:
        _write_record(fv.record, res, argv)
        progress(f"wrote the result record {fv.record}")
    if not res.fits:
        return 1
    if fv.out:
        compile_manifest.write(fv.out, fv.config, res)
        progress(f"wrote {fv.out}/manifest.json and {len(res.compiled)} executables")
    return 0


_UNITS = (("_bytes", "bytes per device"), ("_s", "s"), ("tokens_per_s_per_chip", "tokens/s/chip"),
          ("_share", "fraction"), ("_fraction", "fraction"))


def _write_record(path: str, res, argv: list[str]) -> None:
    """The summary's numbers (one value each; nested ones flattened as a.b) and the per-program
    table as a result record of kind "compile-only bound"."""
    import os

    from tseeds_jax import results_record

    values = {}

    def put(key, v):
        if isinstance(v, dict):
            for k, x in v.items():
                put(f"{key}.{k}" if key else str(k), x)
        elif isinstance(v, int | float) and not isinstance(v, bool):
            unit = ("bytes per device" if "peak" in key else
                    next((u for suffix, u in _UNITS if key.endswith(suffix)), ""))
            name = key.replace(".", "__")
            values[name] = {"value": v, "unit": unit}

    put("", res.summary())
    rows = [[c.name, c.phase, _gib(c.peak), f"{c.flops / 1e12:.3g}", f"{c.bytes_accessed / 1e9:.3g}",
             f"{c.ici_bytes / 1e9:.3g}", f"{c.compile_s:.0f}"] for c in res.compiled]
    rec = results_record.make(
        os.path.splitext(os.path.basename(path))[0],
        f"programs of a training step compiled for {res.target.topology} (libtpu, compile only)",
        "compile-only bound", "tseeds compile " + " ".join(argv), backend="tpu (compile-only)",
        values=values, table={"columns": ["program", "phase", "peak GiB", "TFLOP", "GB accessed",
                                          "GB collectives", "compile s"], "rows": rows},
        note="rooflines and bounds from the compiled HLO (hlo_cost); nothing ran on a TPU")
    results_record.write(path, rec)


def _check(fv, only) -> int:
    """`--check DIR`: lowers, never compiles; one line on stdout (match) or stderr (else)."""
    import os

    from tseeds_jax.rl.config import ConfigValueError
    from tseeds_jax.scale import compile_manifest as cm

    where = fv.check
    if fv.out:
        problem = "--check and --out exclude each other (check a folder, or write one)"
    elif not os.path.exists(where):
        problem = f"--check={where!r}: no such folder"
    elif not os.path.exists(cm.manifest_path(where)):
        problem = f"--check={where!r}: no {cm.MANIFEST} there (write it with --out {where})"
    else:
        problem = None
    if problem:
        print(f"tseeds compile: {problem}", file=sys.stderr)
        return 2
    try:
        manifest, n = cm.check_lowered(where, fv.config, topology=fv.topology, only=only,
                                       prefill_buckets=fv.prefill_buckets)
    except cm.ManifestMismatch as e:
        print(f"tseeds compile: {where} does not match: {e}", file=sys.stderr)
        return 1
    except (ConfigValueError, ValueError) as e:
        print(f"tseeds compile: {str(e).splitlines()[0]}", file=sys.stderr)
        return 2
    print(f"{where} matches: {n} programs, config sha256 {manifest['config_sha256'][:12]}, "
          f"topology {manifest['topology']}")
    return 0


def _plan(cd, res):
    """The planner's estimate for the same config and device count (None if it cannot plan)."""
    from tseeds_jax.scale import plan_cli

    try:
        plan, _ = plan_cli.build_plan(cd, num_devices=res.target.mesh.size,
                                      hbm_gib=res.target.hbm_bytes / (1 << 30))
    except (ValueError, TypeError):
        return None
    return plan
