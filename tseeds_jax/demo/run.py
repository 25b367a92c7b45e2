"""The demo's phases: tokenizer, one warm start per base, the RL runs of the plan, relay.

`run_demo` keeps finished runs on `resume` (from a record of the series, `bases_record`, or
from run folders of the same identity) and calls `on_base`/`on_run` as each base and run
finishes, so a caller can record them at once.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable
from typing import Any

from tseeds_jax.data.compact_arith import CompactChainSum
from tseeds_jax.demo import plan, reference
from tseeds_jax.demo.experiment import (
    DemoConfig,
    Evaluator,
    _finished,
    _write_json,
    default_methods,
    method_names,
    model_config,
    run_identity,
    run_one,
    save_base,
    train_tokenizer,
)
from tseeds_jax.demo.warmstart import SplitSource, warm_start
from tseeds_jax.eval.bases_table import BASELINE  # the method every report compares with


def make_base(dc: DemoConfig, tok, tok_path: str, evaluator: Evaluator, base: int, log=print):
    """Warm-starts base `base` (`plan.base_seeds`), evaluates it and saves its folder.
    Returns {"model", "params", "eval", "greedy", "info", "seconds"}."""
    from tqdm.auto import tqdm

    from tseeds_jax.model import init_model

    seeds = plan.base_seeds(base, dc.warm.seed)
    t0 = time.perf_counter()
    model = init_model(model_config(dc, tok.vocab_size), seed=seeds["init"])
    src = SplitSource(CompactChainSum(seed=seeds["source"], size=100000, config=dc.task_params),
                      held_out=False)
    with tqdm(total=dc.warm.steps, desc=f"warm start (SFT), base {base}", unit="step") as bar:
        def warm_progress(done, total, loss):
            bar.update(done - bar.n)
            bar.set_postfix(loss=f"{loss:.3f}")

        graphdef, params, winfo = warm_start(
            model, tok, src, dataclasses.replace(dc.warm, seed=seeds["warm"]),
            prompt_width=dc.prompt_width, response_width=dc.response_width,
            progress=warm_progress)
    base_eval = evaluator.final((graphdef, params), seed=7)
    greedy = evaluator.final((graphdef, params), temperature=0.0)
    # The RL learner expects the trainer's params structure: reuse the split state directly.
    bdir = save_base(dc, tok_path, params, base)
    _write_json(os.path.join(bdir, "eval.json"), base_eval.to_json())
    _write_json(os.path.join(bdir, "eval_greedy.json"), greedy.to_json())
    log(f"[demo] base {base}: sampled pass@1 {100 * base_eval.avg:.1f}%, greedy "
        f"{100 * greedy.avg:.1f}%, mean response {base_eval.mean_length:.1f} tokens "
        f"(warm start {winfo['steps']} steps, {winfo['seconds']:.0f}s)")
    return {"model": (graphdef, params), "params": params, "eval": base_eval, "greedy": greedy,
            "info": winfo, "seconds": time.perf_counter() - t0}


def run_demo(dc: DemoConfig, *, command: str = "", log=print, resume: bool = False,
             record=None, on_run: Callable | None = None) -> dict[str, Any]:
    """All phases; returns {"timings", "base", "bases", "results"} and writes DIR/demo.json.

    `resume`: keep every run that finished before: one in `record` (a `bases_record.BasesRecord`,
    whose base must reproduce its recorded pass@1), or a run folder of the same identity
    (`run_identity`: same settings, method, base and base pass@1). A base whose runs are all
    kept from the record is not warmed again. `record`: each finished base and run is added to
    it as it ends. `on_run(method, base, seed, pass1, new)`: called after each run, kept (new
    False) or made now.
    results: {method: [{"base", "seed", "avg"}]} in plan order."""
    from tqdm.auto import tqdm

    unknown = sorted(set(dc.methods) - set(method_names()))
    if unknown:
        raise ValueError(f"DemoConfig.methods: unknown {unknown}; known: {method_names()}")
    t_all = time.perf_counter()
    timings: dict[str, float] = {"warm_start": 0.0}
    os.makedirs(dc.out, exist_ok=True)
    tok, tok_path = train_tokenizer(dc)
    mcfg = model_config(dc, tok.vocab_size)
    log(f"[demo] tokenizer: {tok.vocab_size} ids; model: {mcfg.num_params / 1e6:.2f}M params, "
        f"{dc.num_layers} layers x {dc.hidden_size}; bases {list(dc.bases)}")
    evaluator = Evaluator(dc, tok)
    methods = [m for m in default_methods() if m.name in dc.methods]
    by_name = {m.name: m for m in methods}
    runs = plan.order([m.name for m in methods], dc.bases, dc.seeds, dict(dc.method_seeds),
                      dc.minibatch_seeds)
    in_record = {r for r in runs if resume and record is not None and record.has(*r) is not None}
    bases: dict[int, dict] = {}

    def base_of(b: int) -> dict:
        if b not in bases:
            got = make_base(dc, tok, tok_path, evaluator, b, log=lambda x: tqdm.write(x))
            timings["warm_start"] += got["seconds"]
            if record is not None:
                record.add_base(b, got["eval"].avg, got["greedy"].avg)
            bases[b] = got
        return bases[b]

    for b in dc.bases:  # every base that still has a run to make, before any run
        if any(r[1] == b and r not in in_record for r in runs):
            base_of(b)
    results: dict[str, list[dict]] = {}
    t0 = time.perf_counter()
    first_dapo = None
    with tqdm(total=len(runs) * dc.rl_steps, desc="RL runs", unit="step") as bar:
        for name, b, seed in runs:
            method = by_name[name]
            new = False
            if (name, b, seed) in in_record:
                avg = record.has(name, b, seed) / 100
                tqdm.write(f"[demo] {method.label} base {b} seed {seed}: kept from the record "
                           f"(held-out pass@1 {100 * avg:.1f}%)")
                bar.update(dc.rl_steps)
            else:
                base = base_of(b)
                identity = run_identity(dc, method, base["eval"].avg, b)
                rdir = plan.run_dir(dc.out, name, b, seed)
                kept = _finished(rdir, identity) if resume else None
                if kept is not None:
                    avg, secs = kept["avg_at_n"], kept.get("train_seconds")
                    tqdm.write(f"[demo] {method.label} base {b} seed {seed}: kept (held-out "
                               f"pass@1 {100 * avg:.1f}%)")
                    bar.update(dc.rl_steps)
                else:
                    t_run = time.perf_counter()
                    r = run_one(dc, tok_path, base["params"], method, seed, evaluator, bar,
                                identity, base=b, base_graphdef=base["model"][0])
                    avg, secs, new = r["final"].avg, time.perf_counter() - t_run, True
                    tqdm.write(f"[demo] {method.label} base {b} seed {seed}: held-out pass@1 "
                               f"{100 * avg:.1f}% ({secs:.0f}s)")
                    if name == BASELINE and b == dc.bases[0] and first_dapo is None:
                        first_dapo = r
                if record is not None:
                    record.add_run(name, b, seed, avg, rdir, secs)
            results.setdefault(name, []).append({"base": b, "seed": seed, "avg": avg})
            if on_run is not None:
                on_run(name, b, seed, avg, new)
    timings["rl"] = time.perf_counter() - t0

    relay_base = dc.bases[0]
    if first_dapo is not None and relay_base in bases:
        t0 = time.perf_counter()
        final_model = (first_dapo["graphdef"], first_dapo["params"])
        base = bases[relay_base]
        relay = {"early": os.path.relpath(plan.base_dir(dc.out, relay_base), dc.out),
                 "final": os.path.relpath(first_dapo["run_dir"], dc.out),
                 "ratio": dc.relay_ratio,
                 "single": evaluator.final(final_model, seed=11).to_json(),
                 "early_single": base["eval"].to_json(),
                 "relay": evaluator.relay(base["model"], final_model, seed=11).to_json()}
        _write_json(os.path.join(dc.out, "relay.json"), relay)
        timings["relay"] = time.perf_counter() - t0
    timings["total"] = time.perf_counter() - t_all
    _write_json(os.path.join(dc.out, "demo.json"), _demo_json(dc, command, methods, mcfg, tok,
                                                              bases, timings))
    return {"timings": timings, "bases": {b: x["eval"] for b, x in bases.items()},
            "base": bases[min(bases)]["eval"] if bases else None,
            "greedy": bases[min(bases)]["greedy"] if bases else None, "results": results}


def _demo_json(dc, command, methods, mcfg, tok, bases, timings) -> dict:
    names = [m.name for m in methods]
    winfo = next(iter(bases.values()))["info"] if bases else {"steps": dc.warm.steps}
    seeds = {m: list(plan.seeds_of(m, dc.seeds, dict(dc.method_seeds), dc.minibatch_seeds))
             for m in names}
    return {
        "command": command, "task": dc.task_name, "methods": names, "baseline": BASELINE,
        "fair_baseline": "dapo_minibatch", "bases": list(dc.bases), "seeds": seeds,
        # the recorded 5-seed values are of base 0 on one CPU: a run over several bases, or on
        # another CPU, is compared only within itself
        "reference": reference.for_run(dc.task_name, names, dc.rl_steps, bases=dc.bases),
        "timings": timings,
        "setup": {
            "task": f"compact chain sums {dc.task_params}, held-out split by prompt hash",
            "model": f"Qwen2-style decoder, {dc.num_layers} layers x {dc.hidden_size}, "
                     f"{mcfg.num_params / 1e6:.2f}M parameters, character tokenizer "
                     f"({tok.vocab_size} ids)",
            "warm start": f"{winfo['steps']} SFT steps x {dc.warm.batch_size} sequences on "
                          f"worked solutions with step-error rate {dc.warm.error_rate}, once "
                          f"per base: bases {list(dc.bases)} (base b: model init seed b, "
                          f"demonstration seed {dc.warm.seed} + b)",
            "RL": f"{dc.rl_steps} steps x {dc.batch_prompts} prompts x {dc.group_size} "
                  f"samples per run, AdamW lr {dc.lr}, trained parameters: "
                  f"{'final norm + output head' if dc.train_layers == 'head' else 'all'}, "
                  f"every method from every base, training seeds per base "
                  f"{_seed_text(seeds)}; overrides {dict(dc.rl_overrides)}",
            "evaluation": f"{dc.eval_problems} held-out problems x {dc.eval_n} samples at "
                          f"temperature {dc.temperature} (final; the bases and every run "
                          f"use the same problems and the same per-sample sampler seeds, "
                          f"so their differences are paired); curves: "
                          f"{dc.curve_problems} x {dc.curve_n} (sampler seed 1000 + step)",
        }}


def _seed_text(seeds: dict[str, list[int]]) -> str:
    distinct = {tuple(v) for v in seeds.values()}
    if len(distinct) == 1:
        return str(list(distinct.pop()))
    return ", ".join(f"{m} {v}" for m, v in seeds.items())
