"""Statistics of a demo over several base policies: paired within a base, tested across bases.

Data: per method, a list per base of per-training-seed values (held-out pass@1 in %, as the
records `demo_<task>_bases` hold them; None or a missing base: not run).

The unit of replication is the base. A method's value on a base is the mean over that base's
training seeds; its difference to another method on a base is paired (same base policy, same
training seeds, same evaluation problems and sampler seeds); the interval and the test are a
one-sample Student t over the bases' differences (n bases, n - 1 degrees of freedom). With the
same number of seeds per method in every base, every base's difference has the same variance,
so this is the exact test of a mixed model with a random base and a random base x method
effect, without estimating the variance components from 5 bases. A test over training seeds
of one base (the earlier tables) leaves out the base-to-base variation and answers a narrower
question: whether the method helps *from that base*.

Holm's step-down correction is applied over a family of such comparisons (`holm` of
seed_report). For a method with several seeds per base, `variance_split` separates the
between-base and within-base (training seed) parts (one-way random-effects ANOVA);
`without_base` drops one base (how much of a split rests on it), and `interaction_f` tests
whether a paired difference itself varies between bases beyond its training-seed noise.

Power: `detectable_difference` is the smallest true mean difference that the paired t over n
bases finds at two-sided level alpha with the given power, for the observed SD of the per-base
differences (noncentral t, solved exactly): what a "no difference shown" leaves open.
"""

from __future__ import annotations

import math

import numpy as np


def base_means(per_base) -> list[float | None]:
    """[mean over a base's seeds, or None for a base without values] per base."""
    if not isinstance(per_base, list | tuple):
        raise TypeError(f"per_base = {per_base!r}: expected a list per base of per-seed values")
    out = []
    for i, seeds in enumerate(per_base):
        if not isinstance(seeds, list | tuple):
            raise TypeError(f"per_base[{i}] = {seeds!r}: expected a list of per-seed values")
        vals = [float(x) for x in seeds if x is not None]
        out.append(float(np.mean(vals)) if vals else None)
    return out


def t_test(diffs) -> dict[str, float]:
    """One-sample two-sided Student t of `diffs` against 0: {"n", "mean", "half" (95%), "p",
    "sd"}; half and p are nan with fewer than 2 values, and p is nan with zero spread: records
    keep 0.01 points, so equal differences on every base are a tie of rounded values, not a
    spread of zero (a test would call any such mean certain)."""
    from scipy import stats

    d = np.asarray([x for x in diffs if x is not None], np.float64)
    n = int(d.size)
    if n == 0:
        return {"n": 0, "mean": float("nan"), "half": float("nan"), "p": float("nan"),
                "sd": float("nan")}
    mean = float(d.mean())
    if n < 2:
        return {"n": 1, "mean": mean, "half": float("nan"), "p": float("nan"), "sd": float("nan")}
    sd = float(d.std(ddof=1))
    se = sd / math.sqrt(n)
    half = float(stats.t.ppf(0.975, n - 1) * se)
    if se == 0:
        p = float("nan")
    else:
        p = float(2 * stats.t.sf(abs(mean) / se, n - 1))
    return {"n": n, "mean": mean, "half": half, "p": p, "sd": sd}


def paired(a_per_base, b_per_base) -> dict[str, float]:
    """`t_test` of mean(a) - mean(b) per base, over the bases where both have values; also
    "above": the number of those bases where a's mean is above b's."""
    a, b = base_means(a_per_base), base_means(b_per_base)
    diffs = [x - y for x, y in zip(a, b) if x is not None and y is not None]
    out = t_test(diffs)
    out["above"] = sum(d > 0 for d in diffs)
    out["diffs"] = diffs
    return out


def family(pairs: dict, data: dict) -> dict:
    """{(method, against): paired(...) with "holm" (kept at 5% over the family)} for the given
    (method, against) pairs of `data` ({method: per_base}); pairs whose data is missing are left
    out. A pair whose reference is a scalar per base (the base policy) gives `data[against]` as
    a list per base of one value."""
    res = {k: paired(data[k[0]], data[k[1]]) for k in pairs if k[0] in data and k[1] in data}
    keys = [k for k, r in res.items() if math.isfinite(r["p"])]
    for k, kept in zip(keys, holm([res[k]["p"] for k in keys]), strict=True):
        res[k]["holm"] = kept
    for r in res.values():
        r.setdefault("holm", False)
    return res


