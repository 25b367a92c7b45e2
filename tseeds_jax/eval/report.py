"""Markdown report with PNG plots for a folder of runs (a demo output or any set of run folders).

Inputs (all optional except at least one run folder, see `rundata`):
  ROOT/demo.json   {"command", "methods": [order], "baseline": METHOD, "setup": {...},
                    "timings": {...}}
  ROOT/base/eval.json, ROOT/base/eval_greedy.json   held-out evaluation of the base policy
  ROOT/relay.json  {"early", "final", "ratio", "single": EvalResult, "relay": EvalResult,
                    "early_single": EvalResult}
Outputs: ROOT/report.md and ROOT/plots/*.png.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any

import numpy as np
from scipy import stats

from tseeds_jax.eval import plots, seed_report
from tseeds_jax.eval.rundata import (
    RunData,
    find_runs,
    group_methods,
    mean_profile,
    problem_interval,
    rl_effect,
    t_interval,
    welch,
)

SECTIONS = ("## Base policy", "## RL effect over the base",
            "## Final accuracy per method", "## Accuracy during training",
            "## avg@k and pass@k", "## Relay vs single-model inference", "## Positional profiles",
            "## Step-time overhead of seeding", "## Group signal and seed selection")

WARMUP_STEPS = 5  # steps excluded from step-time means (they include compilation)


def _read(path: str):
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def _pct(x: float) -> str:
    return "n/a" if x is None or not math.isfinite(x) else f"{100 * x:.1f}"


def _pm(mean: float, half: float) -> str:
    if not math.isfinite(half):
        return f"{_pct(mean)}"
    return f"{_pct(mean)} ± {_pct(half)}"


def _final_values(runs: list[RunData]) -> list[float]:
    return [float(r.final["avg_at_n"]) for r in runs if r.final]


def _mean_step_time(run: RunData) -> float:
    ts = [m["time_step"] for m in run.metrics[WARMUP_STEPS:] if m.get("time_step") is not None]
    return float(np.mean(ts)) if ts else float("nan")


def _mean_tokens(run: RunData) -> float:
    ts = [m["generated_tokens"] for m in run.metrics if m.get("generated_tokens") is not None]
    return float(np.mean(ts)) if ts else float("nan")


def _effects(methods: dict[str, list[RunData]], base) -> dict[str, dict[str, Any]]:
    """rl_effect per method whose final evaluations share the base's problems (else skipped),
    with "p" (two-sided normal, over the combined standard error half / 1.96) and "shown":
    kept by Holm's correction over the methods."""
    out = {}
    if not base or "correct" not in base:
        return out
    for method, rs in methods.items():
        finals = [r.final for r in rs if r.final and len(r.final.get("correct", ())) ==
                  len(base["correct"])]
        if not finals or len({f["n"] for f in finals}) != 1:
            continue
        e = rl_effect([f["correct"] for f in finals], finals[0]["n"], base["correct"], base["n"])
        e["seeds"] = len(finals)
        se = e["half"] / 1.96
        e["p"] = (float(2 * stats.norm.sf(abs(e["effect"]) / se)) if se > 0 and math.isfinite(se)
                  else float("nan"))
        out[method] = e
    for method, kept in zip(out, seed_report.holm([e["p"] for e in out.values()]), strict=True):
        out[method]["shown"] = kept
    return out


