"""The report's section on group signal and seed selection (read from the runs' metrics.jsonl).

Per method: the share of all-equal (zero-advantage) groups, split by on-policy and seeded
batches, with 95% intervals over training seeds and a Welch test against the baseline; how the
seeds were cut (cut ratio, empty seeds, seeds from successful rollouts, fallbacks). For adaptive
selectors, the value model's calibration: predicted vs realised continuation success per
predicted-success bin and per refresh cycle (docs/adaptive_seeds.md).
"""

from __future__ import annotations

import math

import numpy as np

from tseeds_jax.eval.rundata import RunData, t_interval, welch

TAIL_STEPS = 20  # "late" zero-advantage share: the last this many steps of a run


def _run_mean(run: RunData, key: str, steps: slice = slice(None)) -> float:
    vals = [m[key] for m in run.metrics[steps] if isinstance(m.get(key), int | float)]
    return float(np.mean(vals)) if vals else float("nan")


def _ci(vals: list[float]) -> str:
    vals = [v for v in vals if math.isfinite(v)]
    if not vals:
        return "—"
    mean, half = t_interval(vals)
    return f"{100 * mean:.1f}" + (f" ± {100 * half:.1f}" if math.isfinite(half) else "")


def _welch(vals, base) -> str:
    vals, base = ([v for v in x if math.isfinite(v)] for x in (vals, base))
    if len(vals) < 2 or len(base) < 2:
        return "—"
    diff, p, _ = welch(vals, base)
    return f"{100 * diff:+.1f} (p={p:.2f})"


def _sum_lists(rows: list[list[float]]) -> np.ndarray:
    return np.sum(np.asarray(rows, np.float64), axis=0) if rows else np.zeros(0)


def section(title: str, methods: dict[str, list[RunData]], baseline: str | None,
            refresh_interval_of) -> list[str]:
    """Markdown lines. `refresh_interval_of(run)`: T of a run (cycles of the calibration table)."""
    lines = [title, ""]
    if not any(r.metrics for rs in methods.values() for r in rs):
        return lines + ["(no training metrics)", ""]
    base_label = methods[baseline][0].label if baseline in methods else None
    zero = {m: [_run_mean(r, "zero_adv_group_frac") for r in rs] for m, rs in methods.items()}
    lines += ["All-equal groups (every sample of the prompt got the same reward, so the group's "
              "advantages are zero and it carries no gradient), mean share over each run's "
              "steps, before DAPO's group filter; 95% intervals over training seeds"
              + (f", difference vs {base_label} with Welch p" if base_label else "") + ".", "",
              "| method | seeds | all batches | vs baseline | on-policy batches | seeded batches | "
              f"last {TAIL_STEPS} steps |", "|---|---|---|---|---|---|---|"]
    for m, rs in methods.items():
        lines.append(
            f"| {rs[0].label} | {len(rs)} | {_ci(zero[m])} | "
            f"{_welch(zero[m], zero.get(baseline, [])) if m != baseline else '—'} | "
            f"{_ci([_run_mean(r, 'zero_adv_group_frac/onpolicy') for r in rs])} | "
            f"{_ci([_run_mean(r, 'zero_adv_group_frac/seeded') for r in rs])} | "
            f"{_ci([_run_mean(r, 'zero_adv_group_frac', slice(-TAIL_STEPS, None)) for r in rs])} |")
    lines.append("")

    seeded = {m: rs for m, rs in methods.items()
              if any("seeds/cut_ratio_mean" in x for r in rs for x in r.metrics)}
    if not seeded:
        return lines
    lines += ["How the seeds were cut (seeded batches, mean over steps; 95% intervals over "
              "seeds). Cut ratio: seed length / length of its source rollout; an empty seed "
              "restarts from the prompt.", "",
              "| method | cut ratio | cut ratio ≥ 0.5 | empty seeds | seeds from successful "
              "rollouts | fixed-rule fallback |", "|---|---|---|---|---|---|"]
    for rs in seeded.values():
        hist = _sum_lists([x["seeds/cut_ratio_hist"] for r in rs for x in r.metrics
                           if "seeds/cut_ratio_hist" in x])
        upper = float(hist[5:].sum() / hist.sum()) if hist.sum() else float("nan")
        lines.append(
            f"| {rs[0].label} | {_ci([_run_mean(r, 'seeds/cut_ratio_mean') for r in rs])} | "
            f"{'—' if not math.isfinite(upper) else f'{100 * upper:.1f}'} | "
            f"{_ci([_run_mean(r, 'seeds/empty_frac') for r in rs])} | "
            f"{_ci([_run_mean(r, 'seeds/from_success_frac') for r in rs])} | "
            f"{_ci([_run_mean(r, 'seeds/fallback_frac') for r in rs])} |")
    lines.append("")
    for rs in seeded.values():
        lines += _calibration(rs, refresh_interval_of)
    return lines


def _calibration(rs: list[RunData], refresh_interval_of) -> list[str]:
    rows = [x for r in rs for x in r.metrics if "calib/n" in x]
    if not rows:
        return []
    n = _sum_lists([x["calib/n"] for x in rows])
    pred, real = (_sum_lists([x[f"calib/{k}"] for x in rows]) for k in ("pred", "real"))
    edges = np.linspace(0, 1, len(n) + 1)
    out = [f"Value-model calibration, {rs[0].label} (all seeded samples of {len(rs)} runs): "
           "predicted success of a continuation from its seed vs the realised success.", "",
           "| predicted bin | samples | mean predicted | realised |", "|---|---|---|---|"]
    for k in range(len(n)):
        if n[k]:
            out.append(f"| {edges[k]:.1f}–{edges[k + 1]:.1f} | {int(n[k])} | "
                       f"{100 * pred[k] / n[k]:.1f} | {100 * real[k] / n[k]:.1f} |")
    out += ["", f"Per refresh cycle (pooled over the {len(rs)} runs): mean predicted vs realised "
            "continuation success, and the value-model shape gamma used at that refresh and "
            "after calibrating on the cycle's continuations (mean over runs).", "",
            "| cycle | steps | samples | mean predicted | realised | gamma used | gamma after |",
            "|---|---|---|---|---|---|---|"]
    cycles: dict[int, list] = {}
    for r in rs:
        t = refresh_interval_of(r)
        for i, x in enumerate(r.metrics):
            if "calib/n" in x:
                step = int(x.get("step", i))
                cycles.setdefault(step // t, []).append((t, x))
    last_step = max(int(x.get("step", 0)) for _, xs in cycles.items() for _, x in xs)
    for c in sorted(cycles):
        xs = [x for _, x in cycles[c]]
        t = cycles[c][0][0]
        cn = float(np.sum([np.sum(x["calib/n"]) for x in xs]))
        cp = float(np.sum([np.sum(x["calib/pred"]) for x in xs]))
        cr = float(np.sum([np.sum(x["calib/real"]) for x in xs]))
        g_used = float(np.mean([x["seeds/gamma"] for x in xs]))
        last = [x for x in xs if int(x.get("step", -1)) % t == t - 1] or xs
        g_after = float(np.mean([x["seeds/gamma_calibrated"] for x in last]))
        end = min(c * t + t - 1, last_step)
        out.append(f"| {c} | {c * t}–{end} | {int(cn)} | {100 * cp / max(cn, 1):.1f} | "
                   f"{100 * cr / max(cn, 1):.1f} | {g_used:.2f} | {g_after:.2f} |")
    return out + [""]