def variance_split(per_base) -> dict[str, float] | None:
    """Between-base and within-base standard deviations of one method's values (one-way
    random-effects ANOVA, method of moments): within = pooled within-base variance (df = sum of
    seeds - 1 per base); between = (MS_between - MS_within) / n, n the seeds per base (bases
    with fewer seeds are left out; floored at 0). None unless >= 2 bases have >= 2 seeds."""
    groups = [[float(x) for x in s if x is not None] for s in per_base]
    n = max((len(g) for g in groups), default=0)
    groups = [g for g in groups if len(g) == n]
    if n < 2 or len(groups) < 2:
        return None
    arr = np.asarray(groups, np.float64)  # bases x seeds
    ms_within = float(arr.var(axis=1, ddof=1).mean())
    ms_between = float(n * arr.mean(axis=1).var(ddof=1))
    between_var = max(0.0, (ms_between - ms_within) / n)
    return {"bases": len(groups), "seeds": n, "ms_within": ms_within, "ms_between": ms_between,
            "sd_within": math.sqrt(ms_within), "sd_between": math.sqrt(between_var)}


def without_base(per_base, base: int) -> list:
    """`per_base` with base `base` left out (to see how much of a statistic rests on it)."""
    if not 0 <= base < len(per_base):
        raise ValueError(f"base = {base}: expected 0 <= base < {len(per_base)}")
    return list(per_base[:base]) + list(per_base[base + 1:])


def interaction_f(a_per_base, b_per_base) -> dict[str, float] | None:
    """One-way ANOVA over bases of the seed-paired differences a[b][s] - b[b][s] (training seed
    s of both methods on base b: the same seed, a paired run): {"F", "df_between", "df_within",
    "p"}. F = MS between bases / MS within (seed-to-seed noise of the difference): whether the
    method difference changes from base to base (a base x method interaction). None unless
    >= 2 bases have the same number (>= 2) of seeds of both methods."""
    from scipy import stats

    groups = []
    for xs, ys in zip(a_per_base, b_per_base):
        xs = [float(x) for x in xs if x is not None]
        ys = [float(y) for y in ys if y is not None]
        if xs and len(xs) == len(ys):
            groups.append([x - y for x, y in zip(xs, ys)])
    n = max((len(g) for g in groups), default=0)
    groups = [g for g in groups if len(g) == n]
    if n < 2 or len(groups) < 2:
        return None
    arr = np.asarray(groups, np.float64)  # bases x seeds
    k = len(groups)
    ms_within = float(arr.var(axis=1, ddof=1).mean())
    ms_between = float(n * arr.mean(axis=1).var(ddof=1))
    f = ms_between / ms_within if ms_within > 0 else float("inf")
    df_b, df_w = k - 1, k * (n - 1)
    return {"F": f, "df_between": df_b, "df_within": df_w,
            "p": float(stats.f.sf(f, df_b, df_w)) if math.isfinite(f) else 0.0}


def detectable_difference(sd: float, n: int, alpha: float = 0.05, power: float = 0.8) -> float:
    """The smallest true mean difference d that the two-sided one-sample t over `n` paired
    differences of standard deviation `sd` rejects at level `alpha` with probability `power`:
    P(|T| > t_crit) = power for T noncentral t (n - 1 df, noncentrality d sqrt(n) / sd). nan
    with fewer than 2 differences or a non-finite sd."""
    from scipy import optimize, stats

    if n < 2 or not math.isfinite(sd) or sd < 0:
        return float("nan")
    if sd == 0:
        return 0.0
    df = n - 1
    crit = stats.t.ppf(1 - alpha / 2, df)

    def short(d):  # power at difference d, minus the target
        nc = d * math.sqrt(n) / sd
        return stats.nct.sf(crit, df, nc) + stats.nct.cdf(-crit, df, nc) - power

    hi = sd
    while short(hi) < 0 and hi < 1e6 * sd:
        hi *= 2
    if not math.isfinite(short(hi)) or short(hi) < 0:
        # scipy's noncentral t is nan far in its tail at 1 degree of freedom (2 bases): no
        # difference is reported rather than a wrong one
        return float("nan")
    return float(optimize.brentq(short, 0.0, hi, xtol=1e-10 * sd))


def holm(pvalues: list[float], alpha: float = 0.05) -> list[bool]:
    """Holm's step-down correction over one family of tests: sort the p-values, compare the
    i-th smallest (i from 0) with alpha / (m - i) and stop at the first that fails; a test is
    kept (True) only if it and every smaller p passed. nan p-values (too few seeds) are never
    kept and do not count in m."""
    order = sorted((p, i) for i, p in enumerate(pvalues) if math.isfinite(p))
    kept = [False] * len(pvalues)
    for rank, (p, i) in enumerate(order):
        if p > alpha / (len(order) - rank):
            break
        kept[i] = True
    return kept
