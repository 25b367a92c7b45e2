"""The report's sections for a demo folder with several base policies (`tseeds demo --bases N`).

With more than one base, each method's effect is paired within a base and tested across bases
(`bases_stats`, the same table as the records `demo_<task>_bases`: `bases_table.build`), and the
report says on how many bases a method was above on-policy DAPO; a per-base plot shows one line
per base. Runs pooled over bases are never treated as training seeds of one experiment.
"""

from __future__ import annotations

import json
import math
import os

from tseeds_jax.eval import bases_stats, bases_table, plots
from tseeds_jax.eval.rundata import RunData, base_folder, per_base


def _read(path: str):
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def _mean_of(run: RunData, key: str) -> float | None:
    vals = [float(m[key]) for m in run.metrics if isinstance(m.get(key), int | float)
            and math.isfinite(float(m[key]))]
    return 100 * sum(vals) / len(vals) if vals else None


def base_evals(root: str, bases: list[int]) -> dict[int, dict]:
    """{base: its eval.json (with "greedy": eval_greedy.json's avg)} for the bases evaluated."""
    out = {}
    for b in bases:
        ev = _read(os.path.join(base_folder(root, b), "eval.json"))
        if ev:
            greedy = _read(os.path.join(base_folder(root, b), "eval_greedy.json")) or {}
            out[b] = {**ev, "greedy": greedy.get("avg_at_n")}
    return out


def values_from_runs(methods: dict[str, list[RunData]], evals: dict[int, dict],
                     bases: list[int]) -> dict:
    """The record-style values (`bases_record`) of a folder's runs, in %."""
    values = {"base_pass1": {"value": [100 * evals[b]["avg_at_n"] if b in evals else None
                                       for b in bases]}}
    for m, rs in methods.items():
        values[f"{m}_pass1"] = {"value": per_base(rs, lambda r: 100 * r.final["avg_at_n"],
                                                  bases)}
        for suffix, key in (("all_equal", "zero_adv_group_frac"),
                            ("all_equal_seeded", "zero_adv_group_frac/seeded")):
            values[f"{m}_{suffix}"] = {"value": per_base(rs, lambda r, k=key: _mean_of(r, k),
                                                         bases)}
    return values


def sections(root: str, methods: dict[str, list[RunData]], bases: list[int],
             plot_dir: str) -> dict[str, list[str]]:
    """{"base", "rl", "final"}: the markdown lines of the report's base-policy, RL-effect and
    final-accuracy sections over `bases`."""
    evals = base_evals(root, bases)
    out: dict[str, list[str]] = {"base": [], "rl": [], "final": []}
    for b in bases:
        ev = evals.get(b)
        if not ev:
            out["base"].append(f"- base {b}: (no evaluation)")
            continue
        greedy = "n/a" if ev["greedy"] is None else f"{100 * ev['greedy']:.1f}"
        out["base"].append(f"- base {b}: sampled avg@{ev['n']} (pass@1) "
                           f"**{100 * ev['avg_at_n']:.1f}**, greedy {greedy}, mean response "
                           f"{ev['mean_length']:.1f} tokens")
    out["base"].append("")
    values = values_from_runs(methods, evals, bases)
    if "dapo" not in methods:
        note = ["(the across-base comparison needs on-policy DAPO runs)", ""]
        return {**out, "rl": note, "final": note}
    got = bases_table.build(values)
    table = got["table"]
    md = ["| " + " | ".join(table["columns"]) + " |", "|" + "---|" * len(table["columns"])]
    md += ["| " + " | ".join(row) + " |" for row in table["rows"]]
    labels = {m: rs[0].label for m, rs in methods.items()}
    n = len(bases)
    out["rl"] = [f"Final held-out pass@1 minus the base policy's, paired by base (each base's "
                 f"runs against that base, mean over its training seeds), Student t over the {n} "
                 "bases with Holm's correction over the methods; the column 'RL − base' of the "
                 "table below.", ""]
    shown = [m for m in methods if got["rl"].get((m, "__base__"), {}).get("holm")]
    out["rl"].append(("RL from the base improves held-out accuracy across bases, after Holm's "
                      "correction, for: " + ", ".join(labels[m] for m in shown) + ".")
                     if shown else
                     f"**No method improved on the base across the {n} bases after Holm's "
                     "correction.** Differences between methods below compare policies that RL "
                     "did not measurably change on average over bases.")
    out["rl"].append("")
    plot = os.path.join(plot_dir, "per_base.png")
    plots.per_base_effects({m: values[f"{m}_pass1"]["value"] for m in methods}, "dapo", plot,
                           labels, title="each method minus on-policy DAPO, per base")
    out["final"] = (
        [f"Across the {n} base policies (every method trained from every base with the same "
         "training seeds; a method's value on a base is the mean over its seeds there). Each "
         "difference is paired within a base and tested over bases (Student t, n − 1 degrees of "
         "freedom); Holm's correction over the accuracy family (each method against DAPO and "
         "against the ratio rule); **bold** where Holm keeps it. SD between / within bases: "
         "one-way random-effects ANOVA, for methods with 2 or more seeds per base.", ""]
        + md + ["", "![per base](plots/per_base.png)", "",
                "One line per base: a method's pass@1 minus DAPO's on the same base; black: mean "
                "over bases with its 95% t-interval.", ""] + verdicts(got, labels, n)
        + lora_lines(values, labels))
    return out


