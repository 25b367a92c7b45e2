"""Synchronous vs asynchronous RL (partial rollouts; a one-step lag; both overlapped with the
update) on a long-tailed task, side by side in one process: wall time for the same steps, tokens,
slot occupancy, held-out pass@1.

    nice -n 5 python benchmarks/bench_async.py --seeds 5 --record

The task: compact chain sums whose term count is drawn from a truncated geometric law (2 terms
most often, 10 rarely), so the worked responses run from about 8 tokens to the cap. One warm
start (SFT) gives the base policy; every run starts from it. "sync": today's step (each sampler
call decodes until its longest response ends). "async": `stale.partial_tokens` per step, the
rest continued as seeds by the next policy, `stale.max_staleness` 1 (rl/rollout/pool.py). "lag":
M2PO's fixed lag of one step (`stale.steps` 1, rl/rollout/lag.py), generation then update;
"lag_overlap": the same batches generated in a worker thread while the learner updates
(`stale.overlap`, rl/rollout/lag.py); "async_overlap": partial rollouts generated one step ahead
during the update (staleness bound 2: the lag takes one). All train the same number of steps of
B prompts x G responses. With `--record`, writes
docs/results/async_bench.json (rendered into docs/async.md by `python -m
tseeds_jax.results_render`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import jax
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tseeds_jax.data.compact_arith import CompactChainSum  # noqa: E402
from tseeds_jax.demo import experiment as ex  # noqa: E402
from tseeds_jax.demo.warmstart import WarmStartConfig, warm_start  # noqa: E402
from tseeds_jax.eval.evaluate import evaluate, reward_score_fn  # noqa: E402
from tseeds_jax.eval.problems import EVAL_SPLIT_SEED, SplitSource, held_out_problems  # noqa: E402

TERMS = tuple(range(2, 11))
DECAY = 0.55  # P(n terms) proportional to DECAY ** (n - 2)


class LongTailChainSum:
    """Chain sums with a long-tailed term count (an indexable example source like
    `CompactChainSum`): example i has n terms, n drawn from [seed, i]."""

    def __init__(self, *, seed: int, size: int = 100000):
        self.seed, self.size = seed, size
        self.parts = {n: CompactChainSum(seed=seed * 100 + n, size=size,
                                         config=dict(min_terms=n, max_terms=n, min_digits=1,
                                                     max_digits=1)) for n in TERMS}
        p = np.array([DECAY ** (n - 2) for n in TERMS])
        self.p = p / p.sum()

    def __len__(self) -> int:
        return self.size

    def _part(self, index: int):
        n = int(np.random.default_rng([self.seed, 0x7A11, int(index)]).choice(TERMS, p=self.p))
        return self.parts[n]

    def __getitem__(self, index: int):
        return self._part(index)[int(index)]

    def solution(self, index: int, **kwargs) -> str:
        return self._part(index).solution(int(index), **kwargs)

    @staticmethod
    def alphabet() -> str:
        return CompactChainSum.alphabet()


METHODS = ("sync", "async", "lag", "lag_overlap", "async_overlap")
COMPILE_EVENTS = "/jax/core/compile/"  # JAX's tracing, lowering and backend-compile durations


class CompileClock:
    """Seconds and count of JAX compilations while it runs (jax.monitoring's duration events:
    tracing, lowering to MLIR, XLA's compile), so that a run's compile time is reported apart
    from its steps. A program the run compiles on a worker thread counts too."""

    def __init__(self):
        self.seconds, self.programs = 0.0, 0
        jax.monitoring.register_event_duration_secs_listener(self._on)

    def _on(self, event: str, duration: float, **_) -> None:
        if event.startswith(COMPILE_EVENTS):
            self.seconds += duration
            self.programs += event.endswith("backend_compile_duration")

    def take(self) -> tuple[float, int]:
        out = (self.seconds, self.programs)
        self.seconds, self.programs = 0.0, 0
        return out


def methods(chunk: int, staleness: int, names=METHODS):
    """sync: today's step; async: partial rollouts; lag: M2PO's fixed lag (batch k + s generated
    at step k, then the update of batch k); lag_overlap: the same batches, generated in a worker
    thread while the learner updates (`stale.overlap`); async_overlap: partial rollouts
    generated one step ahead during the update, staleness bound one higher (the lag uses one)."""
    lag = {"stale.steps": staleness, "optim.old_logp": "recompute"}
    all_ = [ex.Method("sync", "synchronous (today's step)", {}),
            ex.Method("async", f"partial rollouts {chunk} tokens/step, staleness {staleness}",
                      {"stale.partial_tokens": chunk, "stale.max_staleness": staleness}),
            ex.Method("lag", f"fixed lag {staleness}, generation then update", lag),
            ex.Method("lag_overlap", f"fixed lag {staleness}, generation during the update",
                      {**lag, "stale.overlap": True}),
            ex.Method("async_overlap", f"partial rollouts {chunk} tokens/step during the update, "
                      f"staleness {staleness + 1}",
                      {"stale.partial_tokens": chunk, "stale.max_staleness": staleness + 1,
                       "stale.steps": 1, "stale.overlap": True})]
    return [m for m in all_ if m.name in names]


def run(args) -> dict:
    from tseeds_jax.model import init_model
    from tseeds_jax.rl.setup import PromptStream, make_trainer

    dc = ex.DemoConfig(out=args.out, prompt_width=22, response_width=args.response_width,
                       batch_prompts=args.batch_prompts, group_size=args.group_size,
                       rl_steps=args.steps, warm=WarmStartConfig(steps=args.warm_steps,
                                                                 batch_size=32, error_rate=0.15))
    tok, tok_path = ex.train_tokenizer(dc)
    model = init_model(ex.model_config(dc, tok.vocab_size), seed=0)
    t0 = time.perf_counter()
    graphdef, base, _ = warm_start(model, tok, SplitSource(LongTailChainSum(seed=99),
                                                           held_out=False), dc.warm,
                                   prompt_width=dc.prompt_width, response_width=dc.response_width)
    warm_s = time.perf_counter() - t0
    problems = held_out_problems(LongTailChainSum(seed=EVAL_SPLIT_SEED), tok.encode,
                                 args.eval_problems, max_prompt_len=dc.prompt_width)
    kw = dict(decode=lambda ids: tok.decode(ids, skip_special_tokens=True),
              score_fn=reward_score_fn("compact_arith"), max_new_tokens=dc.response_width,
              stop_tokens=tok.stop_ids, max_prefill_length=dc.prompt_width)
    base_eval = evaluate((graphdef, base), problems, n=args.eval_n, seed=7, **kw)
    print(f"[bench_async] warm start {warm_s:.0f}s; base pass@1 {base_eval.avg:.3f}, "
          f"mean length {base_eval.mean_length:.1f}", flush=True)
    out: dict = {"base_pass1": base_eval.avg, "base_mean_length": base_eval.mean_length,
                 "runs": []}
    # Untimed warm-up runs (seed 1000) first: each method's sampler and learner shapes compile
    # once, so that the timed runs compare steps, not compilations.
    ms = methods(args.chunk, args.staleness, args.methods.split(","))
    clock = CompileClock()
    plan = [(1000, m) for m in ms] * bool(args.warmup_runs)
    plan += [(seed, m) for seed in range(args.seeds) for m in ms]
    for seed, m in plan:
        run_dir = os.path.join(dc.out, "runs", m.name, f"seed{seed}")
        cfg, _ = ex.rl_config(dc, tok_path, run_dir, seed, m)
        own = jax.tree_util.tree_map(lambda x: x.copy(), base)
        tr = make_trainer(cfg, env_overrides={"params": own})
        tr.env.prompts = PromptStream(SplitSource(LongTailChainSum(seed=seed),
                                                  held_out=False), tok.encode,
                                      dc.prompt_width, seed=seed)
        clock.take()
        t0 = time.perf_counter()
        hist = tr.run()
        wall = time.perf_counter() - t0
        compile_s, programs = clock.take()
        if seed == 1000:
            print(f"[bench_async] warm-up run {m.name}: {wall:.0f}s", flush=True)
            continue
        res = evaluate((graphdef, tr.state.params), problems, n=args.eval_n, seed=7, **kw)
        step_s = [float(h["time_step"]) for h in hist]
        rec = {"method": m.name, "seed": seed, "wall_s": wall, "compile_s": compile_s,
               "compiled_programs": programs, "wall_less_compile_s": wall - compile_s,
               "steady_step_s": float(np.median(step_s[args.warmup_steps:])),
               "rollout_s": float(np.sum([h["time_rollout"] for h in hist])),
               "learner_s": float(np.sum([h["time_learner"] for h in hist])),
               "generated_tokens": int(sum(h["generated_tokens"] for h in hist)),
               "trained_tokens": int(sum(h["response_length"] * h["num_samples"]
                                         for h in hist)),
               "slot_occupancy": float(np.mean([h["slot_occupancy"] for h in hist])),
               "pass1": res.avg, "reward": float(np.mean([h["reward"] for h in hist]))}
        print(f"[bench_async] {json.dumps(rec)}", flush=True)
        out["runs"].append(rec)
    out["warm_start_s"] = warm_s
    return out


def summary(out: dict, args) -> tuple[dict, dict]:
    rows, values = [], {}
    names = [n for n in METHODS if any(r["method"] == n for r in out["runs"])]
    for name in names:
        rs = [r for r in out["runs"] if r["method"] == name]
        p = np.array([r["pass1"] for r in rs])
        half = 1.96 * p.std(ddof=1) / np.sqrt(len(p)) if len(p) > 1 else float("nan")
        agg = {"wall_s": np.mean([r["wall_s"] for r in rs]),
               "compile_s": np.mean([r["compile_s"] for r in rs]),
               "compiled_programs": np.mean([r["compiled_programs"] for r in rs]),
               "wall_less_compile_s": np.mean([r["wall_less_compile_s"] for r in rs]),
               "steady_step_s": np.mean([r["steady_step_s"] for r in rs]),
               "rollout_s": np.mean([r["rollout_s"] for r in rs]),
               "learner_s": np.mean([r["learner_s"] for r in rs]),
               "generated_tokens": np.mean([r["generated_tokens"] for r in rs]),
               "trained_tokens": np.mean([r["trained_tokens"] for r in rs]),
               "slot_occupancy": np.mean([r["slot_occupancy"] for r in rs]),
               "pass1": p.mean(), "pass1_ci95": half}
        for k, v in agg.items():
            unit = {"wall_s": "s", "steady_step_s": "s", "rollout_s": "s", "learner_s": "s",
                    "compile_s": "s", "wall_less_compile_s": "s", "compiled_programs": "programs",
                    "generated_tokens": "tokens", "trained_tokens": "tokens"}.get(k, "")
            values[f"{name}_{k}"] = {"value": round(float(v), 4), "unit": unit}
        rows.append([name, f"{agg['wall_s']:.1f}",
                     f"{agg['compile_s']:.1f} ({agg['compiled_programs']:.1f})",
                     f"{agg['wall_less_compile_s']:.1f}", f"{agg['steady_step_s']:.2f}",
                     f"{agg['rollout_s']:.1f}", f"{agg['learner_s']:.1f}",
                     f"{agg['generated_tokens']:.0f}",
                     f"{agg['trained_tokens']:.0f}", f"{agg['slot_occupancy']:.2f}",
                     f"{100 * agg['pass1']:.1f} ± {100 * half:.1f}"])
    for name in names[1:]:  # "ratio_<k>" (async / sync) keeps its old name
        for k in ("wall_s", "wall_less_compile_s", "steady_step_s", "rollout_s"):
            key = f"ratio_{k}" if name == "async" else f"ratio_{name}_{k}"
            values[key] = {"value": round(values[f"{name}_{k}"]["value"]
                                          / values[f"sync_{k}"]["value"], 3), "unit": "x"}
    table = {"columns": ["run", "wall s", "compile s (programs)", "wall s less compile",
                         "median step s", "rollout s", "learner s",
                         "tokens decoded", "tokens trained", "slot occupancy",
                         "held-out pass@1 % (95% CI)"], "rows": rows}
    return values, table


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="runs/bench_async")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--warm-steps", type=int, default=150)
    ap.add_argument("--batch-prompts", type=int, default=8)
    ap.add_argument("--group-size", type=int, default=4)
    ap.add_argument("--response-width", type=int, default=64)
    ap.add_argument("--chunk", type=int, default=16)
    ap.add_argument("--staleness", type=int, default=1)
    ap.add_argument("--eval-problems", type=int, default=64)
    ap.add_argument("--eval-n", type=int, default=4)
    ap.add_argument("--warmup-steps", type=int, default=3, help="steps left out of the median")
    ap.add_argument("--warmup-runs", type=int, default=1, help="1: an untimed run per method "
                    "first (compilation)")
    ap.add_argument("--methods", default=",".join(METHODS),
                    help=f"comma-separated runs, sync first ({', '.join(METHODS)})")
    ap.add_argument("--record", action="store_true", help="write docs/results/async_bench.json")
    args = ap.parse_args(argv)
    out = run(args)
    values, table = summary(out, args)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "bench_async.json"), "w") as f:
        json.dump({"args": vars(args), **out, "values": values}, f, indent=1)
    print(json.dumps(values, indent=1))
    if args.record:
        from tseeds_jax import results_record

        cmd = "nice -n 5 python benchmarks/bench_async.py " + " ".join(argv or sys.argv[1:])
        rec = results_record.make(
            "async_bench", "sync vs async (partial rollouts; a lag of one step; each with the "
            "generation overlapped with the update) on a long-tailed chain-sum task, same steps, "
            "one process", "measured", cmd, backend="cpu",
            values=values, table=table,
            note=(f"{args.seeds} training seeds x {args.steps} steps of {args.batch_prompts} "
                  f"prompts x {args.group_size}, after one untimed warm-up run per method "
                  f"(compilation) when warmup_runs=1 (here {args.warmup_runs}); base policy: "
                  f"{args.warm_steps} SFT steps, "
                  f"held-out pass@1 {100 * out['base_pass1']:.1f}% over {args.eval_problems} "
                  f"problems x {args.eval_n} samples; the 2-core machine was shared with other "
                  "sessions' work (load average in machine)."))
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        print(results_record.write(os.path.join(root, "docs", "results", "async_bench.json"),
                                   rec))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
