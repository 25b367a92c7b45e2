"""What the across-base design can detect, and how much its variance story rests on one base:
`bases_stats.detectable_difference` against a simulation of the paired t, `interaction_f` and
`without_base` against numpy computations, and the figures the docs quote from the records."""

import json
import math
import os

import numpy as np
import pytest
import scipy.stats

from tseeds_jax.eval import bases_stats, bases_table

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _values(task):
    with open(os.path.join(ROOT, "docs", "results", f"demo_{task}_bases.json")) as f:
        return json.load(f)["values"]


@pytest.mark.parametrize("n,sd", [(5, 1.0), (3, 4.0), (10, 2.5)])
def test_detectable_difference_has_the_stated_power_in_a_simulation(n, sd):
    d = bases_stats.detectable_difference(sd, n)
    rng = np.random.default_rng(0)
    x = rng.normal(d, sd, (200_000, n))
    t = x.mean(1) / (x.std(1, ddof=1) / math.sqrt(n))
    crit = scipy.stats.t.ppf(0.975, n - 1)
    power = np.mean(np.abs(t) > crit)
    assert abs(power - 0.8) < 0.005, power  # binomial SD of the estimate: 0.0009
    # and at a smaller difference the power is below 80%: d is the smallest such difference
    y = rng.normal(0.9 * d, sd, (200_000, n))
    ty = y.mean(1) / (y.std(1, ddof=1) / math.sqrt(n))
    assert np.mean(np.abs(ty) > crit) < 0.78
    # the textbook approximation (t_{1-a/2} + t_{power}) sd / sqrt(n) is close for n >= 5
    approx = (crit + scipy.stats.t.ppf(0.8, n - 1)) * sd / math.sqrt(n)
    if n >= 5:
        assert d == pytest.approx(approx, rel=0.03)
    assert bases_stats.detectable_difference(sd, 1) != bases_stats.detectable_difference(sd, 1)


def test_interaction_f_matches_a_numpy_two_way_anova():
    a = [[4.0, 6.0], [3.0, 3.5], [9.0, 8.0]]
    b = [[1.0, 3.0], [2.0, 2.0], [5.0, 7.0]]
    d = np.array(a) - np.array(b)  # 3, 3 | 1, 1.5 | 4, 1
    ms_w = np.mean([np.var(r, ddof=1) for r in d])  # (0 + 0.125 + 4.5) / 3
    ms_b = 2 * np.var(d.mean(1), ddof=1)
    got = bases_stats.interaction_f(a, b)
    assert got["df_between"] == 2 and got["df_within"] == 3
    assert got["F"] == pytest.approx(ms_b / ms_w, rel=1e-12)
    assert got["p"] == pytest.approx(scipy.stats.f.sf(ms_b / ms_w, 2, 3), rel=1e-12)
    # the same F as the interaction of a two-way ANOVA with the seed as a paired block:
    # residual of d after removing base means, by hand
    resid = d - d.mean(1, keepdims=True)
    assert ms_w == pytest.approx((resid ** 2).sum() / 3, rel=1e-12)
    assert bases_stats.interaction_f([[1.0]], [[2.0]]) is None


def test_the_hard_tasks_variance_split_rests_on_base_1():
    """The audit's figures (issue 55), recomputed from the record's per-run values with numpy."""
    v = _values("hard")
    ratio, dapo = (np.array(v[f"{m}_pass1"]["value"]) for m in ("ts_ratio", "dapo"))

    def split(arr):  # one-way random-effects ANOVA, 2 seeds per base
        msw = arr.var(axis=1, ddof=1).mean()
        msb = 2 * arr.mean(axis=1).var(ddof=1)
        return math.sqrt(max(0.0, (msb - msw) / 2)), math.sqrt(msw)

    keep = [0, 2, 3, 4]
    assert [round(x, 1) for x in split(ratio)] == [9.2, 1.5]
    assert [round(x, 1) for x in split(ratio[keep])] == [1.0, 1.6]
    assert [round(x, 1) for x in split(dapo[keep])] == [2.6, 0.4]
    got = bases_stats.variance_split(bases_stats.without_base(v["ts_ratio_pass1"]["value"], 1))
    assert (round(got["sd_between"], 1), round(got["sd_within"], 1)) == (1.0, 1.6)
    f = bases_stats.interaction_f(v["ts_ratio_pass1"]["value"], v["dapo_pass1"]["value"])
    assert (f["df_between"], f["df_within"], round(f["F"], 1), round(f["p"], 2)) == (4, 5, 3.6, 0.1)
    # the record holds what the docs quote, as `bases_table.robustness` computes it
    assert v["c_ts_ratio_sd_split_without_base1"]["value"] == "1.0 / 1.6"
    assert v["c_dapo_sd_split_without_base1"]["value"] == "2.6 / 0.4"
    assert v["c_ts_ratio_vs_dapo_between_bases_f"]["value"] == "F(4, 5) = 3.6, p = 0.10"
    for key, (text, _) in bases_table.robustness(v).items():
        assert v[f"c_{key}"]["value"] == text


@pytest.mark.parametrize("task", ["hard", "default"])
def test_the_detectable_column_is_the_formula_on_the_per_base_differences(task):
    v = _values(task)
    got = bases_table.build(v)
    rows = {r[0]: r for r in got["table"]["rows"]}
    dapo = np.array([np.mean(s) for s in v["dapo_pass1"]["value"]])
    for m in ("ts_ratio", "ts_mixture"):
        diffs = np.array([np.mean(s) for s in v[f"{m}_pass1"]["value"]]) - dapo
        want = bases_stats.detectable_difference(float(np.std(diffs, ddof=1)), len(diffs))
        cell = rows[bases_table.labels()[m]][10]
        assert cell == f"{want:.1f}"
        assert v[f"q_{m}_detectable"]["value"] == cell  # the record is up to date
    assert rows[bases_table.labels()["dapo"]][10] == "—"
    assert got["table"]["columns"][10] == bases_table.DETECTABLE
