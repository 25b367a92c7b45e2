"""Step-time overhead of Thinking Seeds: seeded / on-policy wall-clock per training step.

    python benchmarks/bench_seed_overhead.py [--cycles 4] [--no-write]

Tiny default task and model (`tiny_config()`), ratio truncation at ratio 0.5 and T 8 against
on-policy DAPO (T 1), measured side by side in one process: both trainers first run one full
cycle (8 steps: compiles every shape), then cycles of 8 steps alternate between the two so that
machine load affects both alike. Each cycle of the seeded run contains its refresh (behavior
rollouts for the next 7 batches + their learner statistics), so the ratio of mean step times is
the per-step cost the paper reports as 1.1-1.2x. Rewrites the `demo` section of
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import re
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "benchmarks.md"
BEGIN, END = "<!-- BEGIN demo -->", "<!-- END demo -->"
T = 8


def make(run_dir: str, seeded: bool):
    from tseeds_jax.rl.config import TrainConfig, tiny_config
    from tseeds_jax.rl.setup import make_trainer

    c = tiny_config()
    c.run_dir = run_dir
    c.steps = 10**6
    c.progress = False
    if seeded:
        c.seeds.refresh_interval = T
        c.seeds.truncation = "ratio"
        c.seeds.ratio = 0.5
    return make_trainer(TrainConfig.from_config(c), checkpoints=False)


def timed_cycle(trainer) -> tuple[float, int]:
    t0 = time.perf_counter()
    tokens = 0
    for _ in range(T):
        tokens += trainer.train_step()["generated_tokens"]
    return time.perf_counter() - t0, tokens


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--cycles", type=int, default=4, help="timed cycles of T steps per method")
    ap.add_argument("--warmup", type=int, default=3,
                    help="untimed cycles per method first (the sampler compiles each new prefill "
                         "bucket / budget shape once; seeded steps meet new shapes for a while)")
    ap.add_argument("--no-write", action="store_true", help="print only")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        on, seeded = make(os.path.join(tmp, "on"), False), make(os.path.join(tmp, "seeded"), True)
        for _ in range(args.warmup):  # compile
            timed_cycle(on), timed_cycle(seeded)
        times = {"on": [], "seeded": []}
        toks = {"on": 0, "seeded": 0}
        for _ in range(args.cycles):
            for name, tr in (("on", on), ("seeded", seeded)):
                dt, n = timed_cycle(tr)
                times[name].append(dt / T)
                toks[name] += n
    t_on, t_seed = float(np.median(times["on"])), float(np.median(times["seeded"]))
    ratio = t_seed / t_on
    tok_ratio = toks["seeded"] / max(toks["on"], 1)
    lines = [
        BEGIN,
        "## Step-time overhead of seeding (demo issue)",
        "",
        f"`python benchmarks/bench_seed_overhead.py --cycles {args.cycles} --warmup {args.warmup}` "
        f"({datetime.date.today().isoformat()}, {platform.machine()}, {os.cpu_count()} CPUs, "
        "CPU backend; machine possibly shared, so absolute times are indicative only).",
        "",
        f"Tiny default task/model (`tiny_config()`: 4 prompts x 4 samples, 32-token responses), "
        f"ratio 0.5, T {T}; {args.warmup} untimed then {args.cycles} timed cycles of {T} steps per "
        "method, interleaved. Per-cycle s/step: on-policy "
        + ", ".join(f"{x:.3f}" for x in times["on"]) + "; seeded "
        + ", ".join(f"{x:.3f}" for x in times["seeded"]) + ".",
        "",
        "| run | s/step (median of cycles) | generated tokens | ratio to on-policy |",
        "|---|---|---|---|",
        f"| on-policy DAPO (T 1) | {t_on:.4f} | {toks['on']} | 1.00× |",
        f"| Thinking Seeds (ratio 0.5, T 8) | {t_seed:.4f} | {toks['seeded']} | {ratio:.2f}× |",
        "",
        f"Generated tokens ratio {tok_ratio:.2f}× (theory 1 + (1 − ratio)(T − 1)/T = 1.44× for "
        "equal response lengths); step-time ratio "
        f"{ratio:.2f}× (paper: 1.1–1.2× per step at ratio 0.5, T 8). At this size the step is "
        "dominated by fixed per-call costs (dispatch, host-side batching), so the ratio reflects "
        "the extra sampler calls of each refresh more than extra tokens.",
        END,
    ]
    section = "\n".join(lines)
    print(section)
    if args.no_write:
        return
    text = DOC.read_text() if DOC.exists() else "# Benchmarks\n"
    if BEGIN in text and END in text:
        text = re.sub(re.escape(BEGIN) + r".*?" + re.escape(END), lambda _: section, text,
                      flags=re.S)
    else:
        text = text.rstrip() + "\n\n" + section + "\n"
    DOC.write_text(text)


if __name__ == "__main__":
    main()
