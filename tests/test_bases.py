"""The demo's base factor: the plan, the per-run record and its resume checks, and the across-base
statistics against hand-computed values (closed forms of Student's t with 2 degrees of freedom:
F(t) = 1/2 + t / (2 sqrt(t^2 + 2)), quantile t_q = (2q - 1) / sqrt(2 q (1 - q)))."""

import json
import math
import os

import numpy as np
import pytest

from tseeds_jax.eval import bases_stats, bases_table

# 3 bases; DAPO 2 training seeds per base, the ratio rule 1: base means 2, 2, 6 and 4, 3, 9
DAPO = [[1.0, 3.0], [2.0, 2.0], [5.0, 7.0]]
RATIO = [[4.0], [3.0], [9.0]]


def _t2_p(t):  # two-sided p of Student t with 2 degrees of freedom
    return 2 * (0.5 - t / (2 * math.sqrt(t * t + 2)))


def test_paired_across_bases_matches_the_hand_computed_example():
    # differences per base 2, 1, 3: mean 2, sd 1, se 1/sqrt(3), t = 2 sqrt(3), df 2
    r = bases_stats.paired(RATIO, DAPO)
    assert r["diffs"] == [2.0, 1.0, 3.0] and r["n"] == 3 and r["above"] == 3
    assert r["mean"] == pytest.approx(2.0, abs=1e-12)
    assert r["sd"] == pytest.approx(1.0, abs=1e-12)
    t975 = 0.95 / math.sqrt(2 * 0.975 * 0.025)  # 4.3027
    assert r["half"] == pytest.approx(t975 / math.sqrt(3), rel=1e-9)
    assert r["p"] == pytest.approx(_t2_p(2 * math.sqrt(3)), rel=1e-9)
    assert r["p"] == pytest.approx(0.0742, abs=1e-4)


def test_variance_split_matches_the_hand_computed_anova():
    # within-base variances 2, 0, 2 -> MS_within 4/3; base means 2, 2, 6 (variance 16/3)
    # -> MS_between 2 * 16/3 = 32/3; between component (32/3 - 4/3) / 2 = 14/3
    s = bases_stats.variance_split(DAPO)
    assert s["ms_within"] == pytest.approx(4 / 3) and s["ms_between"] == pytest.approx(32 / 3)
    assert s["sd_within"] == pytest.approx(math.sqrt(4 / 3))
    assert s["sd_between"] == pytest.approx(math.sqrt(14 / 3))
    assert bases_stats.variance_split(RATIO) is None  # one seed per base: no within part
    # the between component is floored at zero when the bases differ less than the seeds
    assert bases_stats.variance_split([[0.0, 4.0], [1.0, 3.0]])["sd_between"] == 0.0


def test_holm_over_the_family_and_missing_bases():
    mix = [[5.0], [1.0], [9.0]]  # vs DAPO 3, -1, 3: p > 0.05
    res = bases_stats.family([("ts_ratio", "dapo"), ("ts_mixture", "dapo")],
                             {"dapo": DAPO, "ts_ratio": RATIO, "ts_mixture": mix})
    assert not res[("ts_ratio", "dapo")]["holm"] and not res[("ts_mixture", "dapo")]["holm"]
    # a large, consistent difference is kept; a base without a run of the method is left out
    big = [[40.0], [], [41.0], [42.0]]
    d4 = DAPO + [[2.0, 2.5]]
    res = bases_stats.family([("x", "dapo")], {"dapo": d4, "x": big})
    r = res[("x", "dapo")]
    assert r["n"] == 3 and r["diffs"] == [38.0, 35.0, 39.75] and r["holm"]
    # Holm's rule by hand: sorted p against 0.05/3, 0.05/2, 0.05, stopping at the first miss
    from tseeds_jax.eval.seed_report import holm

    assert holm([0.04, 0.01]) == [True, True] and holm([0.03, 0.01, 0.04]) == [False, True, False]
    assert holm([0.02, 0.01, 0.04]) == [True, True, True] and holm([0.03, 0.02, 0.06]) == [
        False, False, False]


def test_statistics_reject_bad_input_naming_it():
    with pytest.raises(TypeError, match=r"per_base\[1\] = 3.0"):
        bases_stats.base_means([[1.0], 3.0])
    with pytest.raises(TypeError, match="per_base = 'x'"):
        bases_stats.base_means("x")


