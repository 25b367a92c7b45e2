"""`tseeds demo [--out DIR] [--bases N] [--seeds M] [--quick]`: the embedded default experiment.

Trains a character tokenizer, warm-starts a tiny decoder on worked chain-sum solutions (a base
policy that is right sometimes but not always) once per base (--bases N: N warm starts with
their own seeds; base 0 is the demo's one-base warm start), then trains on-policy DAPO and
Thinking Seeds (ratio truncation; the adaptive mixture and mixture_spread selectors; with
--methods also the first adaptive rule, entropy truncation, the mini-batched DAPO baseline and
the peer restart methods prefixrl, questa, fr3e, cure: docs/restart_methods.md; with --lora
also LoRA DAPO and LoRA Thinking Seeds beside their full-parameter runs) from every base
for M training seeds each (default: 3 bases x 1 seed, ~20 min on an idle 2-core machine), on
the default or the hard task (--task), evaluates everything on held-out problems (avg@n,
pass@k, relay inference) and writes DIR/report.md with plots. Comparisons with DAPO are paired
within a base and tested across bases. Each finished run is added to the result record
(--record) at once; --resume continues from it.
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
                   help="a smoke version: one base, 150 SFT steps, one training seed, 8 RL steps "
                        "per run")
    p.add_argument("--rl-steps", type=int, default=None, help="override RL steps per run")
    p.add_argument("--warm-steps", type=int, default=None, help="override warm-start SFT steps")
    p.add_argument("--bases", type=int, default=None,
                   help="number of base policies (warm starts with their own seeds, bases "
                        "0..N-1; every method trains from every base; default 3, --quick 1)")
    p.add_argument("--seeds", type=int, default=None,
                   help="number of training seeds per method and base (default 1)")
    p.add_argument("--method-seeds", default=None,
                   help="per-method training seeds per base where they differ from --seeds, "
                        "e.g. dapo=2,ts_ratio=2")
    p.add_argument("--task", default="default", choices=("default", "hard"),
                   help="default: chains of 4-5 terms; hard: 8-9 terms, base pass@1 at most 10%%")
    p.add_argument("--resume", action="store_true",
                   help="keep the runs in the record (--record) and the run folders under --out "
                        "that finished with the same settings and base")
    p.add_argument("--record", default=None,
                   help="the result record, written after every finished run (default "
                        "DIR/demo_record.json; docs/results/ holds the ones the docs print)")
    p.add_argument("--methods", default=None,
                   help="comma-separated methods to run (default dapo,ts_ratio,ts_mixture,"
                        "ts_mixture_spread; also: ts_adaptive, ts_entropy, dapo_minibatch and the "
                        "peer restart methods prefixrl, questa, fr3e, cure; LoRA: dapo_lora, "
                        "ts_ratio_lora)")
    p.add_argument("--lora", action="store_true",
                   help="also run the LoRA variant (rank-8 adapters on a frozen base, "
                        "docs/lora.md) of each chosen method that has one (dapo -> dapo_lora, "
                        "ts_ratio -> ts_ratio_lora), beside its full-parameter run")
    return p


def _err(msg: str) -> int:
    print(f"tseeds demo: {msg}", file=sys.stderr)
    return 2


def configure(args):
    """(DemoConfig, None) from parsed arguments, or (None, error message)."""
    from tseeds_jax.demo.experiment import DemoConfig, method_names, quick_config, with_task

    dc = quick_config(args.out) if args.quick else DemoConfig(out=args.out)
    dc = with_task(dc, args.task)
    for name in ("rl_steps", "seeds", "warm_steps", "bases"):
        value = getattr(args, name)
        if value is not None and value < 1:
            return None, f"--{name.replace('_', '-')}={value} must be >= 1"
    if args.rl_steps is not None:
        dc = dataclasses.replace(dc, rl_steps=args.rl_steps)
    if args.seeds is not None:
        dc = dataclasses.replace(dc, seeds=tuple(range(args.seeds)))
    if args.bases is not None:
        dc = dataclasses.replace(dc, bases=tuple(range(args.bases)))
    if args.warm_steps is not None:
        dc = dataclasses.replace(dc, warm=dataclasses.replace(dc.warm, steps=args.warm_steps))
    if args.methods is not None:
        names = tuple(x.strip() for x in args.methods.split(",") if x.strip())
        bad = [x for x in names if x not in method_names()]
        if bad or not names:
            return None, (f"--methods={args.methods!r}: unknown {bad or 'empty list'}; "
                          f"known: {','.join(method_names())}")
        dc = dataclasses.replace(dc, methods=names)
    if args.lora:
        from tseeds_jax.demo.experiment import LORA_OF

        extra = tuple(LORA_OF[m] for m in dc.methods if m in LORA_OF
                      and LORA_OF[m] not in dc.methods)
        if not extra and not any(m in LORA_OF.values() for m in dc.methods):
            return None, (f"--lora: none of the methods {','.join(dc.methods)} has a LoRA "
                          f"variant (those with one: {','.join(LORA_OF)})")
        dc = dataclasses.replace(dc, methods=dc.methods + extra)
    if args.method_seeds is not None:
        pairs = []
        for item in (x.strip() for x in args.method_seeds.split(",") if x.strip()):
            name, _, count = item.partition("=")
            if name not in dc.methods or not count.isdigit() or int(count) < 1:
                return None, (f"--method-seeds={args.method_seeds!r}: {item!r} is not "
                              f"METHOD=COUNT with a method of {','.join(dc.methods)} and a "
                              "count >= 1")
            pairs.append((name, int(count)))
        dc = dataclasses.replace(dc, method_seeds=tuple(pairs))
    return dc, None


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    dc, err = configure(args)
    if err:
        return _err(err)
    from tseeds_jax import results_record
    from tseeds_jax.demo.run import run_demo
    from tseeds_jax.eval.report import write_report

    command = ("tseeds demo " + " ".join(shlex.quote(a) for a in argv)).strip()
    path = args.record or os.path.join(dc.out, "demo_record.json")
    record = open_record(path, dc, command, results_record.git_commit(), args.resume)
    load0, cpu0 = results_record.machine()["load_avg"], os.times()
    t0 = time.perf_counter()
    out = run_demo(dc, command=command, resume=args.resume, record=record)
    report = write_report(dc.out)
    wall = time.perf_counter() - t0
    cpu1 = os.times()
    record.set_value("wall_s", round(wall, 1), "s, this invocation (kept runs cost nothing)")
    record.set_value("cpu_s", round((cpu1.user + cpu1.system) - (cpu0.user + cpu0.system), 1),
                     "s (user + system, this process)")
    record.set_value("load_avg", {"start": load0, "end": results_record.machine()["load_avg"]},
                     "1/5/15-minute load averages at start and end of this invocation")
    print(f"[demo] done in {wall:.0f}s; report: {report}; record: {path}")
    for method, rows in out["results"].items():
        vals = ", ".join(f"b{r['base']}s{r['seed']} {100 * r['avg']:.1f}" for r in rows)
        print(f"[demo]   {method}: held-out pass@1 {vals}")
    return 0


def open_record(path: str, dc, command: str, commit: str | None, resume: bool):
    """The demo's BasesRecord at `path` (resumed when `resume`)."""
    from tseeds_jax.demo.bases_record import BasesRecord
    from tseeds_jax.demo.experiment import settings

    what = (f"tseeds demo (task {dc.task_name}, methods {','.join(dc.methods)}, bases "
            f"{len(dc.bases)}, training seeds {len(dc.seeds)} per base"
            + (f" ({', '.join(f'{m} {n}' for m, n in dc.method_seeds)})" if dc.method_seeds
               else "") + f", {dc.rl_steps} RL steps): held-out pass@1 per method, base and "
            "training seed, written as each run finished")
    return BasesRecord.open(path, name_what=what, command=command, settings=settings(dc),
                            methods=list(dc.methods), bases=max(dc.bases) + 1, commit=commit,
                            resume=resume)
