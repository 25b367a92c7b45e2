"""Bit-for-bit check of the training step across code versions (issue 44).

    # run every configs/tiny_*.py for 3 steps with the code of TREE, metrics into OUT/<config>/
    python tools/compare_runs.py run --tree /path/to/old/checkout --out /tmp/runs_old
    python tools/compare_runs.py run --tree . --out /tmp/runs_new
    # every metric the old run wrote must be equal in the new one (time keys aside)
    python tools/compare_runs.py compare /tmp/runs_old /tmp/runs_new [--changed KEY ...]
    # the same for two `tseeds demo` output folders (every run's metrics.jsonl and eval.json)
    python tools/compare_runs.py compare runs/demo_before runs/demo_after

`run` starts `python -m tseeds_jax.cli train` with PYTHONPATH=TREE, so the two trees are
compared on the same machine with the same installed packages. `compare` finds every
metrics.jsonl (and eval.json) under the old folder, prints one line per file and exits 1 when any
old value differs or is missing in the new one; keys named with `--changed` (metrics deliberately
fixed) are reported but not failed. New keys are allowed.
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import re
import subprocess
import sys
import time

# Wall-clock measurements differ from run to run; every other value must be equal.
TIME_KEY = re.compile(r"^time_|tokens_per_second$|_seconds?$|^wall|_s$")


def _configs(tree: str, names: list[str] | None) -> list[str]:
    paths = sorted(glob.glob(os.path.join(tree, "configs", "tiny_*.py")))
    stems = [os.path.splitext(os.path.basename(p))[0] for p in paths]
    if names:
        unknown = sorted(set(names) - set(stems))
        if unknown:
            raise SystemExit(f"--configs: no configs/{unknown[0]}.py in {tree}")
        stems = [s for s in stems if s in names]
    return stems


def run(args) -> int:
    tree = os.path.abspath(args.tree)
    env = dict(os.environ, PYTHONPATH=tree, JAX_PLATFORMS=os.environ.get("JAX_PLATFORMS", "cpu"))
    failed = []
    for name in _configs(tree, args.configs):
        out = os.path.join(os.path.abspath(args.out), name)
        if os.path.exists(os.path.join(out, "metrics.jsonl")) and not args.force:
            print(f"{name}: kept (exists)")
            continue
        cmd = [sys.executable, "-m", "tseeds_jax.cli", "train", "--config",
               os.path.join(tree, "configs", f"{name}.py"), f"--config.steps={args.steps}",
               f"--config.run_dir={out}", *args.override]
        t0 = time.time()
        r = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True)
        print(f"{name}: rc {r.returncode} in {time.time() - t0:.0f} s", flush=True)
        if r.returncode:
            failed.append(name)
            sys.stderr.write(r.stderr[-3000:])
    return 1 if failed else 0


def _rows(path: str) -> dict[int, dict]:
    rows = {}
    with open(path) as f:
        for line in f:
            row = json.loads(line)
            rows[row["step"]] = row
    return rows


def _equal(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    return a == b and type(a) is type(b)


def _flat(obj, prefix=""):
    """{dotted key: leaf} of a JSON document."""
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            out.update(_flat(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: obj}


def _read(path: str) -> dict[str, dict]:
    """{row name: {key: value}}: a metrics.jsonl's rows by step, or an eval.json's values."""
    if path.endswith(".jsonl"):
        return {f"step {row['step']}": row for row in map(json.loads, open(path))}
    with open(path) as f:
        return {"eval": _flat(json.load(f))}


def compare(args) -> int:
    rows = []
    names = sorted(os.path.relpath(os.path.join(d, f), args.old)
                   for d, _, files in os.walk(args.old, followlinks=True) for f in files
                   if f in ("metrics.jsonl", "eval.json"))
    bad = 0
    for name in names:
        new_path = os.path.join(args.new, name)
        if not os.path.exists(new_path):
            print(f"{name}: MISSING in {args.new}")
            bad += 1
            continue
        old, new = _read(os.path.join(args.old, name)), _read(new_path)
        diffs, changed, compared, added = [], [], 0, set()
        for row_name, row in old.items():
            other = new.get(row_name, {})
            added |= set(other) - set(row)
            for key, value in row.items():
                if TIME_KEY.search(key.rpartition(".")[2]):
                    continue
                compared += 1
                if key in other and _equal(value, other[key]):
                    continue
                (changed if key in args.changed else diffs).append(
                    f"{row_name} {key}: {value!r} -> {other.get(key, '<absent>')!r}")
        status = "EQUAL" if not diffs else "DIFFER"
        print(f"{name}: {status} ({compared} values compared over {len(old)} rows"
              + (f"; {len(changed)} in --changed keys" if changed else "")
              + (f"; new keys: {', '.join(sorted(added))}" if added else "") + ")")
        for line in (diffs + changed)[: args.show]:
            print("   ", line)
        bad += bool(diffs)
        rows.append([f"{args.label}{name}", compared, "equal" if not diffs else "differ",
                     ", ".join(sorted(added)) or "—"])
    if args.record:
        _record(args, rows)
    return 1 if bad else 0


def _record(args, rows) -> None:
    """Adds `rows` to the result record at args.record (created when absent)."""
    from tseeds_jax import results_record

    if os.path.exists(args.record):
        rec = results_record.load(args.record)
        rec["table"]["rows"] += rows
        rec["command"] += f"; compare {args.old} {args.new}"
    else:
        name = os.path.splitext(os.path.basename(args.record))[0]
        rec = results_record.make(
            name, args.what, "measured", f"python tools/compare_runs.py compare {args.old} "
            f"{args.new}", backend="cpu",
            table={"columns": ["run file", "values compared (timings aside)", "before vs after",
                               "new keys"], "rows": rows})
    results_record.write(args.record, rec)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--tree", required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--steps", type=int, default=3)
    r.add_argument("--configs", nargs="*")
    r.add_argument("--override", nargs="*", default=[], help="extra --config.a.b=v flags")
    r.add_argument("--force", action="store_true")
    c = sub.add_parser("compare")
    c.add_argument("old")
    c.add_argument("new")
    c.add_argument("--changed", nargs="*", default=[])
    c.add_argument("--show", type=int, default=8)
    c.add_argument("--record", default=None, help="add the result to this record (docs/results)")
    c.add_argument("--label", default="", help="prefix of the record's row names")
    c.add_argument("--what", default="", help="the record's `what` (a new record)")
    args = p.parse_args(argv)
    return run(args) if args.cmd == "run" else compare(args)


if __name__ == "__main__":
    raise SystemExit(main())
