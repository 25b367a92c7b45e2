"""The report's section on group signal and seed selection (read from the runs' metrics.jsonl).

Per method: the share of all-equal (zero-advantage) groups, split by on-policy and seeded
batches, with 95% intervals over training seeds and a Welch test against the baseline, each
difference with Holm's verdict over its family beside the uncorrected p; how the
seeds were cut (cut ratio, empty seeds, seeds from successful rollouts, fallbacks). For adaptive
selectors, the value model's calibration: predicted vs realised continuation success per
predicted-success bin and per refresh cycle (docs/adaptive_seeds.md).
"""

from __future__ import annotations

import math

import numpy as np

from tseeds_jax.eval import bases_stats
from tseeds_jax.eval.bases_stats import holm  # noqa: F401  (the reports import it from here)
from tseeds_jax.eval.rundata import RunData, t_interval

TAIL_STEPS = 20  # "late" zero-advantage share: the last this many steps of a run
REFERENCE = "ts_ratio"  # the second reference of the comparison table (the fixed ratio rule)


def welch_interval(a, b) -> tuple[float, float, float]:
    """(mean(a) - mean(b), half-width of its 95% Welch interval, two-sided Welch p); nan
    half-width and p with fewer than 2 values on a side."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    diff = float(a.mean() - b.mean()) if a.size and b.size else float("nan")
    if a.size < 2 or b.size < 2:
        return diff, float("nan"), float("nan")
    from scipy import stats

    va, vb = a.var(ddof=1) / a.size, b.var(ddof=1) / b.size
    if va + vb == 0:
        return diff, 0.0, (0.0 if diff != 0 else 1.0)
    df = (va + vb) ** 2 / (va ** 2 / (a.size - 1) + vb ** 2 / (b.size - 1))
    t = diff / np.sqrt(va + vb)
    return diff, float(stats.t.ppf(0.975, df) * np.sqrt(va + vb)), float(2 * stats.t.sf(abs(t), df))


def _welch_ok(vals, ref):
    vals, ref = ([v for v in x if math.isfinite(v)] for x in (vals, ref))
    if len(vals) < 2 or len(ref) < 2:
        return None
    return welch_interval(vals, ref)


def _family(pairs: dict[tuple[str, str], tuple | None]) -> dict[tuple[str, str], bool]:
    """Holm verdicts over one family: {(method, against): kept}, from the Welch triples."""
    keys = [k for k, v in pairs.items() if v is not None]
    return dict(zip(keys, holm([pairs[k][2] for k in keys]), strict=True))


def _diff_cell(res, kept: bool | None) -> str:
    """diff ± half (p=...; Holm: yes|no); bold only where the difference stays significant
    after Holm's correction and its interval excludes zero."""
    if res is None:
        return "—"
    d, h, p = res
    mark = "**" if kept and abs(d) > h else ""
    return f"{mark}{100 * d:+.1f} ± {100 * h:.1f} (p={p:.2f}; Holm: {'yes' if kept else 'no'}){mark}"


def _informative_calibration(rs: list[RunData]) -> str:
    rows = [x for r in rs for x in r.metrics if "calib/n" in x]
    n = float(np.sum([np.sum(x["calib/n"]) for x in rows])) if rows else 0.0
    if not n:
        return "—"
    pred = float(np.sum([np.sum(x["calib/pred"]) for x in rows]))
    real = float(np.sum([np.sum(x["calib/real"]) for x in rows]))
    return f"{100 * pred / n:.1f} → {100 * real / n:.1f} ({int(n)})"


def accuracy_pairs(methods: list[str], baseline: str, reference: str) -> list[tuple[str, str]]:
    """The accuracy family: every method against the baseline, and every other method against
    the reference; the baseline-vs-reference pair once. 5 methods: 4 + 3 = 7 comparisons."""
    pairs = [(m, baseline) for m in methods if m != baseline]
    return pairs + [(m, reference) for m in methods if m not in (baseline, reference)]


