"""Reading run folders for reports: each run folder carries its method name and label.

A run folder is any folder with a `method.json` ({"method": NAME, "label": TEXT, "seed": INT,
...}); it may hold `metrics.jsonl` (the trainer's per-step metrics), `eval_curve.json` (held-out
evaluations during training: [{"step", "generated_tokens", "avg", ...}]) and `eval.json` (the final
held-out evaluation, an `EvalResult.to_json()`). Methods are whatever names the folders carry, so
any loss family or config can be put side by side without changing this code.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from typing import Any

import numpy as np


@dataclasses.dataclass
class RunData:
    path: str
    method: str
    label: str
    seed: int
    info: dict[str, Any]
    metrics: list[dict[str, Any]]
    curve: list[dict[str, Any]]
    final: dict[str, Any] | None
    base: int = 0  # the base policy (warm start) the run trained from


def base_folder(root: str, base: int) -> str:
    """The folder of base policy `base` in a demo folder: ROOT/base (base 0), ROOT/base<b>."""
    return os.path.join(root, "base" if base == 0 else f"base{base}")


def by_base(runs: list[RunData]) -> dict[int, list[RunData]]:
    """{base: runs} sorted by base."""
    out: dict[int, list[RunData]] = {}
    for r in runs:
        out.setdefault(r.base, []).append(r)
    return dict(sorted(out.items()))


def per_base(runs: list[RunData], value, bases: list[int]) -> list[list[float]]:
    """[[value(run) per training seed, in seed order] per base of `bases`] (finished runs)."""
    grouped = by_base([r for r in runs if r.final])
    return [[value(r) for r in sorted(grouped.get(b, []), key=lambda r: r.seed)] for b in bases]


def _read_json(path: str, default=None):
    if not os.path.exists(path):
        return default
    with open(path) as f:
        return json.load(f)


def _read_jsonl(path: str) -> list[dict[str, Any]]:
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def find_runs(root: str) -> list[RunData]:
    """Every run folder below `root` (sorted by path)."""
    if not os.path.isdir(root):
        raise FileNotFoundError(f"report: {root!r} is not a folder")
    runs = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in ("ckpt", "tb", "plots"))
        if "method.json" not in filenames:
            continue
        info = _read_json(os.path.join(dirpath, "method.json"))
        if not isinstance(info, dict) or "method" not in info:
            raise ValueError(f"{dirpath}/method.json: expected an object with a 'method' field")
        runs.append(RunData(path=dirpath, method=str(info["method"]),
                            label=str(info.get("label", info["method"])),
                            seed=int(info.get("seed", 0)), info=info,
                            metrics=_read_jsonl(os.path.join(dirpath, "metrics.jsonl")),
                            curve=_read_json(os.path.join(dirpath, "eval_curve.json"), []),
                            final=_read_json(os.path.join(dirpath, "eval.json")),
                            base=int(info.get("base", 0))))
    return sorted(runs, key=lambda r: r.path)


def group_methods(runs: list[RunData], order: list[str] | None = None) -> dict[str, list[RunData]]:
    """{method: runs}, in `order` first, then by first appearance."""
    out: dict[str, list[RunData]] = {}
    for m in order or []:
        out[m] = []
    for r in runs:
        out.setdefault(r.method, []).append(r)
    return {m: rs for m, rs in out.items() if rs}


def t_interval(values) -> tuple[float, float]:
    """(mean, half-width of the 95% Student-t interval); half-width nan with one value."""
    v = np.asarray(values, np.float64)
    if v.size == 0:
        return float("nan"), float("nan")
    if v.size == 1:
        return float(v[0]), float("nan")
    from scipy import stats

    return float(v.mean()), float(stats.t.ppf(0.975, v.size - 1) * v.std(ddof=1) / np.sqrt(v.size))


def welch(a, b) -> tuple[float, float, bool]:
    """(mean(a) - mean(b), two-sided Welch p-value, significant at 5%); nan p with < 2 each."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    diff = float(a.mean() - b.mean())
    if a.size < 2 or b.size < 2:
        return diff, float("nan"), False
    from scipy import stats

    va, vb = a.var(ddof=1) / a.size, b.var(ddof=1) / b.size
    if va + vb == 0:
        return diff, (0.0 if diff != 0 else 1.0), diff != 0
    p = float(stats.ttest_ind(a, b, equal_var=False).pvalue)
    return diff, p, p < 0.05


def problem_interval(correct, n: int) -> tuple[float, float]:
    """(avg@n, 95% half-width) with problems as the sampling unit (normal approximation)."""
    frac = np.asarray(correct, np.float64) / n
    if frac.size < 2:
        return float(frac.mean()), float("nan")
    return float(frac.mean()), float(1.96 * frac.std(ddof=1) / np.sqrt(frac.size))


def rl_effect(run_corrects, run_n: int, base_correct, base_n: int) -> dict[str, float]:
    """Improvement of RL runs over the base, all evaluated on the same problems.

    run_corrects: one correct-count vector per training seed (length P each); base_correct:
    length P. Returns effect (mean over seeds of run avg - base avg), eval_half (95% half-width of
    the paired per-problem difference between the seed-averaged runs and the base: evaluation
    noise), seed_half (95% Student-t half-width over the per-seed differences: training noise;
    nan with one seed), half (both combined in quadrature) and shown (effect - half > 0).
    """
    base = np.asarray(base_correct, np.float64) / base_n
    runs = np.asarray(run_corrects, np.float64) / run_n
    if runs.ndim != 2 or runs.shape[1] != base.size:
        raise ValueError(f"rl_effect: run_corrects shape {runs.shape} does not match the base's "
                         f"{base.size} problems")
    diff_P = runs.mean(axis=0) - base
    eval_half = (float(1.96 * diff_P.std(ddof=1) / np.sqrt(diff_P.size)) if diff_P.size > 1
                 else float("nan"))
    _, seed_half = t_interval(runs.mean(axis=1) - base.mean())
    half = math.sqrt(eval_half ** 2 + (seed_half if math.isfinite(seed_half) else 0.0) ** 2)
    effect = float(diff_P.mean())
    return {"effect": effect, "eval_half": eval_half, "seed_half": seed_half, "half": half,
            "shown": bool(math.isfinite(half) and effect - half > 0)}


def mean_profile(metrics: list[dict[str, Any]], key: str, *, seeded_only: bool = False):
    """Count-weighted mean of a 10-bin positional profile over the logged steps ([bins] or None)."""
    num, den = None, None
    for m in metrics:
        if key not in m or "pos_count" not in m or m[key] is None:
            continue
        if seeded_only and not m.get("seed_length"):
            continue
        v = np.array([np.nan if x is None else x for x in m[key]], np.float64)
        c = np.asarray(m["pos_count"], np.float64)
        v = np.where(np.isfinite(v), v, 0.0)
        num = v * c if num is None else num + v * c
        den = c if den is None else den + c
    if num is None:
        return None
    return np.where(den > 0, num / np.maximum(den, 1e-12), np.nan)
