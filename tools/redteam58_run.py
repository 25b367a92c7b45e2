"""Run the red-team corpus (tests/grading_programs/redteam58.py) through the grader ("code") and the
plain judge ("code_judge"), as this user and (when root) as a throw-away non-root user.

    cd /work/wt-54rt && PYTHONPATH=$PWD nice -n 10 python tools/redteam58_run.py [--only PREFIX] [--out F]

`python -m tools.redteam58_run '{"only": "r1"}'` is the inner runner (prints one JSON line)."""

from __future__ import annotations

import argparse
import json
import os
import sys


def _pick(only: str | None):
    from tests.grading_programs import redteam58

    return [c for c in redteam58.cases() if not only or any(c[0].startswith(p) for p in only.split(","))]


def inner(ctx: dict) -> dict:
    from tests.contract import run_both
    from tseeds_jax.rewards import _pool

    cases = _pick(ctx.get("only"))
    scores = run_both([c[:5] for c in cases], max_workers=2)
    _pool.restart_shared(None)
    return {"uid": os.getuid(), "scores": scores}


def verdict(case, s) -> str:
    name, _, _, _, truth, cls, form, kind = case
    g, reason, note, tamper, j, jstatus = s
    if kind == "honest":
        return "ok" if g == 1.0 else "HONEST_REFUSED"
    if g == 1.0:
        return "TAMPER_UNDETECTED" if kind == "tamper" else "WRONG_REWARDED"
    if kind == "tamper" and reason != "tampering":
        return "ok (0, not labelled tampering)"
    return "ok"


# refusals of honest programs that docs/sandbox.md documents (at 2fddd87): "Not crossing: a function or
# lambda of the test passed to the program, arithmetic on handles"; extraction of ```python / py /
# python3 blocks, the last one that defines a name the tests call
DOCUMENTED = {"r7_lambda_arg", "r7_handle_arith", "r11_fence_untagged", "r11_tilde_fence", "r11_split_blocks"}


def summary(rows, whos) -> None:
    import collections

    agg = collections.OrderedDict()
    for r in rows:
        a = agg.setdefault(r["class"], collections.Counter())
        a["programs"] += 1
        for w in whos:
            v, g, j = r[w]["verdict"], r[w]["grader"], r[w]["judge"]
            a[f"{w} wrong rewarded"] += v == "WRONG_REWARDED"
            a[f"{w} tamper undetected"] += v == "TAMPER_UNDETECTED"
            a[f"{w} honest refused"] += v == "HONEST_REFUSED"
            a[f"{w} honest refused (documented)"] += v == "HONEST_REFUSED" and r["name"] in DOCUMENTED
            a[f"{w} more lenient than judge (A)"] += g > j
            a[f"{w} stricter than judge on honest (B)"] += r["kind"] == "honest" and g < j
    print("\nclass | " + " | ".join(k for k in next(iter(agg.values()))))
    for c, a in agg.items():
        print(c, "|", " | ".join(str(v) for v in a.values()))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default=None)
    ap.add_argument("--out", default="redteam58_results.json")
    ap.add_argument("--no-user", action="store_true")
    a = ap.parse_args()
    from tests.sandbox_utils import run_runner, system_user

    runs = {"root" if os.geteuid() == 0 else f"uid{os.getuid()}": inner({"only": a.only})}
    if os.geteuid() == 0 and not a.no_user:
        with system_user(f"rt58{os.getpid() % 10000}") as pw:
            runs["nonroot"] = run_runner("tools.redteam58_run", {"only": a.only}, pw, timeout=1800)
    cases = _pick(a.only)
    rows = []
    for c in cases:
        row = {"name": c[0], "class": c[5], "form": c[6], "kind": c[7]}
        for who, out in runs.items():
            s = out["scores"][c[0]]
            row[who] = {"grader": s[0], "reason": s[1], "note": s[2], "tampering": s[3],
                        "judge": s[4], "judge_status": s[5], "verdict": verdict(c, s)}
        rows.append(row)
    with open(a.out, "w") as f:
        json.dump(rows, f, indent=1)
    for r in rows:
        cols = [f"{who}: g={r[who]['grader']} ({r[who]['reason']}) j={r[who]['judge']} {r[who]['verdict']}"
                for who in runs]
        print(f"{r['name']:<40} {r['kind']:<7} " + " | ".join(cols))
        bad = [who for who in runs if not r[who]["verdict"].startswith("ok")]
        if bad:
            w = (bad or list(runs))[0]
            print("    note:", r[w]["note"][-200:].replace("\n", " "), "| tampering:", r[w]["tampering"])
    summary(rows, list(runs))


if __name__ == "__main__":
    if len(sys.argv) == 2 and sys.argv[1].startswith("{"):
        print(json.dumps(inner(json.loads(sys.argv[1]))))
    else:
        main()