def comparison(methods: dict[str, list[RunData]], baseline: str | None,
               reference: str = REFERENCE, recorded: dict | None = None) -> list[str]:
    """One table: final held-out pass@1 and the seeded batches' all-equal share, each against
    the baseline (on-policy) and the reference (ratio rule): difference, 95% Welch interval,
    uncorrected Welch p and Holm's verdict over the table's family (accuracy: `accuracy_pairs`;
    all-equal: each seeded method against the reference); bold where Holm keeps it and the
    interval excludes zero. Calibration on informative predictions only (mean predicted →
    realised, samples). `recorded`: a run with more seeds of the same experiment
    (`{"label", "pass1": {method: [per seed]}}`, demo.json's "reference"), against which each
    accuracy difference with p < 0.05 here is checked."""
    if baseline not in methods or reference not in methods:
        return []
    acc = {m: [float(r.final["avg_at_n"]) for r in rs if r.final] for m, rs in methods.items()}
    zs = {m: [_run_mean(r, "zero_adv_group_frac/seeded") for r in rs] for m, rs in methods.items()}
    acc_pairs = {k: _welch_ok(acc[k[0]], acc[k[1]])
                 for k in accuracy_pairs(list(methods), baseline, reference)}
    z_pairs = {(m, reference): _welch_ok(zs[m], zs[reference]) for m in methods
               if m not in (baseline, reference)}
    acc_kept, z_kept = _family(acc_pairs), _family(z_pairs)
    n_acc = sum(v is not None for v in acc_pairs.values())
    n_z = sum(v is not None for v in z_pairs.values())
    b, ref = methods[baseline][0].label, methods[reference][0].label

    def acc_cell(m, against):
        key = (m, against) if (m, against) in acc_pairs else (against, m)
        res = acc_pairs.get(key)
        if res is not None and key != (m, against):  # the pair is stored the other way round
            res = (-res[0], res[1], res[2])
        return _diff_cell(res, acc_kept.get(key))

    lines = [f"Comparison: each method against {b} and against {ref}: difference of the means, "
             "± the half-width of its 95% Welch interval, two-sided Welch p (uncorrected) and "
             f"Holm's verdict at 5% over the family (final pass@1: the {n_acc} different "
             f"comparisons of its two columns; all-equal: the {n_z} against {ref}); **bold** "
             "where Holm keeps it and the interval excludes zero. Final pass@1: held-out, per "
             "run; all-equal: share of seeded groups with one reward for all samples, mean over "
             "a run's seeded steps; calibration: informative predictions only (strictly between "
             "0 and 1), mean predicted → realised success (samples).", "",
             f"| method | seeds | final pass@1 | vs {b} | vs {ref} | all-equal seeded groups | "
             f"vs {ref} | calibration |", "|---|---|---|---|---|---|---|---|"]
    for m, rs in methods.items():
        lines.append(
            f"| {rs[0].label} | {len(acc[m])} | {_ci(acc[m])} | "
            f"{acc_cell(m, baseline) if m != baseline else '—'} | "
            f"{acc_cell(m, reference) if m != reference else '—'} | {_ci(zs[m])} | "
            f"{_diff_cell(z_pairs.get((m, reference)), z_kept.get((m, reference)))} | "
            f"{_informative_calibration(rs)} |")
    lines.append("")
    return lines + _against_recorded(methods, acc, acc_pairs, recorded)


def _against_recorded(methods, acc, acc_pairs, recorded) -> list[str]:
    """For each accuracy difference with uncorrected p < 0.05 here: the same comparison in a
    recorded run with more training seeds of the same experiment (same design and CPU: the
    demo offers one only then, `reference.for_run`), and whether it held there: same sign and
    kept by Holm's correction over the recorded run's own accuracy family."""
    pass1 = (recorded or {}).get("pass1") or {}
    found = {k: v for k, v in acc_pairs.items() if v is not None and v[2] < 0.05}
    seeds = min((len(acc[m]) for m in methods), default=0)
    if not found or not pass1 or seeds >= min(len(v) for v in pass1.values()):
        return []
    rec_acc = {m: [v / 100 for v in vals]
               for m, vals in ((recorded or {}).get("family") or pass1).items()}
    baseline = next((b for (_, b) in acc_pairs if b in rec_acc), None)
    verdicts = accuracy_verdicts(rec_acc, baseline) if baseline in rec_acc else {}
    mach = (recorded or {}).get("machine") or {}
    where = (f", {mach['cpu']} with {'/'.join(mach.get('flags') or [])}" if mach.get("cpu")
             else "")
    out = [f"With more training seeds ({recorded['label']}{where}; recorded values of the same "
           "base and CPU; Holm over the recorded run's "
           f"{len(verdicts)} accuracy comparisons):", ""]
    for (m, against), (d, _, p) in found.items():
        v = verdicts.get((m, against))
        flip = v is None and (against, m) in verdicts
        if flip:
            rd, rh, rp, kept = verdicts[(against, m)]
            rd = -rd
        elif v is not None:
            rd, rh, rp, kept = v
        else:
            continue
        held = kept and (rd > 0) == (d > 0)
        n = len(pass1[m])
        out.append(f"- {methods[m][0].label} vs {methods[against][0].label}: "
                   f"{100 * d:+.1f} here (p={p:.2f}, {seeds} seeds); with "
                   f"{n} seeds {100 * rd:+.1f} ± {100 * rh:.1f} (p={rp:.2f}; Holm: "
                   f"{'yes' if kept else 'no'}): "
                   + ("it held." if held else f"**it did not hold at {n} seeds**; "
                      "do not read this difference as a result."))
    return out + [""] if len(out) > 2 else []


def _run_mean(run: RunData, key: str, steps: slice = slice(None)) -> float:
    vals = [m[key] for m in run.metrics[steps] if isinstance(m.get(key), int | float)]
    return float(np.mean(vals)) if vals else float("nan")