def test_table_of_a_record_recomputes_from_the_per_base_values():
    values = {"base_pass1": {"value": [1.0, 1.0, 2.0]}, "dapo_pass1": {"value": DAPO},
              "ts_ratio_pass1": {"value": RATIO},
              "dapo_all_equal": {"value": [[70.0, 72.0], [80.0, 80.0], [60.0, 62.0]]}}
    got = bases_table.build(values)
    rows = {r[0]: r for r in got["table"]["rows"]}
    ratio, dapo = rows["Thinking Seeds (ratio 0.5, T 8)"], rows["On-policy DAPO"]
    half = 0.95 / math.sqrt(2 * 0.975 * 0.025) / math.sqrt(3)
    assert ratio[4] == f"+2.0 ± {half:.1f} (p = 0.07; Holm: no)" and ratio[6] == "3 of 3"
    assert dapo[5] == f"-2.0 ± {half:.1f} (p = 0.07; Holm: no)"
    assert dapo[1] == "3 × 2" and ratio[1] == "3 × 1"
    assert dapo[3] == f"{math.sqrt(14 / 3):.1f} / {math.sqrt(4 / 3):.1f}"
    assert dapo[8] == "70.7"  # mean of the six runs
    # RL - base per base: ratio 3, 2, 7 -> mean 4, sd sqrt(7)
    sd = math.sqrt(((3 - 4) ** 2 + (2 - 4) ** 2 + (7 - 4) ** 2) / 2)
    assert ratio[7].startswith(f"+4.0 ± {0.95 / math.sqrt(0.04875) * sd / math.sqrt(3):.1f}")
    assert got["figures"]["ts_ratio_vs_dapo"] == (f"+2.0 ± {half:.1f}", 1, 4)
    with pytest.raises(ValueError, match="dapo_pass1"):
        bases_table.build({"base_pass1": {"value": [1.0]}, "ts_ratio_pass1": {"value": RATIO}})


def test_plan_orders_dapo_and_ratio_on_every_base_first_and_names_base_folders():
    from tseeds_jax.demo import plan

    runs = plan.order(["dapo", "ts_ratio", "ts_mixture", "prefixrl"], (0, 1), (0,),
                      {"dapo": 2, "ts_ratio": 2})
    assert runs == [("dapo", 0, 0), ("ts_ratio", 0, 0), ("dapo", 1, 0), ("ts_ratio", 1, 0),
                    ("ts_mixture", 0, 0), ("ts_mixture", 1, 0), ("prefixrl", 0, 0),
                    ("prefixrl", 1, 0), ("dapo", 0, 1), ("ts_ratio", 0, 1), ("dapo", 1, 1),
                    ("ts_ratio", 1, 1)]
    assert plan.run_dir("D", "dapo", 0, 1) == os.path.join("D", "runs", "dapo", "seed1")
    assert plan.run_dir("D", "dapo", 2, 0) == os.path.join("D", "runs", "dapo", "base2", "seed0")
    assert plan.base_dir("D", 0) == os.path.join("D", "base")
    # base 0 is the demo's one-base warm start: init seed 0, warm seed 0, source seed 99
    assert plan.base_seeds(0) == {"init": 0, "warm": 0, "source": 99}
    assert plan.base_seeds(3) == {"init": 3, "warm": 3, "source": 102}
    with pytest.raises(ValueError, match="method_seeds\\['cure'\\] = 2"):
        plan.order(["dapo"], (0,), (0,), {"cure": 2})
    with pytest.raises(ValueError, match="base = -1"):
        plan.base_seeds(-1)


def _open(path, resume, settings=None, bases=2):
    from tseeds_jax.demo.bases_record import BasesRecord

    return BasesRecord.open(str(path), name_what="test", command="tseeds demo --bases 2",
                            settings=settings or {"task": "t"}, methods=["dapo", "ts_ratio"],
                            bases=bases, commit="abc", resume=resume)