def lora_lines(values: dict, labels: dict[str, str]) -> list[str]:
    """LoRA runs beside their full-parameter runs: the difference paired by base (not in the
    Holm family above: a question of its own, asked per pair)."""
    lines = []
    pairs = [(k[:-len("_lora_pass1")], k[:-len("_pass1")]) for k in values
             if k.endswith("_lora_pass1")]  # the demo's names: <method>_lora beside <method>
    for full, lora in pairs:
        a, b = values.get(f"{lora}_pass1"), values.get(f"{full}_pass1")
        if a is None or b is None:
            continue
        r = bases_stats.paired(a["value"], b["value"])
        if r["n"] == 0:
            continue
        spread = ("no test (one base)" if not math.isfinite(r["p"])
                  else f"± {r['half']:.1f} (paired t over {r['n']} bases, p = {r['p']:.2f})")
        lines.append(f"- {labels.get(lora, lora)} vs {labels.get(full, full)} (full parameters): "
                     f"{r['mean']:+.1f} points {spread}; above it on {r['above']} of {r['n']} "
                     "bases.")
    return lines + [""] if lines else []


def _power(r: dict) -> str:
    """What a "not shown" leaves open: the difference this design detects (`bases_stats`)."""
    d = bases_stats.detectable_difference(r["sd"], r["n"])
    if not math.isfinite(d):
        return "."
    return (f"; with this spread over {r['n']} bases the design detects a difference of "
            f"{d:.1f} points with 80% power (5% two-sided, before Holm), so a smaller one is "
            "not excluded.")


def verdicts(got: dict, labels: dict[str, str], n: int) -> list[str]:
    """One sentence per method against DAPO: the effect across bases and on how many bases."""
    lines = []
    for (m, against), r in got["acc"].items():
        if against != bases_table.BASELINE or r["n"] == 0:
            continue
        if not math.isfinite(r["p"]):
            where = ("on the one base with both" if r["n"] == 1 else
                     f"on each of the {r['n']} bases with both (no spread)")
            lines.append(f"- {labels.get(m, m)} vs {labels.get('dapo', 'dapo')}: "
                         f"{r['mean']:+.1f} points {where}; no test.")
            continue
        lines.append(
            f"- {labels.get(m, m)} vs {labels.get('dapo', 'dapo')}: {r['mean']:+.1f} ± "
            f"{r['half']:.1f} points across {r['n']} bases (paired t p = {r['p']:.2f}; Holm: "
            f"{'yes' if r['holm'] else 'no'}); above DAPO on {r['above']} of {r['n']} bases: "
            + ("the effect **holds across bases** after the correction."
               if r["holm"] else "**not shown across bases** after the correction"
               + (", whatever it did on single bases" if 0 < r["above"] < r["n"] else "")
               + _power(r)))
    return lines + [""]
