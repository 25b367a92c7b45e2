"""The full-parameter 7B variant planned on smaller v5p slices (issue 55): `tseeds plan` of
configs/qwen25_math_7b_dapo17k.py on v5p-8/16/32/64 with fsdp over every chip, as the record
docs/results/plan_fit_7b_v5p_slices.json (an *estimate*: the memory planner, nothing compiled).

    python tools/plan_7b_slices.py --record docs/results/plan_fit_7b_v5p_slices.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

from tseeds_jax import results_record

CONFIG = "configs/qwen25_math_7b_dapo17k.py"
SLICES = (("v5p-8", 4), ("v5p-16", 8), ("v5p-32", 16), ("v5p-64", 32))  # name, chips
GIB = 2 ** 30


def plan(accelerator: str, chips: int) -> dict:
    out = subprocess.run([sys.executable, "-m", "tseeds_jax.cli", "plan", "--config", CONFIG,
                          "--accelerator", accelerator, f"--config.mesh.fsdp={chips}", "--json"],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--record", required=True)
    args = ap.parse_args(argv)
    rows, values = [], {}
    for name, chips in SLICES:
        p = plan(name, chips)
        peak, usable = p["peak_bytes"] / GIB, p["usable_bytes"] / GIB
        learner = p["learner_step_bytes"] / GIB
        rows.append([name, str(chips), f"data 1 / fsdp {chips} / tensor 1", f"{learner:.1f}",
                     f"{peak:.1f} ({p['peak_phase']})", f"{usable:.1f}",
                     "yes" if p["fits"] else "no"])
        values[f"{name.replace('-', '_')}_peak_gib"] = {"value": round(peak, 1),
                                                       "unit": "GiB per chip, planned peak"}
    cols = ["slice", "chips", "mesh", "learner step GiB", "planned peak GiB (phase)",
            "usable GiB", "fits (plan)"]
    rec = results_record.make(
        "plan_fit_7b_v5p_slices", f"{CONFIG} (full parameters) planned per chip on v5p slices, "
        "fsdp over every chip, the rest of the variant as shipped", "estimate",
        "python tools/plan_7b_slices.py --record " + args.record, backend="none (planner)",
        values=values, table={"columns": cols, "rows": rows},
        note="memory planner only: no slice here was compiled (the v5p-64 variant's compiled "
             "programs are in docs/scale.md, at an earlier commit)")
    results_record.write(args.record, rec)
    for r in rows:
        print(" | ".join(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
