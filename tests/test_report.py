"""The report is data-driven: any methods found in run folders appear side by side."""

import json
import os

import numpy as np

from tseeds_jax.eval.report import SECTIONS, write_report
from tseeds_jax.eval.rundata import t_interval, welch


def _run(root, method, label, seed, acc, steps=8, base=None):
    d = os.path.join(root, "runs", method, *([f"base{base}"] if base else []), f"seed{seed}")
    os.makedirs(d)
    with open(os.path.join(d, "method.json"), "w") as f:
        json.dump({"method": method, "label": label, "seed": seed,
                   **({} if base is None else {"base": base})}, f)
    rng = np.random.default_rng(seed)
    with open(os.path.join(d, "metrics.jsonl"), "w") as f:
        for s in range(steps):
            f.write(json.dumps({"step": s, "accuracy": acc, "time_step": 0.1 + 0.01 * rng.random(),
                                "generated_tokens": 100, "seed_length": 0,
                                "pos_entropy": list(np.linspace(1, 0.5, 10)),
                                "pos_clipfrac": [0.01] * 10, "pos_seedfrac": [0.0] * 10,
                                "pos_count": [5] * 10}) + "\n")
    with open(os.path.join(d, "eval_curve.json"), "w") as f:
        json.dump([{"step": s, "generated_tokens": 100 * s, "avg": acc * s / 8} for s in (0, 4, 8)],
                  f)
    correct = [int(round(acc * 4))] * 10
    with open(os.path.join(d, "eval.json"), "w") as f:
        json.dump({"n": 4, "avg_at_n": acc, "pass_at_k": {"1": acc, "2": acc, "4": acc},
                   "mean_length": 20.0, "correct": correct, "num_problems": 10}, f)


def test_report_puts_any_methods_side_by_side(tmp_path):
    root = str(tmp_path)
    for seed, (a, b) in enumerate([(0.30, 0.50), (0.32, 0.52), (0.31, 0.51)]):
        _run(root, "dapo", "On-policy DAPO", seed, a)
        _run(root, "m2po_future", "M2PO (future config)", seed, b)
    os.makedirs(os.path.join(root, "base"))
    with open(os.path.join(root, "base", "eval.json"), "w") as f:
        json.dump({"n": 4, "avg_at_n": 0.2, "pass_at_k": {"1": 0.2, "2": 0.3, "4": 0.4},
                   "mean_length": 20.0, "correct": [1, 0, 1, 2] * 5, "num_problems": 20}, f)
    path = write_report(root)
    text = open(path).read()
    for section in SECTIONS:
        assert section in text
    assert "M2PO (future config)" in text and "On-policy DAPO" in text
    # 20 points apart with ~1 point seed spread: significant, and kept by Holm (one comparison)
    assert "it **stays significant** after Holm's correction" in text
    assert "(p=0.00; Holm: yes) |" in text
    for name in ("accuracy.png", "pass_at_k.png", "profiles.png"):
        assert os.path.getsize(os.path.join(root, "plots", name)) > 1000


def test_t_interval_and_welch():
    mean, half = t_interval([1.0, 2.0, 3.0])
    assert mean == 2.0 and abs(half - 4.302652729911275 * 1.0 / np.sqrt(3)) < 1e-9
    diff, p, sig = welch([1.0, 1.1, 0.9], [1.0, 1.2, 0.8])
    assert abs(diff) < 1e-12 and p > 0.5 and not sig


def test_rl_effect_combines_eval_noise_and_seed_spread():
    from tseeds_jax.eval.rundata import rl_effect

    rng = np.random.default_rng(0)
    base = rng.integers(0, 5, 40)  # correct out of 4, 40 problems
    runs = [np.minimum(base + rng.integers(0, 2, 40), 4) for _ in range(3)]
    e = rl_effect(runs, 4, base, 4)
    # float64 reference written from the definitions
    fr = np.array(runs, np.float64) / 4
    fb = base / 4.0
    d = fr.mean(0) - fb
    eval_half = 1.96 * d.std(ddof=1) / np.sqrt(40)
    per_seed = fr.mean(1) - fb.mean()
    seed_half = 4.302652729911275 * per_seed.std(ddof=1) / np.sqrt(3)
    assert abs(e["effect"] - d.mean()) < 1e-12
    assert abs(e["eval_half"] - eval_half) < 1e-12 and abs(e["seed_half"] - seed_half) < 1e-9
    assert abs(e["half"] - np.hypot(eval_half, seed_half)) < 1e-9
    assert e["shown"] == (d.mean() - np.hypot(eval_half, seed_half) > 0)
    same = rl_effect([base, base], 4, base, 4)
    assert same["effect"] == 0.0 and not same["shown"]


