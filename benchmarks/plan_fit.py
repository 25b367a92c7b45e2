"""The fit table of docs/scale.md ("Paper-scale configs"): `tseeds plan --json` for every variant
of the three paper-scale configs as shipped (sampler placement "decode"), written as the result
record docs/results/plan_fit_paper_variants.json (kind "estimate": the memory planner's model;
tests/test_doc_numbers.py re-renders the doc's table from it), and the checkpointed train state
of each model (float32 master parameters + AdamW's two float32 moments: 12 bytes per parameter,
as the paper configs keep them) as docs/results/checkpoint_state_size.json (kind "estimate").

    python benchmarks/plan_fit.py            # ~1 min on 2 cores: one planner process per variant
    python benchmarks/plan_fit.py --no-write
    python benchmarks/plan_fit.py --family   # the method-family configs instead (~4 min):
                                             # docs/results/plan_fit_method_family.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys

VARIANTS = ("qwen25_math_7b_dapo17k:tpu", "qwen25_math_7b_dapo17k:gpu",
            "r1_distill_qwen_1p5b_openr1:tpu", "r1_distill_qwen_1p5b_openr1:gpu",
            "qwen3_4b_thinking_code:tpu", "qwen3_4b_thinking_code:gpu")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GIB = 1 << 30


# The method-family configs (no hardware section of their own) on the dapo17k GPU variant's
# hardware, as docs/scale.md plans them.
FAMILY_HARDWARE = ["--accelerator", "8xH100", "--config.mesh.fsdp=8",
                   "--config.optim.micro_batch_size=8"]


def plan(variant: str, extra: tuple[str, ...] = ()) -> dict:
    name, _, var = variant.partition(":")
    arg = f"configs/{name}.py" + (f":{var}" if var == "gpu" else "")
    out = subprocess.run([sys.executable, "-c", "import sys; from tseeds_jax.cli import main; "
                          "sys.exit(main(sys.argv[1:]))", "plan", "--config", arg, "--json",
                          *extra], cwd=ROOT, capture_output=True, text=True)
    if out.returncode not in (0, 1):  # 1 = does not fit: still a plan
        raise SystemExit(f"tseeds plan --config {arg}: exit {out.returncode}: {out.stderr[-400:]}")
    return json.loads(out.stdout)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--no-write", action="store_true", help="print only")
    p.add_argument("--family", action="store_true",
                   help="plan the method-family configs (configs/qwen25_math_7b_*.py) instead")
    a = p.parse_args(argv)
    if a.family:
        return family(a.no_write)
    rows, values, sizes = [], {}, {}
    for v in VARIANTS:
        d = plan(v)
        params = next(t["note"] for t in d["terms"] if t["name"] == "parameters")
        billions = float(re.match(r"([\d.]+)B params", params).group(1))
        model = v.split(":")[0]
        # 4 B float32 master + 2 x 4 B AdamW moments per parameter (docs/scale.md, memory model)
        sizes[model] = {"value": int(round(billions * 12)), "unit": "GB (1e9 bytes)"}
        ph = d["phases"]
        res = ph["resident"]
        cells = [f"{(res + ph[k]) / GIB:.1f}" for k in ("learner", "sampler", "stats")]
        peak = d["peak_bytes"] / GIB
        rows.append([f"{v} ({d['accelerator']})", f"{d['usable_bytes'] / GIB:.1f}", *cells,
                     f"{'fits' if d['fits'] else 'does not fit'} ({peak:.1f}, {d['peak_phase']})"])
        values[v.replace(":", "_") + "_peak"] = {"value": round(peak, 1), "unit": "GiB/device"}
        print(" | ".join(rows[-1]), flush=True)
    sys.path.insert(0, ROOT)
    from tseeds_jax import results_record

    rec = results_record.make(
        "plan_fit_paper_variants", "planned peak HBM per device of the paper-scale variants, "
        "sampler placement 'decode' as shipped", "estimate",
        "python benchmarks/plan_fit.py", backend="none (planner model, no program compiled)",
        values=values, table={"columns": ["config:variant (target)", "HBM usable GiB",
                                          "resident + learner", "resident + sampler (decode)",
                                          "resident + stats", "peak"], "rows": rows})
    ckpt = results_record.make(
        "checkpoint_state_size", "checkpointed train state per model: float32 parameters + "
        "AdamW mu and nu in float32 (12 bytes per parameter; parameter counts from tseeds plan)",
        "estimate", "python benchmarks/plan_fit.py", backend="none (arithmetic)", values=sizes,
        stale={"qwen25_math_7b_dapo17k": ["about 71 GB"], "qwen3_4b_thinking_code": ["about 40 GB"],
               "r1_distill_qwen_1p5b_openr1": ["about 15 GB"]})
    print(sizes)
    if not a.no_write:
        for r in (rec, ckpt):
            print(results_record.write(os.path.join(ROOT, "docs", "results",
                                                    f"{r['name']}.json"), r))
    return 0


def family(no_write: bool) -> int:
    """The method-family configs with the replica placement they ship and with the decode
    placement of the paper variants: planned peak per device (kind "estimate")."""
    names = sorted(f[:-3] for f in os.listdir(os.path.join(ROOT, "configs"))
                   if f.startswith("qwen25_math_7b_") and f.endswith(".py")
                   and f != "qwen25_math_7b_dapo17k.py")
    rows, peaks, replica = [], [], []
    for name in names:
        cells = [name]
        for placement in ("replica", "decode"):
            d = plan(name, (*FAMILY_HARDWARE, "--sampler-placement", placement))
            peak = d["peak_bytes"] / GIB
            cells.append(f"{'fits' if d['fits'] else 'does not fit'} ({peak:.1f}, {d['peak_phase']})")
            (peaks if placement == "decode" else replica).append(round(peak, 1))
        rows.append(cells)
        print(" | ".join(cells), flush=True)
    sys.path.insert(0, ROOT)
    from tseeds_jax import results_record

    rec = results_record.make(
        "plan_fit_method_family", "planned peak HBM per device (GiB) of the method-family configs "
        "on 8xH100 (fsdp 8, micro-batch 8), with the replica sampler placement they ship and with "
        "the decode placement", "estimate", "python benchmarks/plan_fit.py --family",
        backend="none (planner model, no program compiled)",
        values={"decode_peak_min": {"value": min(peaks), "unit": "GiB/device"},
                "decode_peak_max": {"value": max(peaks), "unit": "GiB/device"},
                "replica_peak_max": {"value": max(replica), "unit": "GiB/device"}},
        table={"columns": ["config (" + " ".join(FAMILY_HARDWARE) + ")", "replica (as shipped)",
                           "--sampler-placement decode"], "rows": rows},
        # the estimate printed before the decode placement (sharded placement, 2026-12-01)
        stale={"decode_peak_min": ["25.2-25.7 GiB"]})
    if not no_write:
        print(results_record.write(os.path.join(ROOT, "docs", "results", f"{rec['name']}.json"), rec))
    return 0


if __name__ == "__main__":
    sys.exit(main())
