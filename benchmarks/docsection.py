"""Rewrites one benchmark's own section of docs/benchmarks.md, delimited by
`<!-- BEGIN name -->` / `<!-- END name -->`; the other scripts' sections are left as they are.
With a result record (`tseeds_jax.results_record.make`), the record is written to
docs/results/NAME.json first and `table_block(record)` puts its table into the section between
the markers `tseeds_jax.results_render` re-renders from it (tests/test_doc_numbers.py).
Imported by the scripts in this folder (they run as `python benchmarks/NAME.py`)."""

from __future__ import annotations

import os
import re

DOC = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "docs", "benchmarks.md")
RESULTS = os.path.join(os.path.dirname(DOC), "results")


def table_block(record: dict) -> str:
    """The record's table with its provenance line, between `table:NAME` markers."""
    from tseeds_jax.results_render import render_table

    name = record["name"]
    return (f"<!-- BEGIN table:{name} -->\n{render_table(record)}<!-- END table:{name} -->")


def write_section(name: str, body: str, path: str = DOC, record: dict | None = None) -> None:
    if record is not None:
        from tseeds_jax import results_record

        results_record.write(os.path.join(os.path.dirname(os.path.abspath(path)), "results",
                                          f"{record['name']}.json"), record)
    begin, end = f"<!-- BEGIN {name} -->", f"<!-- END {name} -->"
    block = f"{begin}\n{body.rstrip()}\n{end}"
    text = open(path).read() if os.path.exists(path) else "# Benchmarks\n"
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.S)
    if pattern.search(text):
        text = pattern.sub(lambda _: block, text)
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    with open(path, "w") as f:
        f.write(text)