def test_record_grows_one_run_at_a_time_and_resumes_only_the_same_design(tmp_path, monkeypatch):
    path = tmp_path / "demo_x_bases.json"
    rec = _open(path, resume=False)
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text("\n".join(json.dumps(
        {"zero_adv_group_frac": z, "zero_adv_group_frac/seeded": s})
        for z, s in ((0.5, None), (0.25, 0.5))) + "\n")
    rec.add_base(1, 0.0625, 0.25)
    rec.add_run("ts_ratio", 1, 0, 0.1234, str(run), 12.34)
    with pytest.raises(ValueError, match="seed 2.*seeds 0-0"):
        rec.add_run("ts_ratio", 1, 2, 0.2, None, None)
    got = json.loads(path.read_text())["values"]
    assert got["base_pass1"]["value"] == [None, 6.25]
    assert got["ts_ratio_pass1"]["value"] == [[], [12.34]]
    assert got["ts_ratio_all_equal"]["value"] == [[], [37.5]]
    assert got["ts_ratio_all_equal_seeded"]["value"] == [[], [50.0]]
    assert got["ts_ratio_run_s"]["value"] == [[], [12.3]]
    # resumed: the run is there, a third base extends every list, the base must reproduce
    again = _open(path, resume=True, bases=3)
    assert again.has("ts_ratio", 1, 0) == 12.34 and again.has("dapo", 1, 0) is None
    assert again.rec["values"]["dapo_pass1"]["value"] == [[], [], []]
    with pytest.raises(ValueError, match=r"base_pass1\[1\]' = 6.25.*6.3"):
        again.add_base(1, 0.063, 0.25)
    with pytest.raises(ValueError, match="values.settings"):
        _open(path, resume=True, settings={"task": "other"})
    from tseeds_jax import results_record

    other = dict(results_record.machine(), cpu="Another CPU")
    monkeypatch.setattr(results_record, "machine", lambda: other)
    with pytest.raises(ValueError, match="machine.cpu.*Another CPU"):
        _open(path, resume=True)
    assert np.isfinite(got["ts_ratio_pass1"]["value"][1][0])


def test_table_tests_the_seeded_all_equal_share_against_the_ratio_rule_by_base():
    # mixture minus ratio per base: -10, -5, -10: mean -25/3, sd sqrt(25/3), t = -5, df 2
    values = {"base_pass1": {"value": [1.0, 1.0, 2.0]}, "dapo_pass1": {"value": DAPO},
              "ts_ratio_pass1": {"value": RATIO}, "ts_mixture_pass1": {"value": RATIO},
              "dapo_all_equal_seeded": {"value": [[None, None], [None, None], [None, None]]},
              "ts_ratio_all_equal_seeded": {"value": [[60.0], [70.0], [80.0]]},
              "ts_mixture_all_equal_seeded": {"value": [[50.0], [65.0], [70.0]]}}
    got = bases_table.build(values)
    rows = {r[0]: r for r in got["table"]["rows"]}
    half = 0.95 / math.sqrt(2 * 0.975 * 0.025) * math.sqrt(25 / 3) / math.sqrt(3)
    p = _t2_p(5.0)
    assert p < 0.05  # one comparison: Holm keeps it
    assert rows["Thinking Seeds, `mixture`"][9] == (
        f"{185 / 3:.1f} (**{-25 / 3:+.1f} ± {half:.1f} (p = {p:.2f}; Holm: yes)**)")
    assert rows["Thinking Seeds (ratio 0.5, T 8)"][9] == "70.0" and rows["On-policy DAPO"][9] == "—"
    assert got["figures"]["ts_mixture_seeded_equal_vs_ratio"][0] == f"{-25 / 3:+.1f} ± {half:.1f}"


def test_series_design_and_its_plan():
    from tseeds_jax.demo import plan, series

    hard = series.config("hard", 5, "runs/x")
    assert hard.task_name == "hard" and hard.bases == (0, 1, 2, 3, 4) and hard.seeds == (0,)
    assert set(hard.methods) == {"dapo", "ts_ratio", "ts_mixture", "ts_mixture_spread",
                                 "prefixrl", "questa", "fr3e", "cure"}
    runs = plan.order(list(hard.methods), hard.bases, hard.seeds, dict(hard.method_seeds))
    assert len(runs) == 5 * 8 + 5 * 2  # DAPO and the ratio rule: 2 seeds per base
    assert runs[:10] == [(m, b, 0) for b in range(5) for m in ("dapo", "ts_ratio")]
    default = series.config("default", 5, "runs/x")
    assert default.methods == ("dapo", "ts_ratio", "ts_mixture", "ts_mixture_spread")
    assert default.method_seeds == () and default.out == os.path.join("runs/x", "default")
    with pytest.raises(ValueError, match="task 'nope'"):
        series.config("nope", 5, "x")


def test_equal_differences_on_every_base_give_no_test():
    """Two bases both +0.39 (rounded record values): no spread to test against, so no p-value and
    nothing for Holm to keep; one nonzero spread gives the Student t of the closed form."""
    import math

    from tseeds_jax.eval import bases_stats

    r = bases_stats.t_test([0.39, 0.39])
    assert r["n"] == 2 and r["mean"] == 0.39 and math.isnan(r["p"])
    assert bases_stats.holm([r["p"], 0.01]) == [False, True]
    r = bases_stats.t_test([1.0, 3.0])  # mean 2, sd sqrt(2), t = 2 with 1 df: p = 1 - 2 atan(2) / pi
    assert abs(r["p"] - (1 - 2 * math.atan(2.0) / math.pi)) < 1e-12
