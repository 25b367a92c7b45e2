"""Rewrites one benchmark's own section of docs/benchmarks.md, delimited by
`<!-- BEGIN name -->` / `<!-- END name -->`; the other scripts' sections are left as they are.
Imported by the scripts in this folder (they run as `python benchmarks/NAME.py`)."""

from __future__ import annotations

import os
import re

DOC = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "docs", "benchmarks.md")


def write_section(name: str, body: str, path: str = DOC) -> None:
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