def _fair_baseline_verdicts(methods: dict[str, list[RunData]], fair: str | None,
                            baseline: str | None) -> list[str]:
    """Each other method against the fair baseline (on-policy with as many updates per batch):
    whether seeding beats more learning per generated batch, not only under-trained DAPO."""
    fair_vals = _final_values(methods.get(fair, [])) if fair else []
    if len(fair_vals) < 2:
        return []
    label = methods[fair][0].label
    others = {m: _final_values(rs) for m, rs in methods.items()
              if m not in (fair, baseline) and len(_final_values(rs)) >= 2}
    tests = {m: welch(vals, fair_vals) for m, vals in others.items()}
    kept = dict(zip(tests, seed_report.holm([t[1] for t in tests.values()]), strict=True))
    lines = [f"Against the fair on-policy baseline ({label}, {len(fair_vals)} seeds, "
             f"{_pm(*t_interval(fair_vals))}; Holm's correction over these {len(tests)} "
             "comparisons, a family of their own):", ""]
    for method, (diff, p, _) in tests.items():
        lines.append(f"- {methods[method][0].label} vs {label}: {100 * diff:+.1f} points (Welch "
                     f"p={p:.2f} uncorrected; Holm: {'yes' if kept[method] else 'no'}); "
                     + ("**exceeds** the seed-to-seed spread after the correction."
                        if kept[method] else
                        "**within** the seed-to-seed spread after the correction: not shown "
                        "better or worse than the fair baseline."))
    return lines + [""]


def _one_base(methods: dict[str, list[RunData]], base, base_greedy, baseline,
              demo: dict) -> tuple[list[str], float | None]:
    """The base, RL-effect and final-accuracy sections of a folder with one base policy."""
    lines: list[str] = []
    # ---- base ----
    lines += [SECTIONS[0], ""]
    base_avg = None
    if base:
        base_avg, half = problem_interval(base["correct"], base["n"])
        lines.append(f"- sampled avg@{base['n']} (pass@1): **{_pm(base_avg, half)}** "
                     f"over {base['num_problems']} problems; mean response length "
                     f"{base['mean_length']:.1f} tokens")
        pk = ", ".join(f"pass@{k} {_pct(v)}" for k, v in base["pass_at_k"].items())
        lines.append(f"- {pk}")
    if base_greedy:
        lines.append(f"- greedy accuracy: {_pct(base_greedy['avg_at_n'])}")
    if not base and not base_greedy:
        lines.append("(no base evaluation in this folder)")
    lines.append("")

    # ---- RL effect over the base: shown before any method comparison ----
    lines += [SECTIONS[1], ""]
    effects = _effects(methods, base)
    if effects:
        lines += ["Final held-out avg@n minus the base's, on the same problems, from this one "
                  "base policy. ± combines, in quadrature, evaluation noise (95% paired interval "
                  "over problems) and training-seed spread (95% Student-t interval over seeds); "
                  "p is the two-sided normal p of the effect over that combined standard error, "
                  f"and an effect counts as shown when Holm's correction over the {len(effects)} "
                  "methods keeps it. One base: whether RL helps from another base is not "
                  "tested here (`--bases N`).", "",
                  "| method | seeds | RL − base (points) | eval noise ± | seed spread ± | p | "
                  "shown (Holm) |", "|---|---|---|---|---|---|---|"]
        for method, e in effects.items():
            lines.append(f"| {methods[method][0].label} | {e['seeds']} | "
                         f"{100 * e['effect']:+.1f} ± {_pct(e['half'])} | {_pct(e['eval_half'])} | "
                         f"{_pct(e['seed_half'])} | {e['p']:.3f} | "
                         f"{'yes' if e['shown'] else 'no'} |")
        shown = [m for m, e in effects.items() if e["shown"]]
        lines.append("")
        if shown:
            lines.append("RL from this base improves held-out accuracy beyond evaluation noise and "
                         "seed spread, after Holm's correction, for: "
                         + ", ".join(methods[m][0].label for m in shown)
                         + ". Only these methods moved the policy measurably; comparisons with the "
                         "others compare against a policy that RL did not measurably change.")
        else:
            lines.append("**No method improved on the base beyond evaluation noise and seed "
                         "spread after Holm's correction.** The method comparison below compares "
                         "noise and shows nothing about Thinking Seeds.")
    else:
        lines.append("(needs the base evaluation and final evaluations of the runs on the same "
                     "problems)")
    lines.append("")

    # ---- final accuracy ----
    lines += [SECTIONS[2], ""]
    accs = {m: _final_values(rs) for m, rs in methods.items() if _final_values(rs)}
    verdict_of = (seed_report.accuracy_verdicts(accs, baseline)
                  if baseline in accs else {})
    lines += ["| method | seeds | final avg@n (95% CI) | per seed | vs base | "
              f"vs {methods[baseline][0].label if baseline in methods else 'baseline'} "
              "(uncorrected Welch p; Holm) |", "|---|---|---|---|---|---|"]
    verdicts = []
    for method, vals in accs.items():
        rs = methods[method]
        mean, half = t_interval(vals)
        per_seed = ", ".join(_pct(v) for v in vals)
        vs_base = f"{100 * (mean - base_avg):+.1f}" if base_avg is not None else "n/a"
        v = verdict_of.get((method, baseline))
        if method == baseline or v is None:
            vs_bl = "—" if method == baseline else f"{100 * (mean - np.mean(accs[baseline])):+.1f}" \
                if baseline in accs else "—"
        else:
            diff, _, p, kept = v
            vs_bl = f"{100 * diff:+.1f} (p={p:.2f}; Holm: {'yes' if kept else 'no'})"
            verdicts.append(
                f"- {rs[0].label} vs {methods[baseline][0].label}: difference "
                f"{100 * diff:+.1f} points, Welch p = {p:.2f} uncorrected; "
                + ("it **stays significant** after Holm's correction over "
                   f"{seed_report.family_note(accs, baseline)}."
                   if kept else "**not shown** after Holm's correction over "
                   f"{seed_report.family_note(accs, baseline)}"
                   + (" (p < 0.05 only before it)." if p < 0.05 else ".")))
        lines.append(f"| {rs[0].label} | {len(vals)} | {_pm(mean, half)} | {per_seed} | "
                     f"{vs_base} | {vs_bl} |")
    lines.append("")
    lines += verdicts + [""]
    fair = demo.get("fair_baseline") or ("dapo_minibatch" if "dapo_minibatch" in methods else None)
    lines += _fair_baseline_verdicts(methods, fair, baseline)

    return lines, base_avg


