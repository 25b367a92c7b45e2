"""Tokens and wall time per training step of every restart method, side by side in one process.

    python benchmarks/bench_restart_methods.py [--cycles 2] [--warmup 1] [--no-write]

Tiny default task and model (`tiny_config()`: 4 prompts x 4 samples, 32-token responses, a
randomly initialised ~0.1M-parameter decoder) for on-policy DAPO, Thinking Seeds (ratio 0.5,
T 8) and the peer restart methods PrefixRL, QuestA, FR3E and CURE (configs/tiny_<method>.py
settings, rl/config/methods.py). A random model never solves the task, so a parity reward
(response length odd) stands in: groups then have unequal rewards and PrefixRL's pool fills, as
they would on a real task. Each method first runs `--warmup` untimed cycles of 8 steps (the
sampler compiles each new prefill / budget shape once), then `--cycles` timed cycles, the methods
interleaved cycle by cycle so that machine load affects all alike. A cycle is 8 steps: one
Thinking Seeds refresh cycle; CURE's 16-step run switches to plain DAPO after step 8 (its
second stage), so its timed cycles mix both stages as a run of that length does.
Counts: `generated_tokens` per step (continuations, first passes, branches, behavior rollouts
and PrefixRL's one-time pool, which falls in the first warm-up cycle and is reported apart).
Writes docs/results/bench_restart_methods.json (rendered into docs/restart_methods.md by
`python -m tseeds_jax.results_render`).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "docs" / "results" / "bench_restart_methods.json"
T = 8
BASELINES = (("dapo", "On-policy DAPO"), ("ts_ratio", "Thinking Seeds (ratio 0.5, T 8)"))


def methods() -> tuple[tuple[str, str], ...]:
    """(name, label) of the baselines and of every registered restart method."""
    from tseeds_jax.rl.methods import registry  # imported where the script's others are

    return BASELINES + tuple(registry.labels().items())


def parity_reward(texts, refs):
    return [(float(len(t) % 2), "parity") for t in texts]


def make(run_dir: str, method: str, steps: int):
    from tseeds_jax.rl.config import TrainConfig, tiny_config
    from tseeds_jax.rl.config.methods import apply_restart
    from tseeds_jax.rl.setup import make_trainer

    c = tiny_config()
    if method == "ts_ratio":
        c.seeds.refresh_interval, c.seeds.truncation, c.seeds.ratio = T, "ratio", 0.5
    elif method != "dapo":
        apply_restart(c, method)
    c.run_dir, c.steps, c.progress, c.seeds.snapshots = run_dir, steps, False, False
    return make_trainer(TrainConfig.from_config(c), checkpoints=False,
                        env_overrides={"reward_fn": parity_reward})


def cycle(trainer) -> tuple[float, list[int], dict]:
    t0 = time.perf_counter()
    toks, first = [], None
    for _ in range(T):
        m = trainer.train_step()
        first = first or m
        toks.append(int(m["generated_tokens"]))
    return (time.perf_counter() - t0) / T, toks, first


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--cycles", type=int, default=2, help="timed cycles of 8 steps per method")
    ap.add_argument("--warmup", type=int, default=1, help="untimed cycles of 8 steps first")
    ap.add_argument("--no-write", action="store_true", help="print only")
    args = ap.parse_args()
    steps = T * (args.warmup + args.cycles)
    table = methods()
    per_s: dict[str, list[float]] = {m: [] for m, _ in table}
    per_tok: dict[str, list[int]] = {m: [] for m, _ in table}
    pool: dict[str, float] = {}
    wall0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        trainers = {m: make(os.path.join(tmp, m), m, steps) for m, _ in table}
        for w in range(args.warmup):
            for m, tr in trainers.items():
                _, _, first = cycle(tr)
                if w == 0 and "restart/pool_tokens" in first:
                    pool[m] = float(first["restart/pool_tokens"])
                print(f"[bench] warm-up {w + 1}/{args.warmup} {m}", file=sys.stderr, flush=True)
        for k in range(args.cycles):
            for m, tr in trainers.items():
                s, toks, _ = cycle(tr)
                per_s[m].append(s)
                per_tok[m] += toks
                print(f"[bench] cycle {k + 1}/{args.cycles} {m}: {s:.3f} s/step, "
                      f"{np.mean(toks):.1f} tokens/step", file=sys.stderr, flush=True)
    wall = time.perf_counter() - wall0
    base_s, base_t = float(np.mean(per_s["dapo"])), float(np.mean(per_tok["dapo"]))
    rows, values = [], {}
    for m, label in table:
        s, t = float(np.mean(per_s[m])), float(np.mean(per_tok[m]))
        rows.append([label, f"{t:.1f}", f"{t / base_t:.2f}x", f"{s:.3f}", f"{s / base_s:.2f}x",
                     f"{pool[m]:.0f} (once)" if m in pool else "-"])
        values[f"{m}_tokens_per_step"] = {"value": round(t, 1), "unit": "tokens per step"}
        values[f"{m}_s_per_step"] = {"value": round(s, 4), "unit": "s per step"}
    cmd = (f"python benchmarks/bench_restart_methods.py --cycles {args.cycles} "
           f"--warmup {args.warmup}")
    table = {"columns": ["method", "generated tokens / step", "vs DAPO", "wall s / step",
                         "vs DAPO", "PrefixRL pool tokens"], "rows": rows}
    for r in rows:
        print(" | ".join(r))
    print(f"[bench] total wall {wall:.0f} s", file=sys.stderr)
    if args.no_write:
        return
    sys.path.insert(0, str(ROOT))
    from tseeds_jax import results_record

    rec = results_record.make(
        "bench_restart_methods",
        "tokens generated and wall time per training step of each restart method, tiny default "
        "task and model, parity reward, methods interleaved cycle by cycle in one process",
        "measured", cmd, backend="cpu", values=values, table=table,
        note=(f"means over {args.cycles} timed cycles of {T} steps per method after "
              f"{args.warmup} warm-up cycle(s); whole run {wall:.0f} s wall; the machine is "
              "shared (2 cores), so times compare methods within this run only"))
    results_record.write(str(RECORD), rec)
    print(f"[bench] wrote {RECORD}", file=sys.stderr)


if __name__ == "__main__":
    main()
