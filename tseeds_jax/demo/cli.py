"""`tseeds demo [--out DIR] [--quick]`: the embedded default experiment.

Trains a character tokenizer, warm-starts a tiny decoder on worked chain-sum solutions (a base
policy that is right sometimes but not always), then trains on-policy DAPO and Thinking Seeds
(ratio truncation; the adaptive mixture and mixture_spread selectors; with --methods also the
first adaptive rule, entropy truncation, the mini-batched DAPO baseline and the peer restart
methods prefixrl, questa, fr3e, cure: docs/restart_methods.md) from that base for
3 training seeds (--seeds N; 5 take ~29 min on an idle 2-core machine), on the default or the
hard task (--task), evaluates everything on held-out problems (avg@n, pass@k, relay inference)
and writes DIR/report.md with plots.
No downloads; everything runs on CPU in one process.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shlex
import sys
import time


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tseeds demo", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="runs/demo", help="output folder (default runs/demo)")
    p.add_argument("--quick", action="store_true",
                   help="a smoke version: 150 SFT steps, one training seed, 8 RL steps per run")
    p.add_argument("--rl-steps", type=int, default=None, help="override RL steps per run")
    p.add_argument("--warm-steps", type=int, default=None, help="override warm-start SFT steps")
    p.add_argument("--seeds", type=int, default=None, help="number of training seeds per method")
    p.add_argument("--task", default="default", choices=("default", "hard"),
                   help="default: chains of 4-5 terms; hard: 8-9 terms, base pass@1 at most 10%%")
    p.add_argument("--resume", action="store_true",
                   help="keep runs under --out that finished with the same settings and base")
    p.add_argument("--record", default=None,
                   help="where to write the run's result record (default DIR/demo_record.json; "
                        "docs/results/ holds the ones the docs print)")
    p.add_argument("--methods", default=None,
                   help="comma-separated methods to run (default dapo,ts_ratio,ts_mixture,"
                        "ts_mixture_spread; also: ts_adaptive, ts_entropy, dapo_minibatch and the "
                        "peer restart methods prefixrl, questa, fr3e, cure)")
    return p


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    from tseeds_jax.demo.experiment import DemoConfig, quick_config, run_demo, with_task
    from tseeds_jax.eval.report import write_report

    dc = quick_config(args.out) if args.quick else DemoConfig(out=args.out)
    dc = with_task(dc, args.task)
    for name, value in (("rl_steps", args.rl_steps), ("seeds", args.seeds),
                        ("warm_steps", args.warm_steps)):
        if value is not None and value < 1:
            print(f"tseeds demo: --{name.replace('_', '-')}={value} must be >= 1", file=sys.stderr)
            return 2
    if args.rl_steps is not None:
        dc = dataclasses.replace(dc, rl_steps=args.rl_steps)
    if args.seeds is not None:
        dc = dataclasses.replace(dc, seeds=tuple(range(args.seeds)))
    if args.warm_steps is not None:
        dc = dataclasses.replace(dc, warm=dataclasses.replace(dc.warm, steps=args.warm_steps))
    if args.methods is not None:
        from tseeds_jax.demo.experiment import method_names

        names = tuple(x.strip() for x in args.methods.split(",") if x.strip())
        bad = [x for x in names if x not in method_names()]
        if bad or not names:
            print(f"tseeds demo: --methods={args.methods!r}: unknown {bad or 'empty list'}; "
                  f"known: {','.join(method_names())}", file=sys.stderr)
            return 2
        dc = dataclasses.replace(dc, methods=names)
    command = "tseeds demo " + " ".join(shlex.quote(a) for a in argv)
    from tseeds_jax import results_record

    load0, cpu0 = results_record.machine()["load_avg"], os.times()
    t0 = time.perf_counter()
    out = run_demo(dc, command=command.strip(), resume=args.resume)
    path = write_report(dc.out)
    wall = time.perf_counter() - t0
    record = _record(dc, command.strip(), out, wall, load0, cpu0,
                     args.record or os.path.join(dc.out, "demo_record.json"))
    print(f"[demo] done in {wall:.0f}s; report: {path}; record: {record}")
    for method, rows in out["results"].items():
        vals = ", ".join(f"{100 * r['avg']:.1f}" for r in rows)
        print(f"[demo]   {method}: held-out pass@1 per seed {vals} "
              f"(base {100 * out['base'].avg:.1f})")
    return 0


def _record(dc, command: str, out, wall_s: float, load0, cpu0, path: str) -> str:
    """The run as a result record (kind "measured"): wall time with the load average at start and
    end and the process's CPU time, since other jobs sharing the cores stretch the wall time;
    the base's and every method's held-out pass@1 per seed."""
    from tseeds_jax import results_record

    cpu1 = os.times()
    info = results_record.machine()
    info["load_avg_start"], info["load_avg_end"] = load0, info.pop("load_avg")
    values = {"wall_s": {"value": round(wall_s, 1), "unit": "s"},
              "cpu_s": {"value": round((cpu1.user + cpu1.system) - (cpu0.user + cpu0.system), 1),
                        "unit": "s (user + system, this process)"},
              "base_pass1": {"value": round(100 * out["base"].avg, 1), "unit": "%"}}
    for method, rows in out["results"].items():
        values[f"{method}_pass1_per_seed"] = {"value": [round(100 * r["avg"], 1) for r in rows],
                                              "unit": "%"}
    name = os.path.splitext(os.path.basename(path))[0]
    rec = results_record.make(
        name, f"tseeds demo (task {dc.task_name}, methods {','.join(dc.methods)}, "
        f"{len(dc.seeds)} training seed(s), {dc.rl_steps} RL steps): wall time and held-out "
        "pass@1", "measured", command, backend="cpu", values=values, machine_info=info)
    return results_record.write(path, rec)
