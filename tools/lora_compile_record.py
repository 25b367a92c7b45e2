"""The compile-only record of the 7B LoRA variant (issue 47): memory per phase, update and decode
bounds and the two sampler modes' costs, read from saved `tseeds compile --json` outputs.

    # each a `tseeds compile --config configs/qwen25_math_7b_lora_seeds.py[:v6e] --only PHASES
    #   --prefill-buckets max --json` output (DIR/NAME.json, NAME below)
    python tools/lora_compile_record.py DIR --record docs/results/tpu_compile_lora_7b.json

NAME: lora7b_v5p8_{sampler,sampler_lowrank,learner,stats} and lora7b_v6e8_{sampler,learner}.
Numbers are per device and compile-only bounds (rooflines of the compiled programs: FLOPs over
peak, bytes accessed over HBM bandwidth, collectives over half the ICI bandwidth; nothing ran on a
TPU). "break-even decode steps": the merge program's time over the low-rank decode step's extra
time; a sync followed by more decode steps than that is cheaper merged.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

GIB = 1 << 30


def _load(folder: str, name: str) -> dict | None:
    path = os.path.join(folder, f"{name}.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def _prog(d: dict | None, name: str) -> dict | None:
    return None if d is None else next((p for p in d["programs"] if p["name"] == name), None)


def _chip(d: dict) -> tuple[float, float, float]:
    from tseeds_jax.chips import chip

    c = chip(d["summary"]["chip"])
    return c.bf16_flops, c.hbm_bandwidth, c.ici_one_way


def _time(d: dict, p: dict | None) -> float:
    """Roofline + ICI (serial) seconds of one compiled program."""
    if p is None:
        return 0.0
    flops, hbm, ici = _chip(d)
    return max(p["flops"] / flops, p["bytes_accessed"] / hbm) + p["ici_bytes"] / ici


def variant(folder: str, tag: str) -> tuple[dict, list]:
    parts = {k: _load(folder, f"lora7b_{tag}_{k}") for k in ("sampler", "learner", "stats")}
    sampler, learner, stats = parts["sampler"], parts["learner"], parts["stats"]
    any_d = next(d for d in parts.values() if d is not None)
    s = any_d["summary"]
    usable = s["usable_bytes"]
    vals = {"chips": {"value": s["devices"], "unit": "chips"},
            "usable_gib": {"value": round(usable / GIB, 2), "unit": "GiB per device"}}
    peaks = {}
    for ph, d in (("learner", learner), ("stats", stats), ("sampler", sampler)):
        if d is not None and ph in d["summary"]["phase_peak"]:
            peaks[ph] = d["summary"]["phase_peak"][ph]
            vals[f"{ph}_peak_gib"] = {"value": round(peaks[ph] / GIB, 2), "unit": "GiB per device"}
    fits = all(v <= usable for v in peaks.values()) and all(
        not d["failures"] for d in parts.values() if d is not None)
    missing = [ph for ph in ("learner", "stats", "sampler") if ph not in peaks]
    verdict = "no" if not fits else "yes" if not missing else f"yes ({'/'.join(missing)} not compiled)"
    vals["fits"] = {"value": verdict, "unit": ""}
    upd = _prog(learner, "learner_update")
    if upd is not None:
        vals["update_bound_s"] = {"value": round(_time(learner, upd), 2), "unit": "s"}
        vals["update_tflop"] = {"value": round(upd["flops"] / 1e12, 1), "unit": "TFLOP per device"}
        vals["update_collectives_gb"] = {"value": round(upd["ici_bytes"] / 1e9, 2),
                                         "unit": "GB sent per device"}
    step = _prog(sampler, "sampler_decode_step")
    if step is not None:
        vals["decode_step_ms"] = {"value": round(_time(sampler, step) * 1e3, 2), "unit": "ms"}
        vals["decode_tokens_per_s_per_chip"] = {
            "value": round(sampler["summary"]["decode_tokens_per_s_per_chip_bound_ici_serial"]),
            "unit": "tokens/s/chip"}
        lay = sampler["summary"].get("decode_layout", {})
        vals["decode_layout"] = {"value": f"{lay.get('replicas')} x tensor {lay.get('tensor')}, "
                                          f"{lay.get('slots_per_replica')} slots", "unit": ""}
    row = [tag.replace("v5p8", "v5p-8").replace("v6e8", "v6e-8"), s["devices"],
           *(f"{peaks[ph] / GIB:.1f}" if ph in peaks else "not compiled"
             for ph in ("learner", "stats", "sampler")), f"{usable / GIB:.1f}",
           verdict if fits else "**no**",
           f"{vals['update_bound_s']['value']:.2f}" if upd else "-",
           f"{vals['decode_step_ms']['value']:.1f}" if step else "-"]
    return {f"{tag}_{k}": v for k, v in vals.items()}, row


def decode_modes(folder: str) -> tuple[dict, list]:
    """The merged and low-rank samplers' costs on v5p-8 (refresh call's decode step)."""
    merged, low = _load(folder, "lora7b_v5p8_sampler"), _load(folder, "lora7b_v5p8_sampler_lowrank")
    if merged is None or low is None:
        return {}, []
    out, rows = {}, []
    for tag, d in (("merged", merged), ("lowrank", low)):
        step = _prog(d, "sampler_decode_step")
        sync = sum(_time(d, _prog(d, n)) for n in ("sampler_reshard", "lora_merge"))
        gen = d["summary"]["generation_s"]["refresh_behavior"]
        out[f"{tag}_decode_step_gb"] = {"value": round(step["bytes_accessed"] / 1e9, 3),
                                        "unit": "GB accessed per device"}
        out[f"{tag}_decode_step_gflop"] = {"value": round(step["flops"] / 1e9, 1),
                                           "unit": "GFLOP per device"}
        out[f"{tag}_decode_step_ms"] = {"value": round(_time(d, step) * 1e3, 3), "unit": "ms"}
        out[f"{tag}_sync_ms"] = {"value": round(sync * 1e3, 2), "unit": "ms"}
        out[f"{tag}_refresh_generation_s"] = {"value": round(gen["total_s"], 2), "unit": "s"}
        out[f"{tag}_sampler_peak_gib"] = {
            "value": round(d["summary"]["phase_peak"]["sampler"] / GIB, 1), "unit": "GiB per device"}
        reshard = _prog(d, "sampler_reshard")
        rows.append([tag, f"{step['bytes_accessed'] / 1e9:.3f}", f"{step['flops'] / 1e9:.1f}",
                     f"{_time(d, step) * 1e3:.3f}", f"{reshard['ici_bytes'] / 1e6:.1f}",
                     f"{sync * 1e3:.2f}", f"{gen['total_s']:.2f}",
                     f"{d['summary']['phase_peak']['sampler'] / GIB:.1f}"])
    merge = _prog(merged, "lora_merge")
    extra = out["lowrank_decode_step_ms"]["value"] - out["merged_decode_step_ms"]["value"]
    out["merge_gb"] = {"value": round(merge["bytes_accessed"] / 1e9, 2),
                       "unit": "GB accessed per device"}
    if extra > 0:
        out["break_even_decode_steps"] = {
            "value": round(out["merged_sync_ms"]["value"] / extra), "unit": "decode steps"}
    return out, rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder")
    ap.add_argument("--record", required=True)
    args = ap.parse_args(argv)
    from tseeds_jax import results_record

    values, rows = {}, []
    for tag in ("v5p8", "v6e8"):
        if _load(args.folder, f"lora7b_{tag}_sampler") is None:
            continue
        v, row = variant(args.folder, tag)
        values.update(v)
        rows.append(row)
    modes, mode_rows = decode_modes(args.folder)
    values.update({f"mode_{k}": v for k, v in modes.items()})
    rec = results_record.make(
        os.path.splitext(os.path.basename(args.record))[0],
        "Qwen2.5-Math-7B LoRA Thinking Seeds (rank 32, every projection, bfloat16 frozen base) "
        "compiled for v5p-8 and v6e-8: memory per phase, update and decode bounds, and the "
        "merged vs low-rank sampler", "compile-only bound",
        "tseeds compile --config configs/qwen25_math_7b_lora_seeds.py[:v6e] --only PHASES "
        "--prefill-buckets max --json [--config.lora.sampler=lowrank]; "
        "python tools/lora_compile_record.py runs/c47 --record " + args.record,
        backend="tpu (compile-only)", values=values,
        table={"columns": ["variant", "chips", "learner peak GiB", "stats peak GiB",
                           "sampler peak GiB", "usable GiB", "fits",
                           "update bound s (roofline + ICI)", "decode step ms (refresh call)"],
               "rows": rows},
        note="per device; peaks from memory_analysis plus the bytes alive outside each program "
             "(compile_programs extra_live); bounds: rooflines of the compiled HLO plus "
             "collectives over half the ICI bandwidth (serial); nothing ran on a TPU. Decode "
             "modes (v5p-8, the refresh call's decode step; columns: GB accessed, GFLOP, ms, "
             "weight-sync collectives MB, sync ms, refresh generation s, sampler peak GiB): "
             + "; ".join(" / ".join(map(str, r)) for r in mode_rows))
    results_record.write(args.record, rec)
    print(json.dumps({k: v["value"] for k, v in values.items()}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