def test_report_says_when_rl_does_not_beat_the_base(tmp_path):
    root = str(tmp_path)
    for seed in range(3):
        _run(root, "dapo", "On-policy DAPO", seed, 0.5)
    os.makedirs(os.path.join(root, "base"))
    with open(os.path.join(root, "base", "eval.json"), "w") as f:
        json.dump({"n": 4, "avg_at_n": 0.5, "pass_at_k": {"1": 0.5, "2": 0.5, "4": 0.5},
                   "mean_length": 20.0, "correct": [2] * 10, "num_problems": 10}, f)
    text = open(write_report(root)).read()
    assert "**No method improved on the base" in text


def test_report_compares_with_the_fair_baseline(tmp_path):
    """Seeded runs are also judged against the mini-batched on-policy baseline: one that beats
    plain DAPO but only ties the fair baseline is reported as not shown better than it."""
    root = str(tmp_path)
    accs = {"dapo": [0.30, 0.31, 0.29], "ts_ratio": [0.50, 0.52, 0.49],
            "ts_entropy": [0.70, 0.71, 0.72], "dapo_minibatch": [0.51, 0.49, 0.52]}
    for method, vals in accs.items():
        for seed, a in enumerate(vals):
            _run(root, method, method.upper(), seed, a)
    with open(os.path.join(root, "demo.json"), "w") as f:
        json.dump({"methods": list(accs), "baseline": "dapo", "fair_baseline": "dapo_minibatch"}, f)
    text = open(write_report(root)).read()
    fair = text[text.index("Against the fair on-policy baseline (DAPO_MINIBATCH, 3 seeds"):]
    ratio = next(line for line in fair.splitlines() if line.startswith("- TS_RATIO vs"))
    entropy = next(line for line in fair.splitlines() if line.startswith("- TS_ENTROPY vs"))
    _, p_ratio, _ = welch(accs["ts_ratio"], accs["dapo_minibatch"])
    assert f"p={p_ratio:.2f} uncorrected; Holm: no" in ratio and "**within**" in ratio
    assert "Holm: yes" in entropy and "**exceeds**" in entropy
    assert "- DAPO vs DAPO_MINIBATCH" not in fair


def _seed_runs():
    """Two methods x 2 seeds with hand-written step metrics (T = 2: steps 0, 2 on-policy)."""
    from tseeds_jax.eval.rundata import RunData

    runs = {"dapo": [], "ts_adaptive": []}
    for seed in range(2):
        runs["dapo"].append(RunData(
            path="", method="dapo", label="DAPO", seed=seed, info={}, curve=[], final=None,
            metrics=[{"step": s, "zero_adv_group_frac": 0.4 + 0.1 * seed,
                      "zero_adv_group_frac/onpolicy": 0.4 + 0.1 * seed} for s in range(4)]))
        ms = []
        for s in range(4):
            m = {"step": s, "zero_adv_group_frac": [0.3, 0.1, 0.3, 0.1][s] + 0.02 * seed}
            if s % 2:
                m.update({"zero_adv_group_frac/seeded": m["zero_adv_group_frac"],
                          "seeds/cut_ratio_mean": 0.6, "seeds/cut_ratio_hist": [1] * 4 + [2] * 6,
                          "seeds/empty_frac": 0.0, "seeds/from_success_frac": 0.75,
                          "seeds/fallback_frac": 0.25, "seeds/gamma": 1.0 + s,
                          "seeds/gamma_calibrated": 2.0 + s,
                          "calib/n": [2, 0, 4, 0, 0], "calib/pred": [0.2, 0, 2.0, 0, 0],
                          "calib/real": [1, 0, 1, 0, 0]})
            else:
                m["zero_adv_group_frac/onpolicy"] = m["zero_adv_group_frac"]
            ms.append(m)
        runs["ts_adaptive"].append(RunData(path="", method="ts_adaptive", label="Adaptive",
                                           seed=seed, info={}, curve=[], final=None, metrics=ms))
    return runs