def write_report(root: str, *, out: str | None = None) -> str:
    """Writes ROOT/report.md (or `out`) and the plots; returns the report path."""
    runs = find_runs(root)
    demo = _read(os.path.join(root, "demo.json")) or {}
    if not runs and not demo:
        raise FileNotFoundError(f"report: no run folders (method.json) under {root!r}")
    methods = group_methods(runs, demo.get("methods"))
    baseline = demo.get("baseline") or (next(iter(methods)) if methods else None)
    plot_dir = os.path.join(root, "plots")
    os.makedirs(plot_dir, exist_ok=True)
    base = _read(os.path.join(root, "base", "eval.json"))
    base_greedy = _read(os.path.join(root, "base", "eval_greedy.json"))
    relay = _read(os.path.join(root, "relay.json"))
    lines: list[str] = ["# Thinking Seeds demo report", ""]
    if demo.get("command"):
        lines += [f"Produced by: `{demo['command']}`", ""]
    for key, value in (demo.get("setup") or {}).items():
        lines.append(f"- **{key}**: {value}")
    if demo.get("setup"):
        lines.append("")
    lines += ["Accuracies are percentages on held-out problems (prompts whose hash puts them in "
              "the evaluation split; never used for warm-up or RL). avg@n = mean fraction of "
              "correct samples per problem at the training temperature; intervals over training "
              "seeds are 95% Student-t intervals, intervals for a single evaluation treat "
              "problems as the sampling unit.", ""]

    bases = sorted({r.base for r in runs}) or [0]
    if len(bases) > 1:
        from tseeds_jax.eval import bases_report

        got = bases_report.sections(root, methods, bases, plot_dir)
        lines += [SECTIONS[0], ""] + got["base"] + [SECTIONS[1], ""] + got["rl"]
        lines += [SECTIONS[2], ""] + got["final"]
        means = [e["avg_at_n"] for e in bases_report.base_evals(root, bases).values()]
        base_avg = float(np.mean(means)) if means else None
    else:
        got, base_avg = _one_base(methods, base, base_greedy, baseline, demo)
        lines += got

    # ---- curves ----
    lines += [SECTIONS[3], ""]
    if any(r.curve for r in runs):
        plots.accuracy_curves(methods, os.path.join(plot_dir, "accuracy.png"), base=base_avg)
        lines += ["![accuracy](plots/accuracy.png)", "",
                  "Held-out avg@n during training against step (left) and against cumulative "
                  "generated tokens including behavior rollouts (right); shaded: 95% interval "
                  "over training seeds. The dashed line is the base on the final-evaluation set; "
                  "curve points use a smaller problem subset and other sampler seeds, so the "
                  "step-0 point differs from it by evaluation noise.", ""]
    else:
        lines += ["(no evaluation curves)", ""]

    # ---- pass@k table ----
    lines += [SECTIONS[4], ""]
    series: dict[str, dict[int, float]] = {}
    ks: list[int] = []
    rows = []
    if base:
        series["base"] = {int(k): v for k, v in base["pass_at_k"].items()}
        ks = sorted(series["base"])
        rows.append(("base", base["avg_at_n"], series["base"], 1))
    for rs in methods.values():
        finals = [r.final for r in rs if r.final]
        if not finals:
            continue
        kk = sorted(int(k) for k in finals[0]["pass_at_k"])
        ks = ks or kk
        pk = {k: float(np.mean([f["pass_at_k"][str(k)] for f in finals])) for k in kk}
        series[rs[0].label] = pk
        rows.append((rs[0].label, float(np.mean([f["avg_at_n"] for f in finals])), pk,
                     len(finals)))
    if rows:
        n_eval = (base or (methods and next((r.final for rs in methods.values() for r in rs
                                              if r.final), None)) or {}).get("n", "n")
        unit = "runs" if len(bases) > 1 else "seeds"
        lines += [f"Mean over the {unit} (training seeds"
                  + (f" of all {len(bases)} bases; the base row: base {bases[0]}" if len(bases) > 1
                     else "") + f") of avg@{n_eval} and unbiased pass@k.", "",
                  f"| method | {unit} | avg@n | " + " | ".join(f"pass@{k}" for k in ks) + " |",
                  "|---|---|---|" + "---|" * len(ks)]
        for label, avg, pk, cnt in rows:
            lines.append(f"| {label} | {cnt} | {_pct(avg)} | "
                         + " | ".join(_pct(pk.get(k, float('nan'))) for k in ks) + " |")
        plots.pass_at_k_curves(series, os.path.join(plot_dir, "pass_at_k.png"),
                               "pass@k on held-out problems")
        lines += ["", "![pass@k](plots/pass_at_k.png)", ""]
    else:
        lines += ["(no final evaluations)", ""]

    # ---- relay ----
    lines += [SECTIONS[5], ""]
    if relay:
        s, rl = relay["single"], relay["relay"]
        lines += [f"Early checkpoint `{relay['early']}` writes the first "
                  f"{100 * relay['ratio']:.0f}% of each response (by its own length), final "
                  f"checkpoint `{relay['final']}` completes it; {s['num_problems']} problems, "
                  f"n = {s['n']} samples each (paper Section 3.1).", "",
                  "| k | " + " | ".join(str(k) for k in s["pass_at_k"]) + " |",
                  "|---|" + "---|" * len(s["pass_at_k"])]
        table = [("single (final)", s)]
        if relay.get("early_single"):
            table.append(("single (early)", relay["early_single"]))
        table.append(("relay (early → final)", rl))
        for label, res in table:
            lines.append(f"| {label} | " + " | ".join(_pct(v) for v in res["pass_at_k"].values())
                         + " |")
        diff = {k: rl["pass_at_k"][k] - s["pass_at_k"][k] for k in s["pass_at_k"]}
        lines += ["", "relay − single pass@k (points): "
                  + ", ".join(f"k={k}: {100 * v:+.1f}" for k, v in diff.items()), ""]
        plots.pass_at_k_curves({lab: {int(k): v for k, v in res["pass_at_k"].items()}
                                for lab, res in table},
                               os.path.join(plot_dir, "relay.png"), "relay vs single-model pass@k")
        lines += ["![relay](plots/relay.png)", ""]
    else:
        lines += ["(no relay evaluation in this folder)", ""]

    # ---- profiles ----
    lines += [SECTIONS[6], ""]
    if any(r.metrics for r in runs):
        plots.profiles(methods, os.path.join(plot_dir, "profiles.png"))
        lines += ["![profiles](plots/profiles.png)", "",
                  "Token entropy and clipped-token fraction per 10% bin of relative position in "
                  "the response, averaged over all training steps and seeds (on-policy: paper "
                  "Figure 3(a); mini-batched on-policy: Figure 3(b); seeded: Figure 4).", "",
                  "| method | entropy first/middle/last bin | clipfrac first/middle/last bin | "
                  "seed-token share |", "|---|---|---|---|"]
        for rs in methods.values():
            ent = [p for p in (mean_profile(r.metrics, "pos_entropy") for r in rs) if p is not None]
            clip = [p for p in (mean_profile(r.metrics, "pos_clipfrac") for r in rs)
                    if p is not None]
            seedf = [p for p in (mean_profile(r.metrics, "pos_seedfrac") for r in rs)
                     if p is not None]
            if not ent:
                continue
            e, c = np.nanmean(ent, axis=0), np.nanmean(clip, axis=0)
            sf = float(np.nanmean(seedf)) if seedf else float("nan")
            lines.append(f"| {rs[0].label} | {e[0]:.3f} / {e[5]:.3f} / {e[9]:.3f} | "
                         f"{c[0]:.4f} / {c[5]:.4f} / {c[9]:.4f} | {_pct(sf)}% |")
        lines.append("")
    else:
        lines += ["(no training metrics)", ""]

    # ---- overhead ----
    lines += [SECTIONS[7], ""]
    if baseline in methods and any(r.metrics for r in methods[baseline]):
        bt = float(np.nanmean([_mean_step_time(r) for r in methods[baseline]]))
        btok = float(np.nanmean([_mean_tokens(r) for r in methods[baseline]]))
        lines += [f"Mean wall-clock time per training step (steps after the first "
                  f"{WARMUP_STEPS}, which include compilation) relative to "
                  f"{methods[baseline][0].label}; the paper reports 1.1–1.2× at ratio 0.5, T 8. "
                  "Runs of one demo share the machine, so small differences are noise.", "",
                  "| method | s/step | × baseline | generated tokens/step | × baseline |",
                  "|---|---|---|---|---|"]
        for rs in methods.values():
            t = float(np.nanmean([_mean_step_time(r) for r in rs]))
            tok = float(np.nanmean([_mean_tokens(r) for r in rs]))
            lines.append(f"| {rs[0].label} | {t:.4f} | {t / bt:.2f}× | {tok:.0f} | "
                         f"{tok / btok:.2f}× |")
        lines.append("")
    else:
        lines += ["(no baseline step times)", ""]
    lines += seed_report.section(SECTIONS[8], methods, baseline, _refresh_interval,
                                 recorded=demo.get("reference"), bases=bases)
    if demo.get("timings"):
        lines += ["Wall-clock of the demo phases (s): "
                  + ", ".join(f"{k} {v:.0f}" for k, v in demo["timings"].items()), ""]
    path = out or os.path.join(root, "report.md")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path


def _refresh_interval(run: RunData) -> int:
    """T of a run: its method overrides, else its saved config, else 1."""
    over = (run.info.get("overrides") or {}).get("seeds.refresh_interval")
    if over is None:
        cfg = _read(os.path.join(run.path, "config.json")) or {}
        over = (cfg.get("seeds") or {}).get("refresh_interval", 1)
    return max(int(over), 1)


def summary(root: str) -> dict[str, Any]:
    """Machine-readable numbers of a report folder (used by the demo's console output)."""
    runs = find_runs(root)
    methods = group_methods(runs)
    out = {}
    for method, rs in methods.items():
        vals = _final_values(rs)
        if vals:
            mean, half = t_interval(vals)
            out[method] = {"label": rs[0].label, "mean": mean, "half_width": half,
                           "per_seed": vals}
    return out
