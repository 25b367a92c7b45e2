"""The table (and quoted figures) of a demo-over-bases record, computed from its per-base values.

    python -m tseeds_jax.eval.bases_table docs/results/demo_hard_bases.json [--plot PNG]

Reads the record's values (`tseeds_jax.demo.bases_record`: per method a list per base of
per-training-seed pass@1), writes its `table` field and the figures prose quotes (each with the
table cell it is read from), and with --plot the per-base effect figure. Statistics:
`bases_stats` (paired within a base, Student t across bases, Holm over each family).
"""

from __future__ import annotations

import argparse
import math
import sys

import numpy as np

from tseeds_jax.eval import bases_stats
from tseeds_jax.eval.seed_report import accuracy_pairs
from tseeds_jax.rl.methods import registry as method_registry

# The demo's own method names; the restart methods' labels are their registry entries'.
DEMO_LABELS = {"dapo": "On-policy DAPO", "ts_ratio": "Thinking Seeds (ratio 0.5, T 8)",
               "ts_mixture": "Thinking Seeds, `mixture`",
               "ts_mixture_spread": "Thinking Seeds, `mixture_spread`",
               "ts_adaptive": "Thinking Seeds, first adaptive rule", "ts_entropy": "Thinking "
               "Seeds, entropy rule", "dapo_minibatch": "On-policy DAPO, 4 mini-batches",
               "dapo_lora": "On-policy DAPO, LoRA rank 8",
               "ts_ratio_lora": "Thinking Seeds (ratio 0.5, T 8), LoRA rank 8"}


def labels() -> dict[str, str]:
    return {**DEMO_LABELS, **method_registry.labels()}
BASELINE, REFERENCE = "dapo", "ts_ratio"
# A "no difference shown" leaves open any difference below this (the power of the design).
DETECTABLE = "detectable vs DAPO (80% power, 5% two-sided, before Holm)"
_SUFFIX = "_pass1"


def methods_of(values: dict) -> dict[str, list]:
    """{method: per_base pass@1} of a record's values, in the record's order, for the methods
    with at least one run."""
    out = {}
    for key, entry in values.items():
        if key.endswith(_SUFFIX) and key != "base_pass1" and isinstance(entry["value"], list):
            per_base = entry["value"]
            if any(isinstance(s, list) and s for s in per_base):
                out[key[:-len(_SUFFIX)]] = per_base
    return out


def _p(p: float) -> str:
    return "p < 0.01" if p < 0.01 else f"p = {p:.2f}"


def _diff(r: dict | None) -> str:
    """+d ± h (p; Holm: yes|no), bold where Holm keeps it; "—" without a test."""
    if r is None or r["n"] == 0:
        return "—"
    if not math.isfinite(r["p"]):
        return (f"{r['mean']:+.1f} (1 base)" if r["n"] == 1 else
                f"{r['mean']:+.1f} (the same on all {r['n']} bases: no test)")
    mark = "**" if r["holm"] else ""
    return (f"{mark}{r['mean']:+.1f} ± {r['half']:.1f} ({_p(r['p'])}; "
            f"Holm: {'yes' if r['holm'] else 'no'}){mark}")


def build(values: dict) -> dict:
    """{"table", "figures"}: the record's table and the figures quoted from its cells
    ({key: (text, column)})."""
    data = methods_of(values)
    if BASELINE not in data:
        raise ValueError(f"values: no '{BASELINE}{_SUFFIX}' with runs; the table compares with "
                         "on-policy DAPO")
    names = list(data)
    ref = REFERENCE if REFERENCE in data else BASELINE
    acc = bases_stats.family(accuracy_pairs(names, BASELINE, ref), data)
    base = [[x] if x is not None else [] for x in values["base_pass1"]["value"]]
    rl = bases_stats.family([(m, "__base__") for m in names], {**data, "__base__": base})
    seeded = {m: values[f"{m}_all_equal_seeded"]["value"] for m in names
              if f"{m}_all_equal_seeded" in values
              and any(x is not None for s in values[f"{m}_all_equal_seeded"]["value"] for x in s)}
    eq_fam = (bases_stats.family([(m, REFERENCE) for m in seeded if m != REFERENCE], seeded)
              if REFERENCE in seeded else {})
    n_acc, n_rl, n_eq = (sum(math.isfinite(r["p"]) for r in fam.values())
                         for fam in (acc, rl, eq_fam))
    cols = ["method", "bases × seeds", "held-out pass@1, mean over bases ± 95% (per base)",
            "SD between / within bases", f"vs DAPO, paired by base (Holm over {n_acc})",
            f"vs ratio rule, paired by base (Holm over {n_acc})", "bases above DAPO",
            f"RL − base, paired by base (Holm over {n_rl})", "all-equal groups, %",
            f"all-equal seeded groups, % (vs ratio rule, paired by base; Holm over {n_eq})",
            DETECTABLE]
    rows, figures = [], {}
    for i, m in enumerate(names):
        means = [x for x in bases_stats.base_means(data[m]) if x is not None]
        over = bases_stats.t_test(means)
        seeds = sorted({len(s) for s in data[m] if s})
        split = bases_stats.variance_split(data[m])
        eq = [x for s in values.get(f"{m}_all_equal", {}).get("value", []) for x in s
              if x is not None]
        vs_d = acc.get((m, BASELINE))
        vs_r = (acc.get((m, ref)) or acc.get((ref, m))) if ref == REFERENCE else None
        if vs_r is not None and (m, ref) not in acc:  # stored as (ratio, DAPO): flip
            vs_r = {**vs_r, "mean": -vs_r["mean"], "above": vs_r["n"] - vs_r["above"]}
        cells = [
            labels().get(m, m), f"{len(means)} × {'/'.join(map(str, seeds))}",
            (f"{over['mean']:.1f}" + (f" ± {over['half']:.1f}" if math.isfinite(over["half"])
                                       else "") + f" ({', '.join(f'{x:.1f}' for x in means)})"),
            (f"{split['sd_between']:.1f} / {split['sd_within']:.1f}" if split else "—"),
            "—" if m == BASELINE else _diff(vs_d),
            "—" if m == ref else _diff(vs_r),
            "—" if m == BASELINE or vs_d is None else f"{vs_d['above']} of {vs_d['n']}",
            _diff(rl.get((m, "__base__"))),
            f"{np.mean(eq):.1f}" if eq else "—", _seeded_cell(m, seeded, eq_fam),
            "—" if m == BASELINE else _detectable(vs_d)]
        rows.append(cells)
        for col, key in ((2, "mean"), (4, "vs_dapo"), (5, "vs_ratio"), (6, "above_dapo"),
                         (7, "over_base"), (3, "sd_split"), (10, "detectable")):
            if cells[col] != "—":
                figures[f"{m}_{key}"] = (_quote(cells[col]), i, col)
        for b, x in zip(bases_of(data[m]), means):  # per-base means, for prose fig markers
            figures[f"{m}_base{b}"] = (f"{x:.1f}", i, 2)
        if "(" in cells[9]:
            figures[f"{m}_seeded_equal_vs_ratio"] = (_quote(cells[9].split("(", 1)[1]), i, 9)
    return {"table": {"columns": cols, "rows": rows}, "figures": figures, "acc": acc, "rl": rl}