def test_seed_section_reports_zero_advantage_split_and_calibration():
    from scipy import stats

    from tseeds_jax.eval import seed_report

    lines = seed_report.section("## S", _seed_runs(), "dapo", lambda r: 2)
    text = "\n".join(lines)
    # per-run means over steps: 0.2 and 0.22; 95% t interval over the two seeds
    vals = np.array([0.2, 0.22])
    half = stats.t.ppf(0.975, 1) * vals.std(ddof=1) / np.sqrt(2)
    row = next(x for x in lines if x.startswith("| Adaptive | 2 |"))
    cells = [c.strip() for c in row.split("|")[1:-1]]
    assert cells[2] == f"{100 * vals.mean():.1f} ± {100 * half:.1f}"
    d = stats.ttest_ind(vals, [0.4, 0.5], equal_var=False)
    lo, hi = d.confidence_interval(0.95)
    kept = d.pvalue < 0.05  # a family of one comparison: Holm is the plain test
    assert cells[3] == (f"{100 * (vals.mean() - 0.45):+.1f} ± {100 * (hi - lo) / 2:.1f} "
                        f"(p={d.pvalue:.2f}; Holm: {'yes' if kept else 'no'})")
    assert cells[4].startswith(f"{100 * np.mean([0.3, 0.32]):.1f} ± ")  # on-policy batches
    assert cells[5].startswith(f"{100 * np.mean([0.1, 0.12]):.1f} ± ")  # seeded batches
    seed_row = next(x for x in lines if x.startswith("| Adaptive | 60.0"))
    # cut ratio >= 0.5: bins 5..9 hold 5 x 2 of 4 x 1 + 6 x 2 = 16 per step
    assert [c.strip() for c in seed_row.split("|")[1:-1]][2] == f"{100 * 10 / 16:.1f}"
    # calibration: 2 runs x 2 seeded steps pooled; bin 0: 8 samples, predicted 0.8 / 8
    assert "| 0.0–0.2 | 8 | 10.0 | 50.0 |" in text
    assert "| 0.4–0.6 | 16 | 50.0 | 25.0 |" in text
    # per cycle (T = 2): cycle 0 = steps 0-1, 2 runs x 6 samples, predicted (0.2 + 2.0) x 2 / 12,
    # realised 2 x 2 / 12; gamma used 2, after 3
    assert f"| 0 | 0–1 | 12 | {100 * 4.4 / 12:.1f} | {100 * 4 / 12:.1f} | 2.00 | 3.00 |" in text
    assert f"| 1 | 2–3 | 12 | {100 * 4.4 / 12:.1f} | {100 * 4 / 12:.1f} | 4.00 | 5.00 |" in text


def test_report_of_the_default_three_seeds_warns_that_a_difference_did_not_hold_at_five(tmp_path):
    """The default demo's 3 seeds (seed values as recorded) with demo.json's recorded reference:
    the final-accuracy table shows Holm's verdict beside each p, and the comparison section says
    that mixture_spread's p = 0.03 lead over DAPO did not hold with 5 seeds."""
    from scipy import stats

    from tseeds_jax.demo.reference import MACHINE, RECORDED, for_run

    root = str(tmp_path)
    pass1 = RECORDED["default"]["pass1"]
    methods = ["dapo", "ts_ratio", "ts_mixture", "ts_mixture_spread"]
    for m in methods:
        for seed, v in enumerate(pass1[m][:3]):
            _run(root, m, m.upper(), seed, v / 100)
    with open(os.path.join(root, "demo.json"), "w") as f:
        json.dump({"methods": methods, "baseline": "dapo",
                   "reference": for_run("default", methods, 100, machine=MACHINE)}, f)
    text = open(write_report(root)).read()
    p3 = stats.ttest_ind(pass1["ts_mixture_spread"][:3], pass1["dapo"][:3],
                         equal_var=False).pvalue
    assert p3 < 0.05
    # the family: 3 against DAPO + 2 more against the ratio rule; 0.03 > 0.05 / 5 and it is the
    # smallest p of the five, so Holm keeps nothing
    row = next(x for x in text.splitlines() if x.startswith("| TS_MIXTURE_SPREAD | 3 |"))
    assert f"(p={p3:.2f}; Holm: no)" in row
    assert "the report's 5 accuracy comparisons" in text
    warn = next(x for x in text.splitlines() if x.startswith("- TS_MIXTURE_SPREAD vs DAPO:")
                and "did not hold" in x)
    assert "with 5 seeds +1.3" in warn and "**it did not hold at 5 seeds**" in warn


