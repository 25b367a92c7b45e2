"""The peer restart methods' demo table (issue 38), from run folders of one machine.

    python -m tseeds_jax.eval.peer_table NEW_DIR REF_DIR --record docs/results/demo_hard_peers.json

NEW_DIR: a `tseeds demo --methods prefixrl,questa,fr3e,cure` output folder; REF_DIR: one of
`--methods dapo,ts_ratio,ts_mixture` with the same task and base policy (the demo is
deterministic on one CPU, not across CPUs: docs/demo_results.md, "Numbers vary with the CPU").
Each row: held-out pass@1 (mean ± 95% t interval, per seed), the difference to on-policy DAPO
(Welch 95% interval and p; Holm's correction over that column's comparisons) and, for the new
methods, to Thinking Seeds `mixture` (Holm over those four), generated tokens per step, wall
seconds per step (from step 5: the first include compilation) and the all-equal share of
groups. Only seeds whose run finished (an eval.json) count, and the row says how many.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys

import numpy as np

from tseeds_jax.eval.rundata import t_interval
from tseeds_jax.eval.seed_report import holm, welch_interval
from tseeds_jax.rl.methods import registry as method_registry

REF = (("dapo", "On-policy DAPO"), ("ts_ratio", "Thinking Seeds (ratio 0.5, T 8)"),
       ("ts_mixture", "Thinking Seeds, `mixture`"))
WARMUP_STEPS = 5


def run_stats(run_dir: str) -> dict | None:
    """pass@1 and per-step means of one finished run, or None when it has not finished."""
    try:
        with open(os.path.join(run_dir, "eval.json")) as f:
            final = json.load(f)
        with open(os.path.join(run_dir, "metrics.jsonl")) as f:
            metrics = [json.loads(line) for line in f if line.strip()]
    except (OSError, ValueError):
        return None

    def mean(key, start=0):
        vals = [float(m[key]) for m in metrics[start:] if m.get(key) is not None]
        return float(np.mean(vals)) if vals else float("nan")

    return {"pass1": float(final["avg_at_n"]), "tokens": mean("generated_tokens"),
            "step_s": mean("time_step", WARMUP_STEPS), "equal": mean("zero_adv_group_frac")}


def _pm(vals) -> str:
    m, h = t_interval(vals)
    return f"{100 * m:.1f}" + ("" if not math.isfinite(h) else f" ± {100 * h:.1f}")


def _cell(res, kept) -> str:
    if res is None:
        return "—"
    d, h, p = res
    mark = "**" if kept and abs(d) > h else ""
    return f"{mark}{100 * d:+.1f} ± {100 * h:.1f} (p={p:.2f}; Holm: {'yes' if kept else 'no'}){mark}"


def build(new_root: str, ref_root: str, seeds: int) -> dict:
    """{"table", "values"} of the record (see the module docstring)."""
    new = tuple(method_registry.labels().items())  # the restart methods
    runs: dict[str, list[dict]] = {}
    for root, methods in ((ref_root, REF), (new_root, new)):
        for name, _ in methods:
            got = [run_stats(os.path.join(root, "runs", name, f"seed{s}")) for s in range(seeds)]
            runs[name] = [g for g in got if g is not None]
    pass1 = {m: [r["pass1"] for r in rs] for m, rs in runs.items()}

    def family(methods, ref):
        res = {m: (welch_interval(pass1[m], pass1[ref])
                   if len(pass1[m]) >= 2 and len(pass1[ref]) >= 2 else None) for m in methods}
        keys = [m for m, r in res.items() if r is not None and math.isfinite(r[2])]
        kept = dict(zip(keys, holm([res[m][2] for m in keys]), strict=True))
        return {m: _cell(r, kept.get(m)) for m, r in res.items()}

    vs_dapo = family([m for m, _ in REF[1:] + new], "dapo")
    vs_mix = family([m for m, _ in new], "ts_mixture")
    rows, values = [], {}
    for m, label in REF + new:
        rs = runs[m]
        if not rs:
            rows.append([label, "did not run", "0", "—", "—", "—", "—", "—"])
            continue
        vals = pass1[m]
        rows.append([label, f"{_pm(vals)} ({', '.join(f'{100 * x:.1f}' for x in vals)})",
                     str(len(rs)), vs_dapo.get(m, "—"), vs_mix.get(m, "—"),
                     f"{np.mean([r['tokens'] for r in rs]):.0f}",
                     f"{np.mean([r['step_s'] for r in rs]):.2f}",
                     f"{100 * np.mean([r['equal'] for r in rs]):.1f}"])
        values[f"{m}_pass1"] = {"value": [round(100 * x, 1) for x in vals],
                                "unit": f"% per training seed 0-{len(vals) - 1}"}
        values[f"{m}_tokens_per_step"] = {"value": round(float(np.mean([r["tokens"] for r in rs])), 1),
                                          "unit": "generated tokens per step (mean over seeds)"}
        values[f"{m}_s_per_step"] = {"value": round(float(np.mean([r["step_s"] for r in rs])), 3),
                                     "unit": f"wall s per step from step {WARMUP_STEPS}"}
    cols = ["method", "held-out pass@1, % (per seed)", "seeds",
            "vs DAPO (Welch 95%; Holm over 6)", "vs `mixture` (Welch 95%; Holm over 4)",
            "generated tokens / step", "wall s / step", "all-equal groups, %"]
    return {"table": {"columns": cols, "rows": rows}, "values": values}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("new", help="the tseeds demo output folder of the new methods")
    ap.add_argument("ref", help="the folder of dapo, ts_ratio, ts_mixture (same base policy)")
    ap.add_argument("--record", required=True, help="where to write this table's record")
    ap.add_argument("--task", default="hard")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--command", default="", help="the demo command that made DIR")
    args = ap.parse_args(argv)
    from tseeds_jax import results_record

    got = build(args.new, args.ref, args.seeds)
    name = os.path.splitext(os.path.basename(args.record))[0]
    cmd = ((args.command + "; ") if args.command else "") + (
        f"python -m tseeds_jax.eval.peer_table {args.new} {args.ref} "
        f"--record {args.record} --task {args.task} --seeds {args.seeds}")
    rec = results_record.make(
        name, f"demo, {args.task} task: peer restart methods beside DAPO and Thinking Seeds, "
        "same base policy, one machine", "measured", cmd, backend="cpu",
        values=got["values"], table=got["table"],
        note="only the seeds whose run finished count (the seeds column)")
    results_record.write(args.record, rec)
    for row in got["table"]["rows"]:
        print(" | ".join(row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
