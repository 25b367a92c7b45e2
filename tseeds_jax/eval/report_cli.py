"""`tseeds report RUN_DIR [--out FILE]`: markdown report with PNG plots for a folder of runs.

Any folder below RUN_DIR with a `method.json` is a run; runs are grouped by its "method" field, so
any set of methods (on-policy, Thinking Seeds, other loss-family configs) can be compared.
"""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="tseeds report", description=__doc__)
    p.add_argument("run_dir", help="a demo output folder or any folder containing run folders")
    p.add_argument("--out", default=None, help="report path (default RUN_DIR/report.md)")
    args = p.parse_args(argv)
    from tseeds_jax.eval.report import write_report

    try:
        path = write_report(args.run_dir, out=args.out)
    except (FileNotFoundError, ValueError) as e:
        print(f"tseeds report: {e}", file=sys.stderr)
        return 2
    print(f"report: {path}")
    return 0
