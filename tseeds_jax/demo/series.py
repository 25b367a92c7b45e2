"""The demo series over bases (issue 46): the tables the README rests on, one run at a time.

    python -m tseeds_jax.demo.series [--bases 5] [--tasks hard,default] [--out runs/bases]
                                     [--records docs/results] [--commit-every 2]

Hard task: DAPO, the ratio rule, `mixture`, `mixture_spread` and the peer restart methods
(prefixrl, questa, fr3e, cure) from every base, 1 training seed per base, DAPO and the ratio
rule 2 (so that their variance splits into between- and within-base parts); default task:
DAPO and the three Thinking Seeds rules, 1 seed per base. Each finished run is added to
RECORDS/demo_<task>_bases.json as it ends (`bases_record`); a re-start resumes from the
records (a lost run folder costs one run, its own). With --commit-every K the records are
committed to the git checkout they live in every K runs, so a lost machine loses at most K.
Runs go in `plan.order`: DAPO and the ratio rule on every base first.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys

from tseeds_jax.rl.methods import registry as method_registry

# "restart": the series also runs every registered restart method (rl/methods/registry.py)
SERIES = {
    "hard": {"methods": ("dapo", "ts_ratio", "ts_mixture", "ts_mixture_spread"), "restart": True,
             "method_seeds": (("dapo", 2), ("ts_ratio", 2))},
    "default": {"methods": ("dapo", "ts_ratio", "ts_mixture", "ts_mixture_spread"),
                "restart": False, "method_seeds": ()},
}


def config(task: str, bases: int, out: str):
    """The DemoConfig of one task's series."""
    import dataclasses

    from tseeds_jax.demo.experiment import DemoConfig, with_task

    if task not in SERIES:
        raise ValueError(f"task {task!r}: unknown; the series has {sorted(SERIES)}")
    if bases < 1:
        raise ValueError(f"bases = {bases}: expected >= 1")
    spec = SERIES[task]
    methods = spec["methods"] + (method_registry.names() if spec["restart"] else ())
    return dataclasses.replace(with_task(DemoConfig(out=os.path.join(out, task)), task),
                               bases=tuple(range(bases)), seeds=(0,), methods=methods,
                               method_seeds=spec["method_seeds"])


def _commit(path: str, message: str) -> None:
    """Commits the record file `path` alone in its git checkout (failures only print)."""
    where = os.path.dirname(os.path.abspath(path))
    res = subprocess.run(["git", "-C", where, "add", os.path.abspath(path)],
                         capture_output=True, text=True)
    if res.returncode == 0:
        res = subprocess.run(["git", "-C", where, "commit", "-q", "-m", message, "--",
                              os.path.abspath(path)], capture_output=True, text=True)
    if res.returncode:
        print(f"[series] git commit of {path} failed: {res.stderr.strip()[:300]}", flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tseeds_jax.demo.series",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--bases", type=int, default=5)
    p.add_argument("--tasks", default="hard,default")
    p.add_argument("--out", default="runs/bases", help="run folders (DIR/<task>/...)")
    p.add_argument("--records", default="docs/results",
                   help="folder of the records demo_<task>_bases.json")
    p.add_argument("--commit-every", type=int, default=0,
                   help="commit the records every K finished runs (0: never)")
    args = p.parse_args(argv)
    from tseeds_jax import results_record
    from tseeds_jax.demo.cli import open_record
    from tseeds_jax.demo.run import run_demo

    command = ("python -m tseeds_jax.demo.series "
               + " ".join(shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:])))
    commit = results_record.git_commit()
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    for task in tasks:
        dc = config(task, args.bases, args.out)
        path = os.path.join(args.records, f"demo_{task}_bases.json")
        record = open_record(path, dc, command.strip(), commit, resume=True)
        done = [0]

        def on_run(method, base, seed, avg, new, path=path, task=task, done=done):
            print(f"[series] {task} {method} base {base} seed {seed}: {100 * avg:.2f}%"
                  + ("" if new else " (kept)"), flush=True)
            if not new:
                return
            done[0] += 1
            if args.commit_every and done[0] % args.commit_every == 0:
                _commit(path, f"Issue 46: series record {os.path.basename(path)} "
                              f"({task} {method} base {base} seed {seed})")

        run_demo(dc, command=command.strip(), resume=True, record=record, on_run=on_run)
        if args.commit_every:
            _commit(path, f"Issue 46: series record {os.path.basename(path)} ({task} done)")
        print(f"[series] {task}: every run of the plan is in {path}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
