"""Rewrites one benchmark's own section of docs/benchmarks.md, delimited by
`<!-- BEGIN name -->` / `<!-- END name -->`; the other scripts' sections are left as they are.
With a result record (`tseeds_jax.results_record.make`), the record is written to
docs/results/NAME.json first and `table_block(record)` puts its table into the section between
the markers `tseeds_jax.results_render` re-renders from it (tests/test_doc_numbers.py);
`fig(record, key)` does the same for one figure in the section's prose.
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


def _cells(line: str) -> list[str]:
    return [c.strip() for c in re.split(r"(?<!\\)\|", line.strip()[1:-1])]  # "\|" stays in a cell


def record_tables(body: str, names: list[tuple[str, str]], kind: str, command: str,
                  backend: str, values: dict | None = None) -> tuple[str, list[dict]]:
    """Moves the markdown tables of a benchmark's section text into result records: the i-th
    table becomes record `names[i] = (name, what)` (the first also gets `values`) and is
    replaced in `body` by `table_block(record)`. Returns (new body, records). For scripts that
    print their tables as text; the numbers are the ones the script printed."""
    from tseeds_jax import results_record

    lines, out, records, i = body.split("\n"), [], [], 0
    while i < len(lines):
        is_table = (lines[i].startswith("|") and i + 1 < len(lines)
                    and set(lines[i + 1].replace("|", "").replace(":", "").strip()) == {"-"})
        if not is_table:
            out.append(lines[i])
            i += 1
            continue
        j = i + 2
        while j < len(lines) and lines[j].startswith("|"):
            j += 1
        if len(records) >= len(names):
            raise ValueError(f"{command}: more tables than record names {names}")
        name, what = names[len(records)]
        rec = results_record.make(
            name, what, kind, command, backend=backend,
            values=values if not records else None,
            table={"columns": _cells(lines[i]), "rows": [_cells(x) for x in lines[i + 2:j]]})
        records.append(rec)
        out.append(table_block(rec))
        i = j
    if len(records) != len(names):
        raise ValueError(f"{command}: {len(records)} tables for record names {names}")
    return "\n".join(out), records


def fig(record: dict, key: str) -> str:
    """Value `key` of the record between `fig:NAME.KEY` markers, printed as the renderer prints
    it (so a figure in a benchmark's prose is checked against its record like a table)."""
    from tseeds_jax.results_render import fmt_value

    return (f"<!-- fig:{record['name']}.{key} -->{fmt_value(record['values'][key])}"
            "<!-- /fig -->")


def write_section(name: str, body: str, path: str = DOC, record: dict | None = None,
                  records: tuple[dict, ...] = ()) -> None:
    """Writes `record` / `records` to docs/results/NAME.json, then the section."""
    from tseeds_jax import results_record

    for rec in ((record,) if record is not None else ()) + tuple(records):
        results_record.write(os.path.join(os.path.dirname(os.path.abspath(path)), "results",
                                          f"{rec['name']}.json"), rec)
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