def _ci(vals: list[float]) -> str:
    vals = [v for v in vals if math.isfinite(v)]
    if not vals:
        return "—"
    mean, half = t_interval(vals)
    return f"{100 * mean:.1f}" + (f" ± {100 * half:.1f}" if math.isfinite(half) else "")


def family_note(acc: dict[str, list[float]], baseline: str, reference: str = REFERENCE) -> str:
    """The accuracy family in words, as the report states it once per verdict."""
    ref = reference if reference in acc else baseline
    n = len(accuracy_pairs(list(acc), baseline, ref))
    return (f"the report's {n} accuracy comparisons (each method against {baseline}"
            + (f" and against {reference})" if ref != baseline else ")"))


def accuracy_verdicts(acc: dict[str, list[float]], baseline: str,
                      reference: str = REFERENCE) -> dict[tuple[str, str], tuple]:
    """{(method, against): (diff, half, p, Holm kept)} over the accuracy family
    (`accuracy_pairs`; without the reference, each method against the baseline only)."""
    ref = reference if reference in acc else baseline
    pairs = {k: _welch_ok(acc[k[0]], acc[k[1]]) for k in accuracy_pairs(list(acc), baseline, ref)}
    kept = _family(pairs)
    return {k: (*v, kept[k]) for k, v in pairs.items() if v is not None}


def _sum_lists(rows: list[list[float]]) -> np.ndarray:
    return np.sum(np.asarray(rows, np.float64), axis=0) if rows else np.zeros(0)


def _paired_by_base(methods, baseline, value, bases) -> dict[tuple[str, str], tuple | None]:
    """{(method, baseline): (diff, half, p)} paired within a base, Student t over `bases`."""
    from tseeds_jax.eval.rundata import per_base

    ref = per_base(methods[baseline], value, bases)
    out = {}
    for m in methods:
        if m != baseline:
            r = bases_stats.paired(per_base(methods[m], value, bases), ref)
            out[(m, baseline)] = ((r["mean"], r["half"], r["p"]) if math.isfinite(r["p"])
                                  else None)
    return out


def section(title: str, methods: dict[str, list[RunData]], baseline: str | None,
            refresh_interval_of, recorded: dict | None = None,
            bases: list[int] | None = None) -> list[str]:
    """Markdown lines. `refresh_interval_of(run)`: T of a run (cycles of the calibration table).
    `bases`: with more than one, the all-equal difference is paired within a base and tested
    over bases, and the accuracy comparison (the across-base table) is not repeated here."""
    lines = [title, ""]
    if not any(r.metrics for rs in methods.values() for r in rs):
        return lines + ["(no training metrics)", ""]
    base_label = methods[baseline][0].label if baseline in methods else None
    zero = {m: [_run_mean(r, "zero_adv_group_frac") for r in rs] for m, rs in methods.items()}
    multi = bases is not None and len(bases) > 1
    if multi and baseline in methods:
        vs_base = _paired_by_base(methods, baseline,
                                  lambda r: _run_mean(r, "zero_adv_group_frac"), bases)
    else:
        vs_base = {(m, baseline): _welch_ok(zero[m], zero[baseline]) for m in methods
                   if baseline in methods and m != baseline}
    kept = _family(vs_base)
    test = (f"paired by base, Student t over the {len(bases)} bases" if multi
            else "its 95% Welch interval")
    lines += ["All-equal groups (every sample of the prompt got the same reward, so the group's "
              "advantages are zero and it carries no gradient), mean share over each run's "
              "steps, before DAPO's group filter; 95% intervals over "
              + ("runs (all bases)" if multi else "training seeds")
              + (f", difference vs {base_label} ({test}), uncorrected p and "
                 f"Holm's verdict over the column's {sum(v is not None for v in vs_base.values())} "
                 "comparisons" if base_label else "") + ".", "",
              "| method | seeds | all batches | vs baseline | on-policy batches | seeded batches | "
              f"last {TAIL_STEPS} steps |", "|---|---|---|---|---|---|---|"]
    for m, rs in methods.items():
        lines.append(
            f"| {rs[0].label} | {len(rs)} | {_ci(zero[m])} | "
            f"{_diff_cell(vs_base.get((m, baseline)), kept.get((m, baseline)))} | "
            f"{_ci([_run_mean(r, 'zero_adv_group_frac/onpolicy') for r in rs])} | "
            f"{_ci([_run_mean(r, 'zero_adv_group_frac/seeded') for r in rs])} | "
            f"{_ci([_run_mean(r, 'zero_adv_group_frac', slice(-TAIL_STEPS, None)) for r in rs])} |")
    lines.append("")
    if not multi:
        lines += comparison(methods, baseline, recorded=recorded)

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
    out = [f"Value-model calibration, {rs[0].label} (informative predictions, strictly between 0 "
           f"and 1, of {len(rs)} runs): predicted success of a continuation from its seed vs the "
           "realised success.", "",
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
