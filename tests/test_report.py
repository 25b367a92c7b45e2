"""The report is data-driven: any methods found in run folders appear side by side."""

import json
import os

import numpy as np

from tseeds_jax.eval.report import SECTIONS, write_report
from tseeds_jax.eval.rundata import t_interval, welch


def _run(root, method, label, seed, acc, steps=8):
    d = os.path.join(root, "runs", method, f"seed{seed}")
    os.makedirs(d)
    with open(os.path.join(d, "method.json"), "w") as f:
        json.dump({"method": method, "label": label, "seed": seed}, f)
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
    assert "**exceeds**" in text  # 20 points apart with ~1 point seed spread
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
    assert f"p={p_ratio:.2f}" in ratio and "**within**" in ratio
    assert "**exceeds**" in entropy
    assert "- DAPO vs DAPO_MINIBATCH" not in fair
