"""Reward throughput: sandboxed code rewards and math rewards per second, 1 vs N worker processes,
and programs per second of the allowlisted bubblewrap sandbox beside the previous (namespace,
denylist) sandbox, run alternately in this one process on the same programs.

Run: python benchmarks/bench_rewards.py [--n 256] [--workers 2] [--sandbox-n 64] [--no-write]
                                       [--baseline CHECKOUT [--rounds 3] [--assert-n 8]]
                                       [--truth CHECKOUT]
Rewrites the `rewards` section of docs/benchmarks.md (command, date, machine, numbers).
--baseline: code rewards/s of another checkout (e.g. the commit before a grading change) and of
this one, measured alternately in fresh processes on the same programs (`--rounds` each), so load
falls on both alike: the mix below, and `--assert-n` correct programs graded on one source of 200
asserts; rewrites the `rewards_grading` section (record `rewards_grading`).
--truth: the grader's test programs (tests/grading_programs: issue 45's set and the held-out set,
each program with the score its task's truth gives it) graded by another checkout and by this one;
counts the wrong programs rewarded and the honest ones refused (record `rewards_truth`).
Code: N short programs (1/4 correct stdin/stdout, 1/4 wrong output, 1/4 runtime error, 1/4 correct
with asserts), two stdin/stdout tests each (all-or-nothing, so failing programs stop after one run).
Math: the answer table of tests/test_rewards_math.py style, cycled to N responses.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

from tseeds_jax import rewards
from tseeds_jax.rewards import sandbox, weak_isolation

ROOT = Path(__file__).resolve().parents[1]
ADD_IO = {"stdin_stdout": [["1 2\n", "3\n"], ["10 -4\n", "6\n"]]}
ADD_ASSERT = {"asserts": "assert add(1, 2) == 3\nassert add(10, -4) == 6"}
PROGRAMS = [
    ("```python\na, b = map(int, input().split())\nprint(a + b)\n```", ADD_IO),
    ("a, b = map(int, input().split())\nprint(a - b)\n", ADD_IO),
    ("a, b = map(int, input().split())\nprint(a + c)\n", ADD_IO),
    ("def add(a, b):\n    return a + b\n", ADD_ASSERT),
]
# one source of 200 asserts (issue 45: one sandbox run per source, where it was one per assert)
ASSERT200 = [("def add(a, b):\n    return a + b\n",
              {"asserts": "\n".join(f"assert add({i}, {i % 7}) == {i + i % 7}" for i in range(200))})]
MATH = [
    ("\\boxed{\\frac{1}{2}}", "0.5"),
    ("\\boxed{\\sqrt{8}}", "2\\sqrt{2}"),
    ("\\boxed{(1, 2]}", "(1,2]"),
    ("The final answer is 12 cm.", "12"),
    ("\\boxed{50\\%}", "0.5"),
    ("\\boxed{3}", "-3"),
    ("\\boxed{\\{3,2,1\\}}", "\\{1,2,3\\}"),
    ("\\boxed{x^2+2x+1}", "(x+1)^2"),
]


def _rate(name, responses, references, workers):
    rewards.score_batch(
        name, responses[: workers * 2], references[: workers * 2], max_workers=workers
    )  # warm
    t0 = time.perf_counter()
    res = rewards.score_batch(name, responses, references, max_workers=workers)
    dt = time.perf_counter() - t0
    return len(responses) / dt, res


def _sandbox_rates(n: int) -> dict[str, float]:
    """Programs/s of each sandbox on the same n programs (stdin/stdout kinds), interleaved in rounds
    of 8 so that load from other jobs falls on both alike. This process is single-threaded."""
    progs = [(r, "1 2\n") for r, _ in PROGRAMS[:3]] + [(PROGRAMS[3][0] + "\n" + ADD_ASSERT["asserts"], "")]
    runners = {"bubblewrap (allowlisted root)": sandbox.run_program,
               "previous (namespaces, denylist)": weak_isolation.run_program}
    spent = dict.fromkeys(runners, 0.0)
    for run in runners.values():  # warm-up: first fork and page-in
        run(*progs[0])
    done = 0
    while done < n:
        batch = [progs[(done + i) % len(progs)] for i in range(min(8, n - done))]
        for name, run in runners.items():
            t0 = time.perf_counter()
            for src, data in batch:
                res = run(src.split("```python\n")[-1].split("```")[0], data)
                assert res.status in ("ok", "exit_nonzero"), (name, res)
            spent[name] += time.perf_counter() - t0
        done += len(batch)
    return {name: n / t for name, t in spent.items()}


# Runs in a fresh interpreter on either checkout: the public API only, the same programs.
_CODE_RATE = """
import json, sys, time
from tseeds_jax import rewards
progs, n, w = json.loads(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
items = [progs[i % len(progs)] for i in range(n)]
resp, refs = [p for p, _ in items], [r for _, r in items]
rewards.score_batch("code", resp[: 2 * w], refs[: 2 * w], max_workers=w)  # warm
t0 = time.perf_counter()
res = rewards.score_batch("code", resp, refs, max_workers=w)
dt = time.perf_counter() - t0
print(json.dumps({"rate": n / dt, "mean": sum(r.score for r in res) / n}))
"""


def compare(baseline: str, n: int, workers: int, rounds: int, programs=None) -> dict[str, list[float]]:
    """Code rewards/s of `baseline` and of this checkout on `programs` (default the mix), alternately,
    `rounds` times each; each checkout must grade them alike (the same mean score)."""
    rates: dict[str, list[float]] = {"baseline": [], "this": []}
    means: dict[str, set] = {"baseline": set(), "this": set()}
    for _ in range(rounds):
        for name, path in (("baseline", baseline), ("this", str(ROOT))):
            # cwd elsewhere: `python -m` workers put the working directory first on sys.path
            cmd = [sys.executable, "-c", _CODE_RATE, json.dumps(programs or PROGRAMS), str(n), str(workers)]
            out = subprocess.run(cmd,
                                 cwd="/", env=dict(os.environ, PYTHONPATH=path), capture_output=True,
                                 text=True, timeout=1800, check=True)
            got = json.loads(out.stdout.strip().splitlines()[-1])
            rates[name].append(got["rate"])
            means[name].add(round(got["mean"], 6))
            print(f"code rewards/s {name} ({path}): {got['rate']:.1f} (mean score {got['mean']:.3f})")
    if means["baseline"] != means["this"]:
        raise RuntimeError(f"the checkouts grade the programs differently: {means}")
    return rates


# Runs in a fresh interpreter on either checkout (tseeds_jax from it, the programs from this one).
_TRUTH = """
import json, sys
from tseeds_jax import rewards
from tests.grading_programs import heldout, issue45
out = {}
for name, cases in (("issue45", issue45.cases()), ("heldout", heldout.cases())):
    wrong = honest = 0
    for opts in sorted({json.dumps(c[3], sort_keys=True) for c in cases}):
        picked = [c for c in cases if json.dumps(c[3], sort_keys=True) == opts]
        res = rewards.score_batch("code", [c[1] for c in picked], [c[2] for c in picked], max_workers=2,
                                  **json.loads(opts))
        wrong += sum(c[4] == 0 and r.score != 0 for c, r in zip(picked, res))
        honest += sum(c[4] == 1 and r.score != 1 for c, r in zip(picked, res))
    out[name] = [len(cases), wrong, honest]
print(json.dumps(out))
"""


def truth_main(args) -> int:
    """Wrong programs rewarded and honest ones refused, by another checkout and by this one."""
    from tseeds_jax import results_record

    cmd = f"python benchmarks/bench_rewards.py --truth {args.truth}"
    got = {}
    for side, path in (("before", args.truth), ("after", str(ROOT))):
        pythonpath = os.pathsep.join(dict.fromkeys([path, str(ROOT)]))  # tseeds_jax from `path` first
        out = subprocess.run([sys.executable, "-c", _TRUTH], cwd="/", capture_output=True, text=True,
                             env=dict(os.environ, PYTHONPATH=pythonpath), timeout=3600, check=True)
        got[side] = json.loads(out.stdout.strip().splitlines()[-1])
        print(side, path, got[side])
    commits = {"before": results_record.git_commit(args.truth), "after": results_record.git_commit()}
    labels = {"issue45": "issue 45's tests (tests/grading_programs/issue45.py)",
              "heldout": "the held-out set (tests/grading_programs/heldout.py)"}
    rows, values = [], {}
    for key, label in labels.items():
        for side in ("before", "after"):
            n, wrong, honest = got[side][key]
            rows.append([label, str(n), side, commits[side], str(wrong), str(honest)])
            values[f"{key}_{side}_wrong"] = {"value": wrong, "unit": f"wrong programs rewarded (of {n})"}
            values[f"{key}_{side}_honest"] = {"value": honest, "unit": f"honest programs refused (of {n})"}
        values[f"{key}_programs"] = {"value": n, "unit": "programs"}
    rec = results_record.make(
        "rewards_truth", "the grader's test programs graded against their tasks' truth, by the code before "
        "issue 45 and after it: wrong programs rewarded and honest ones refused (CPU)", "measured", cmd,
        backend="cpu (reward worker processes; bubblewrap sandbox)", values=values,
        table={"columns": ["programs", "count", "grading", "commit", "wrong rewarded", "honest refused"],
               "rows": rows})
    if args.no_write:
        return 0
    import docsection  # noqa: PLC0415  (benchmarks/ is on sys.path when run as a script)

    lines = ["## Code grading against the truth", "",
             f"Command: `{cmd}` — {datetime.date.today().isoformat()}. Each program of the grader's test "
             "sets has the score its task's truth gives it (the honest program 1, a wrong one 0); a run "
             "counts the programs each checkout grades the other way.", "", docsection.table_block(rec)]
    docsection.write_section("rewards_truth", "\n".join(lines), record=rec)
    return 0


def _grading_record(cmd: str, baseline: str, args, results: dict) -> dict:
    """Record `rewards_grading`: rewards/s per round and medians of both checkouts on each mix."""
    from tseeds_jax import results_record

    before = results_record.git_commit(baseline)
    rows, values = [], {}
    for key, (label, n, rates) in results.items():
        med = {k: statistics.median(v) for k, v in rates.items()}
        for side in ("baseline", "this"):
            rows.append([label, str(n), "before" if side == "baseline" else "after",
                         before if side == "baseline" else results_record.git_commit(),
                         ", ".join(f"{r:.2f}" for r in rates[side]), f"{med[side]:.2f}"])
        values[f"{key}_before"] = {"value": round(med["baseline"], 2), "unit": "code rewards/s (median)"}
        values[f"{key}_after"] = {"value": round(med["this"], 2), "unit": "code rewards/s (median)"}
        ratio = med["this"] / med["baseline"]
        values[f"{key}_ratio"] = {"value": round(ratio, 1 if ratio >= 10 else 2), "unit": "x before"}
    return results_record.make(
        "rewards_grading", f"code rewards/s of the grading before ({before}) and after issue 45, "
        f"alternately in fresh processes, {args.workers} reward workers (CPU)", "measured", cmd,
        backend="cpu (reward worker processes; bubblewrap sandbox)", values=values,
        table={"columns": ["programs", "responses", "grading", "commit", "rewards/s per round",
                           "median"], "rows": rows})


def baseline_main(args) -> int:
    cmd = (f"python benchmarks/bench_rewards.py --baseline {args.baseline} --n {args.n} --workers "
           f"{args.workers} --rounds {args.rounds} --assert-n {args.assert_n}")
    mix = compare(args.baseline, args.n, args.workers, args.rounds)
    many = compare(args.baseline, args.assert_n, args.workers, args.rounds, ASSERT200)
    results = {"mix": ("the mix (2 tests each)", args.n, mix),
               "asserts200": ("one source of 200 asserts", args.assert_n, many)}
    for _, (label, _, rates) in results.items():
        med = {k: statistics.median(v) for k, v in rates.items()}
        print(f"{label}: median code rewards/s baseline {med['baseline']:.1f}, this {med['this']:.1f} "
              f"({med['this'] / med['baseline']:.2f}x)")
    if args.no_write:
        return 0
    import docsection  # noqa: PLC0415  (benchmarks/ is on sys.path when run as a script)

    rec = _grading_record(cmd, args.baseline, args, results)
    lines = [
        "## Code grading before and after issue 45",
        "",
        f"Command: `{cmd}` — {datetime.date.today().isoformat()}, {os.cpu_count()} CPU cores visible, "
        f"Python {platform.python_version()}. Each round grades the same programs with the baseline "
        "checkout and with this one, each in a fresh process (warm-up batch excluded).",
        "",
        docsection.table_block(rec),
        "",
        f"The mix: {docsection.fig(rec, 'mix_ratio')}x the rewards/s of before (two sandbox runs per "
        "correct asserts program before, one after). One source of 200 asserts: "
        f"{docsection.fig(rec, 'asserts200_ratio')}x (200 sandbox runs per program before, one after).",
    ]
    print("\n".join(lines))
    docsection.write_section("rewards_grading", "\n".join(lines), record=rec)
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=256)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--sandbox-n", type=int, default=64)
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--baseline", help="another checkout to compare code rewards/s with")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--assert-n", type=int, default=8, help="programs graded on the 200-assert source")
    ap.add_argument("--truth", help="another checkout to grade the grader's test programs with")
    args = ap.parse_args(argv)
    if args.truth:
        return truth_main(args)
    if args.baseline:
        return baseline_main(args)
    sb = _sandbox_rates(args.sandbox_n)
    for name, rate in sb.items():
        print(f"sandbox {name}: {rate:.1f} programs/s")
    code = [PROGRAMS[i % len(PROGRAMS)] for i in range(args.n)]
    math_items = [MATH[i % len(MATH)] for i in range(args.n)]
    rows = []
    for name, items in (("code", code), ("math", math_items)):
        resp, refs = [r for r, _ in items], [g for _, g in items]
        for w in sorted({1, args.workers}):
            rate, res = _rate(name, resp, refs, w)
            m = rewards.summarize(res)
            rows.append(
                (
                    name,
                    w,
                    rate,
                    m["reward/mean"],
                    {k.split("/")[-1]: int(v) for k, v in m.items() if "/reason/" in k},
                )
            )
            print(f"{name:5s} workers={w}: {rate:7.1f} rewards/s  mean={m['reward/mean']:.3f}  {rows[-1][4]}")
    import docsection  # noqa: PLC0415  (benchmarks/ is on sys.path when run as a script)

    iso = rewards.score_result("code", *PROGRAMS[0]).details.get("isolation")
    by = {(n, w): r for n, w, r, _, _ in rows}
    cmd = f"python benchmarks/bench_rewards.py --n {args.n} --workers {args.workers} " \
          f"--sandbox-n {args.sandbox_n}"
    records = _records(cmd, args, rows, by, sb)
    thr, sbx = records
    lines = [
        "## Rewards",
        "",
        f"Command: `{cmd}` — "
        f"{datetime.date.today().isoformat()}, {os.cpu_count()} CPU cores visible, "
        f"Python {platform.python_version()}, sandbox isolation {iso}.",
        "",
        docsection.table_block(thr),
    ]
    if args.workers != 1:
        lines += [
            "",
            f"Speed-up {args.workers} vs 1 worker: code {docsection.fig(thr, 'code_speedup')}x, "
            f"math {docsection.fig(thr, 'math_speedup')}x (shared machine; other jobs may compete).",
        ]
    lines += [
        "",
        f"Sandbox alone, {args.sandbox_n} programs each, one process, sequential, interleaved rounds:",
        "",
        docsection.table_block(sbx),
        "",
        f"Allowlisted vs previous: {docsection.fig(sbx, 'allowlisted_vs_previous')}x the previous "
        "sandbox's programs/s (issue 25 asks for at least 1/1.5 = 0.67x).",
    ]
    lines += [
        "",
        "Code: 1/4 correct (stdin/stdout), 1/4 wrong output, 1/4 runtime error, 1/4 correct (asserts); two "
        "tests each; one sandboxed process per stdin/stdout test, one per assert source. Worker start-up "
        "excluded (warm-up batch).",
    ]
    print("\n".join(lines))
    if not args.no_write:
        docsection.write_section("rewards", "\n".join(lines), records=records)
    return 0


def _records(cmd, args, rows, by, sb):
    """The run's two result records (kind "measured"): the reward table with the speed-ups, and
    the sandbox table with the allowlisted / previous ratio."""
    from tseeds_jax import results_record

    w = args.workers
    cols = ["reward", "responses", "workers", "rewards/s", "mean score", "reasons"]
    table = [[name, str(args.n), str(wk), f"{rate:.1f}", f"{mean:.3f}", str(reasons)]
             for name, wk, rate, mean, reasons in rows]
    values = {}
    if w != 1:
        values = {f"{k}_speedup": {"value": round(by[(k, w)] / by[(k, 1)], 2),
                                   "unit": f"x ({w} vs 1 worker)"} for k in ("code", "math")}
    thr = results_record.make(
        "rewards_throughput", f"code (sandboxed) and math rewards per second, 1 vs {w} reward "
        "worker processes (CPU)", "measured", cmd, backend="cpu (reward worker processes; "
        "bubblewrap sandbox)", values=values, table={"columns": cols, "rows": table})
    new, old = sb.values()
    sbx = results_record.make(
        "sandbox_speed", "programs per second of the allowlisted bubblewrap sandbox and of the "
        "previous (namespaces, denylist) sandbox, alternating rounds in one process (CPU)",
        "measured", cmd, backend="cpu (bubblewrap sandbox)",
        values={"allowlisted_vs_previous": {"value": round(new / old, 2), "unit": "x"}},
        table={"columns": ["sandbox", "programs/s"],
               "rows": [[name, f"{rate:.1f}"] for name, rate in sb.items()]})
    return thr, sbx


if __name__ == "__main__":
    sys.exit(main())
