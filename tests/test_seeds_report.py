"""The seed report's comparison table: Welch intervals against scipy, the bold rule, and the
informative-only calibration summary (tseeds_jax/eval/seed_report.py)."""

import numpy as np
from scipy import stats

from tseeds_jax.eval import seed_report
from tseeds_jax.eval.rundata import RunData


def test_welch_interval_matches_scipy():
    rng = np.random.default_rng(0)
    for n, m in ((5, 5), (3, 7), (2, 4)):
        a, b = rng.normal(0.5, 0.05, n), rng.normal(0.45, 0.1, m)
        d, h, p = seed_report.welch_interval(a, b)
        res = stats.ttest_ind(a, b, equal_var=False)
        lo, hi = res.confidence_interval(0.95)
        np.testing.assert_allclose([d - h, d + h], [lo, hi], rtol=1e-10)
        np.testing.assert_allclose(p, res.pvalue, rtol=1e-10)
    d, h, p = seed_report.welch_interval([0.5], [0.4, 0.3])
    assert np.isnan(h) and np.isnan(p)


def _run(method, label, seed, acc, zero, calib=None):
    ms = []
    for s in range(4):
        m = {"step": s, "zero_adv_group_frac": zero, "zero_adv_group_frac/seeded": zero}
        if calib is not None:
            m.update({"calib/n": calib[0], "calib/pred": calib[1], "calib/real": calib[2]})
        ms.append(m)
    return RunData(path="", method=method, label=label, seed=seed, info={}, curve=[],
                   final={"avg_at_n": acc}, metrics=ms)


def test_comparison_rows_bold_only_significant_differences_with_intervals_excluding_zero():
    dapo = [0.50, 0.52, 0.48, 0.51, 0.49]
    ratio = [0.50, 0.55, 0.45, 0.52, 0.48]
    mix = [0.60, 0.61, 0.59, 0.62, 0.58]
    z_ratio, z_mix = [0.35, 0.34, 0.36, 0.33, 0.37], [0.20, 0.21, 0.19, 0.22, 0.18]
    calib = ([0, 1, 2, 0, 0], [0, 0.3, 1.0, 0, 0], [0, 0, 1, 0, 0])
    methods = {
        "dapo": [_run("dapo", "DAPO", k, a, float("nan")) for k, a in enumerate(dapo)],
        "ts_ratio": [_run("ts_ratio", "Ratio", k, a, z) for k, (a, z) in
                     enumerate(zip(ratio, z_ratio, strict=True))],
        "ts_mixture": [_run("ts_mixture", "Mix", k, a, z, calib) for k, (a, z) in
                       enumerate(zip(mix, z_mix, strict=True))],
    }
    lines = seed_report.comparison(methods, "dapo")
    row = next(x for x in lines if x.startswith("| Mix |"))
    cells = [c.strip() for c in row.split("|")[1:-1]]
    assert cells[1] == "5"
    # the accuracy family: ratio vs DAPO, Mix vs DAPO, Mix vs ratio (3 tests); scipy's p-values,
    # Holm's thresholds 0.05/3, 0.05/2, 0.05 applied here by hand
    ps = {k: stats.ttest_ind(a, b, equal_var=False).pvalue
          for k, a, b in (("rd", ratio, dapo), ("md", mix, dapo), ("mr", mix, ratio))}
    assert ps["md"] < 0.05 / 3 and ps["mr"] < 0.05 / 2 and ps["rd"] > 0.05  # the data's shape
    for cell, ref in ((cells[3], dapo), (cells[4], ratio)):
        res = stats.ttest_ind(mix, ref, equal_var=False)
        lo, hi = res.confidence_interval(0.95)
        d = np.mean(mix) - np.mean(ref)
        assert cell == (f"**{100 * d:+.1f} ± {100 * (hi - lo) / 2:.1f} "
                        f"(p={res.pvalue:.2f}; Holm: yes)**")
    res = stats.ttest_ind(z_mix, z_ratio, equal_var=False)
    assert cells[6].startswith("**-") and f"(p={res.pvalue:.2f}; Holm: yes)" in cells[6]
    # 5 runs x 4 steps x 3 informative samples: predicted 1.3 / 3, realised 1 / 3
    assert cells[7] == f"{100 * 1.3 / 3:.1f} → {100 / 3:.1f} (60)"
    ratio_row = [c.strip() for c in next(x for x in lines if x.startswith("| Ratio |"))
                 .split("|")[1:-1]]
    assert not ratio_row[3].startswith("**") and ratio_row[4] == "—"  # not significant vs DAPO
    assert ratio_row[3].endswith("; Holm: no)")
    assert seed_report.comparison({"dapo": methods["dapo"]}, "dapo") == []


def test_holm_matches_a_hand_computed_example():
    # m = 4: sorted 0.005 <= 0.05/4, 0.01 <= 0.05/3, 0.03 > 0.05/2 -> stop; 0.04 not reached
    assert seed_report.holm([0.01, 0.04, 0.03, 0.005]) == [True, False, False, True]
    # the hard task's 7 accuracy comparisons (docs/demo_results.md): only 0.002 < 0.05/7 stays;
    # 0.014 > 0.05/6 stops the procedure although it is below 0.05
    ps = [0.014, 0.002, 0.02, 0.11, 0.05, 0.79, 0.49]
    assert seed_report.holm(ps) == [False, True, False, False, False, False, False]
    # nan (too few seeds) is never kept and does not enlarge the family: 0.02 <= 0.05/2
    assert seed_report.holm([0.02, float("nan"), 0.04]) == [True, False, True]
    assert seed_report.holm([]) == []


def test_accuracy_family_has_each_pair_once():
    pairs = seed_report.accuracy_pairs(["dapo", "ts_ratio", "a", "b", "c"], "dapo", "ts_ratio")
    assert len(pairs) == 7 and len({frozenset(p) for p in pairs}) == 7


def test_a_three_seed_difference_is_checked_against_the_recorded_five_seeds():
    # the default demo's 3 seeds, where mixture_spread beat DAPO at p = 0.03 (docs/demo_results.md)
    from tseeds_jax.demo.reference import MACHINE, RECORDED, for_run

    rec = RECORDED["default"]["pass1"]
    methods = {m: [_run(m, m.upper(), k, v / 100, 0.3) for k, v in enumerate(rec[m][:3])]
               for m in ("dapo", "ts_ratio", "ts_mixture", "ts_mixture_spread")}
    recorded = for_run("default", list(methods), 100, machine=MACHINE)
    assert set(recorded["pass1"]) == set(methods)
    lines = seed_report.comparison(methods, "dapo", recorded=recorded)
    p3 = stats.ttest_ind(rec["ts_mixture_spread"][:3], rec["dapo"][:3], equal_var=False).pvalue
    p5 = stats.ttest_ind(rec["ts_mixture_spread"], rec["dapo"], equal_var=False).pvalue
    assert p3 < 0.05 < p5  # the 3-seed difference and the 5 seeds where it did not hold
    warn = next(x for x in lines if x.startswith("- TS_MIXTURE_SPREAD vs DAPO"))
    assert f"(p={p3:.2f}, 3 seeds)" in warn and f"(p={p5:.2f}; Holm: no)" in warn
    assert "did not hold at 5 seeds" in warn
    assert for_run("default", list(methods), 8, machine=MACHINE) is None  # --quick: another one
    # another CPU warms another base, and a run over several bases is another design
    assert for_run("default", list(methods), 100, machine={**MACHINE, "cpu": "Intel"}) is None
    assert for_run("default", list(methods), 100, machine=MACHINE, bases=(0, 1, 2)) is None