def test_a_recorded_difference_held_only_where_holm_keeps_it_in_the_recorded_family(tmp_path):
    """Hard task, 3 seeds where the ratio rule and `mixture` beat DAPO at p < 0.05; in the
    recorded 5 seeds (base 0, same CPU) ratio vs DAPO has p = 0.02 but Holm over the 7 recorded
    comparisons does not keep it, mixture vs DAPO (p = 0.002) it keeps."""
    from tseeds_jax.demo.reference import MACHINE, for_run

    root = str(tmp_path)
    methods = ["dapo", "ts_ratio", "ts_mixture"]
    for m, vals in (("dapo", (0.060, 0.061, 0.059)), ("ts_ratio", (0.100, 0.101, 0.099)),
                    ("ts_mixture", (0.110, 0.111, 0.109))):
        for seed, v in enumerate(vals):
            _run(root, m, m.upper(), seed, v)
    with open(os.path.join(root, "demo.json"), "w") as f:
        json.dump({"methods": methods, "baseline": "dapo",
                   "reference": for_run("hard", methods, 100, machine=MACHINE)}, f)
    text = open(write_report(root)).read()
    assert "AMD EPYC with avx/avx2/fma/avx512f/avx512_bf16/avx512_vnni" in text
    lines = text.splitlines()
    ratio = next(x for x in lines if x.startswith("- TS_RATIO vs DAPO:") and "seeds +" in x)
    mix = next(x for x in lines if x.startswith("- TS_MIXTURE vs DAPO:") and "seeds +" in x)
    assert "(p=0.02; Holm: no)" in ratio and "**it did not hold at 5 seeds**" in ratio
    assert "(p=0.00; Holm: yes)" in mix and mix.endswith("it held.")


def _bases_demo(root, methods, per_base):
    """A demo folder over bases: `methods` [(name, label)], per_base [(value per method)] of each
    base (one seed each), every base's own evaluation at 10%."""
    for b, values in enumerate(per_base):
        for (name, label), acc in zip(methods, values, strict=True):
            _run(root, name, label, 0, acc, base=b)
        bdir = os.path.join(root, "base" if b == 0 else f"base{b}")
        os.makedirs(bdir)
        with open(os.path.join(bdir, "eval.json"), "w") as f:
            json.dump({"n": 4, "avg_at_n": 0.1, "mean_length": 20.0, "num_problems": 10,
                       "pass_at_k": {"1": 0.1}, "correct": [0] * 10}, f)
    with open(os.path.join(root, "demo.json"), "w") as f:
        json.dump({"methods": [n for n, _ in methods], "baseline": "dapo"}, f)
    return open(write_report(root)).read()


def test_report_over_bases_pairs_within_a_base_and_tests_across_bases(tmp_path):
    """Three bases, one seed each: DAPO 20/30/40%, the ratio rule 40/40/70% -> differences 20,
    10, 30 points: mean 20, sd 10, t = 2 sqrt(3) with 2 degrees of freedom (closed forms)."""
    import math

    root = str(tmp_path)
    text = _bases_demo(root, [("dapo", "DAPO"), ("ts_ratio", "RATIO")],
                       [(0.2, 0.4), (0.3, 0.4), (0.4, 0.7)])
    half = 0.95 / math.sqrt(2 * 0.975 * 0.025) * 10 / math.sqrt(3)
    p = 2 * (0.5 - 2 * math.sqrt(3) / (2 * math.sqrt(12 + 2)))
    row = next(x for x in text.splitlines() if x.startswith("| Thinking Seeds (ratio"))
    assert f"+20.0 ± {half:.1f} (p = {p:.2f}; Holm: no)" in row and "| 3 of 3 |" in row
    assert "- base 2: sampled avg@4 (pass@1) **10.0**" in text
    assert os.path.exists(os.path.join(root, "plots", "per_base.png"))
    verdict = next(x for x in text.splitlines() if x.startswith("- RATIO vs DAPO:"))
    assert "across 3 bases" in verdict and "**not shown across bases**" in verdict
    # runs of three bases are not pooled as seeds of one experiment
    assert "Comparison: each method" not in text


def test_report_over_bases_sets_lora_runs_beside_their_full_parameter_runs(tmp_path):
    """LoRA ratio rule 30/50/70% against the full-parameter ratio rule's 40/40/70%: differences
    -10, +10, 0 -> mean 0, sd 10, p = 1, above on 1 of 3 bases (closed forms, df 2)."""
    import math

    text = _bases_demo(str(tmp_path), [("dapo", "DAPO"), ("ts_ratio", "RATIO"),
                                       ("ts_ratio_lora", "RATIO LORA")],
                       [(0.2, 0.4, 0.3), (0.3, 0.4, 0.5), (0.4, 0.7, 0.7)])
    half = 0.95 / math.sqrt(2 * 0.975 * 0.025) * 10 / math.sqrt(3)
    line = next(x for x in text.splitlines() if x.startswith("- RATIO LORA vs RATIO (full"))
    assert f"+0.0 points ± {half:.1f} (paired t over 3 bases, p = 1.00)" in line, line
    assert "above it on 1 of 3 bases" in line
    assert "DAPO (full" not in text  # no DAPO LoRA runs, no line for them
