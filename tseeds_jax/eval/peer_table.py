"""The peer restart methods' demo table (issue 38): new runs beside a recorded demo table.

    python -m tseeds_jax.eval.peer_table DIR --recorded docs/results/demo_hard_5seeds.json \
        --record docs/results/demo_hard_peers.json [--task hard]

DIR is a `tseeds demo --methods prefixrl,questa,fr3e,cure` output folder. Each row: held-out
pass@1 (mean ± 95% t interval, per seed), the difference to on-policy DAPO and to Thinking Seeds
`mixture` (Welch 95% interval and p; Holm's correction over each column's comparisons, a family
of their own), generated tokens per step, wall seconds per step (steps 5 on: the first include
compilation) and the all-equal share of groups. The recorded methods' pass@1 comes from the
recorded per-seed values (printed to 0.1 points); their tokens, times and all-equal shares were
not re-run here and are left blank. Only seeds whose run finished (an eval.json) count, and the
row says how many.
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

NEW = (("prefixrl", "PrefixRL"), ("questa", "QuestA"), ("fr3e", "FR3E"), ("cure", "CURE"))
RECORDED_LABELS = {"dapo": "On-policy DAPO", "ts_ratio": "Thinking Seeds (ratio 0.5, T 8)",
                   "ts_mixture": "Thinking Seeds, `mixture`",
                   "ts_mixture_spread": "Thinking Seeds, `mixture_spread`",
                   "ts_adaptive": "Thinking Seeds, adaptive (first rule)"}
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


def build(runs_root: str, recorded: dict, seeds: int) -> dict:
    """{"table", "values"} of the record (see the module docstring)."""
    rec_pass = {k[: -len("_pass1")]: [x / 100 for x in v["value"]]
                for k, v in recorded["values"].items() if k.endswith("_pass1")}
    new: dict[str, list[dict]] = {}
    for name, _ in NEW:
        got = [run_stats(os.path.join(runs_root, "runs", name, f"seed{s}")) for s in range(seeds)]
        new[name] = [g for g in got if g is not None]
    pass1 = dict(rec_pass)
    pass1.update({m: [r["pass1"] for r in rs] for m, rs in new.items() if rs})
    tests = {}
    for ref in ("dapo", "ts_mixture"):
        res = {m: (welch_interval(pass1[m], pass1[ref]) if len(pass1[m]) >= 2 else None)
               for m, _ in NEW if m in pass1}
        keys = [m for m, r in res.items() if r is not None and math.isfinite(r[2])]
        kept = dict(zip(keys, holm([res[m][2] for m in keys]), strict=True))
        tests[ref] = {m: _cell(r, kept.get(m)) for m, r in res.items()}
    rows, values = [], {}
    for m, label in RECORDED_LABELS.items():
        if m in rec_pass:
            rows.append([label, f"{_pm(rec_pass[m])} ({', '.join(f'{100 * x:.1f}' for x in rec_pass[m])})",
                         str(len(rec_pass[m])), "—", "—", "not re-run", "not re-run", "not re-run"])
    for m, label in NEW:
        rs = new[m]
        if not rs:
            rows.append([label, "did not run", "0", "—", "—", "—", "—", "—"])
            continue
        vals = [r["pass1"] for r in rs]
        rows.append([label, f"{_pm(vals)} ({', '.join(f'{100 * x:.1f}' for x in vals)})",
                     str(len(rs)), tests["dapo"].get(m, "—"), tests["ts_mixture"].get(m, "—"),
                     f"{np.mean([r['tokens'] for r in rs]):.0f}",
                     f"{np.mean([r['step_s'] for r in rs]):.2f}",
                     f"{100 * np.mean([r['equal'] for r in rs]):.1f}"])
        values[f"{m}_pass1"] = {"value": [round(100 * x, 1) for x in vals],
                                "unit": f"% per training seed 0-{len(vals) - 1}"}
        values[f"{m}_tokens_per_step"] = {"value": round(float(np.mean([r["tokens"] for r in rs])), 1),
                                          "unit": "generated tokens per step (mean over seeds)"}
        values[f"{m}_s_per_step"] = {"value": round(float(np.mean([r["step_s"] for r in rs])), 3),
                                     "unit": f"wall s per step from step {WARMUP_STEPS}"}
    cols = ["method", "held-out pass@1, % (per seed)", "seeds", "vs DAPO (Welch; Holm over the new "
            "methods)", "vs `mixture` (Welch; Holm over the new methods)", "generated tokens / step",
            "wall s / step", "all-equal groups, %"]
    return {"table": {"columns": cols, "rows": rows}, "values": values}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", help="the tseeds demo output folder of the new methods")
    ap.add_argument("--recorded", required=True, help="the record of the existing methods")
    ap.add_argument("--record", required=True, help="where to write this table's record")
    ap.add_argument("--task", default="hard")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--command", default="", help="the demo command that made DIR")
    args = ap.parse_args(argv)
    from tseeds_jax import results_record

    recorded = results_record.load(args.recorded)
    got = build(args.runs, recorded, args.seeds)
    name = os.path.splitext(os.path.basename(args.record))[0]
    cmd = ((args.command + "; ") if args.command else "") + (
        f"python -m tseeds_jax.eval.peer_table {args.runs} --recorded {args.recorded} "
        f"--record {args.record} --task {args.task} --seeds {args.seeds}")
    rec = results_record.make(
        name, f"demo, {args.task} task: peer restart methods beside the recorded methods "
        f"({os.path.basename(args.recorded)})", "measured", cmd, backend="cpu",
        values=got["values"], table=got["table"],
        note="recorded rows: pass@1 per seed from the recorded table (0.1 points), other columns "
             "not re-run; new rows: only the seeds whose run finished")
    results_record.write(args.record, rec)
    for row in got["table"]["rows"]:
        print(" | ".join(row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
