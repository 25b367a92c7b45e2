"""Report figures (matplotlib, Agg backend): every function takes plain data and writes one PNG."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from tseeds_jax.eval.rundata import RunData, mean_profile, t_interval  # noqa: E402


def _curve_points(runs: list[RunData], x_key: str):
    """x grid and per-run held-out accuracy (runs share the evaluation steps)."""
    curves = [r.curve for r in runs if r.curve]
    if not curves:
        return None, None
    n = min(len(c) for c in curves)
    xs = np.array([[pt[x_key] for pt in c[:n]] for c in curves], np.float64)
    ys = np.array([[pt["avg"] for pt in c[:n]] for c in curves], np.float64)
    return xs.mean(axis=0), ys


def accuracy_curves(methods: dict[str, list[RunData]], path: str, *, base: float | None = None):
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, (x_key, xlabel) in zip(axes, (("step", "training step"),
                                          ("generated_tokens", "generated tokens (cumulative)"))):
        for runs in methods.values():
            x, ys = _curve_points(runs, x_key)
            if x is None:
                continue
            stats = [t_interval(ys[:, j]) for j in range(ys.shape[1])]
            mean = np.array([s[0] for s in stats])
            half = np.array([s[1] for s in stats])
            line, = ax.plot(x, mean, marker="o", ms=3,
                            label=f"{runs[0].label} (n={ys.shape[0]})")
            if ys.shape[0] > 1:
                # an accuracy lies in [0, 1]; t-intervals of 2-3 seeds can reach past it
                ax.fill_between(x, np.clip(mean - half, 0, 1), np.clip(mean + half, 0, 1),
                                alpha=0.2, color=line.get_color())
        if base is not None:
            ax.axhline(base, color="gray", ls="--", lw=1, label="base policy (final-evaluation set)")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("held-out accuracy (avg@n)")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle("Held-out accuracy: mean and 95% t-interval over training seeds")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def pass_at_k_curves(series: dict[str, dict[int, float]], path: str, title: str):
    """series: label -> {k: pass@k}."""
    fig, ax = plt.subplots(figsize=(6, 4))
    for label, pk in series.items():
        ks = sorted(int(k) for k in pk)
        ax.plot(ks, [pk[k] if k in pk else pk[str(k)] for k in ks], marker="o", label=label)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("k")
    ax.set_ylabel("pass@k (unbiased)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def profiles(methods: dict[str, list[RunData]], path: str):
    """Positional entropy and clip fraction (10% bins of relative position), averaged over steps
    and training seeds of each method (the analogue of the paper's Figures 3 and 4)."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    centers = (np.arange(10) + 0.5) * 10
    for runs in methods.values():
        for ax, key in zip(axes, ("pos_entropy", "pos_clipfrac")):
            profs = [p for p in (mean_profile(r.metrics, key) for r in runs) if p is not None]
            if not profs:
                continue
            ax.plot(centers, np.nanmean(profs, axis=0), marker="o", ms=3, label=runs[0].label)
    axes[0].set_ylabel("mean token entropy (nats)")
    axes[1].set_ylabel("clipped-token fraction")
    for ax in axes:
        ax.set_xlabel("relative position in response (%)")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle("Positional profiles over training (10% bins)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def per_base_effects(data: dict[str, list], baseline: str, path: str, labels: dict[str, str],
                     title: str = "each method minus the baseline, per base"):
    """One line per base across the methods: the method's mean over that base's training seeds
    minus the baseline's on the same base (points), with the mean over bases and its 95%
    t-interval in black. data: {method: [[per-seed values] per base]}."""
    from tseeds_jax.eval.bases_stats import base_means, paired

    others = [m for m in data if m != baseline]
    ref = base_means(data[baseline])
    fig, ax = plt.subplots(figsize=(max(6.0, 1.1 * len(others) + 2), 4.2))
    xs = np.arange(len(others))
    for b, r in enumerate(ref):
        if r is None:
            continue
        ys = [(base_means(data[m])[b] - r) if b < len(data[m]) and base_means(data[m])[b]
              is not None else np.nan for m in others]
        ax.plot(xs, ys, marker="o", ms=4, lw=1, alpha=0.8, label=f"base {b}")
    stats = [paired(data[m], data[baseline]) for m in others]
    means = np.array([s["mean"] for s in stats])
    halves = np.array([s["half"] if np.isfinite(s["half"]) else 0.0 for s in stats])
    ax.errorbar(xs + 0.12, means, yerr=halves, fmt="s", color="black", capsize=4,
                label="mean over bases, 95% t-interval")
    ax.axhline(0, color="gray", lw=1, ls="--")
    ax.set_xticks(xs)
    ax.set_xticklabels([labels.get(m, m).replace("Thinking Seeds", "TS").replace("`", "") for m in others],
                       rotation=20, ha="right", fontsize=8)
    ax.set_ylabel(f"held-out pass@1 minus {labels.get(baseline, baseline)} (points)")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