def bases_of(per_base) -> list[int]:
    """The bases with values, in order (the per-base list of the mean cell)."""
    return [b for b, x in enumerate(bases_stats.base_means(per_base)) if x is not None]


def robustness(values: dict) -> dict[str, tuple[str, str]]:
    """Figures computed from the per-run values that say how much the SD split rests on single
    bases ({key: (text, unit)}): for every method with >= 2 seeds per base, its per-seed values
    on each base, its split without each base, and the F test of its difference to DAPO varying
    between bases beyond the seeds' noise (`bases_stats.interaction_f`)."""
    data = methods_of(values)
    out = {}
    for m, per_base in data.items():
        if bases_stats.variance_split(per_base) is None:
            continue
        for b in range(len(per_base)):
            if len(per_base[b]) > 1:
                out[f"{m}_base{b}_seeds"] = (", ".join(f"{x:.1f}" for x in per_base[b]),
                                             f"pass@1 per training seed on base {b}, %")
            split = bases_stats.variance_split(bases_stats.without_base(per_base, b))
            if split:
                out[f"{m}_sd_split_without_base{b}"] = (
                    f"{split['sd_between']:.1f} / {split['sd_within']:.1f}",
                    f"SD between / within bases without base {b} (bases_stats.variance_split)")
        f = bases_stats.interaction_f(per_base, data[BASELINE]) if m != BASELINE else None
        if f is not None:
            out[f"{m}_vs_dapo_between_bases_f"] = (
                f"F({f['df_between']}, {f['df_within']}) = {f['F']:.1f}, {_p(f['p'])}",
                "the seed-paired difference to DAPO between bases against within "
                "(bases_stats.interaction_f)")
    return out


def _detectable(r: dict | None) -> str:
    """The smallest difference vs DAPO the paired t over these bases detects (80% power, 5%
    two-sided, before Holm), from the observed SD of the per-base differences."""
    if r is None or r["n"] < 2 or not math.isfinite(r["sd"]) or r["sd"] == 0:
        return "—"
    d = bases_stats.detectable_difference(r["sd"], r["n"])
    return f"{d:.1f}" if math.isfinite(d) else "—"


def _seeded_cell(m: str, seeded: dict, fam: dict) -> str:
    """Mean all-equal share of the seeded batches over the method's runs, and its difference to
    the ratio rule's, paired by base."""
    if m not in seeded:
        return "—"
    vals = [x for s in seeded[m] for x in s if x is not None]
    r = fam.get((m, REFERENCE))
    return f"{np.mean(vals):.1f}" + ("" if r is None or r["n"] == 0 else f" ({_diff(r)})")


def _quote(cell: str) -> str:
    """The part of a cell prose quotes: the difference and its interval, without the p and
    Holm's verdict; the mean without the per-base list."""
    text = cell.strip("*")
    return text.split(" (")[0]


def update(path: str, plot: str | None = None) -> dict:
    """Writes the table and the quoted figures into the record at `path` (and the plot)."""
    from tseeds_jax import results_record

    rec = results_record.load(path)
    got = build(rec["values"])
    rec["table"] = got["table"]
    for key, (text, row, col) in got["figures"].items():
        rec["values"][f"q_{key}"] = {"value": text, "unit": "quoted from the table",
                                     "from": f"{rec['name']}:{row}:{col}"}
    for key, (text, unit) in robustness(rec["values"]).items():
        rec["values"][f"c_{key}"] = {"value": text, "unit": unit}
    results_record.write(path, rec)
    if plot:
        from tseeds_jax.eval import plots

        data = methods_of(rec["values"])
        plots.per_base_effects(data, BASELINE, plot, labels(),
                               title=f"{rec['name']}: each method minus on-policy DAPO, per base")
    return got


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("record", help="a demo_<task>_bases record")
    ap.add_argument("--plot", default=None, help="write the per-base effect figure here (PNG)")
    args = ap.parse_args(argv)
    try:
        got = update(args.record, args.plot)
    except (OSError, ValueError, TypeError) as e:
        print(f"bases_table: {e}", file=sys.stderr)
        return 2
    for row in got["table"]["rows"]:
        print(" | ".join(row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
