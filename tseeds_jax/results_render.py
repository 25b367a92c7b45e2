"""Renders the tables and inline figures of README.md and docs/*.md from docs/results/*.json.

    python -m tseeds_jax.results_render            # rewrite every marked table and figure
    python -m tseeds_jax.results_render --check    # exit 1 listing what differs (nothing written)

Markers in a document:

  <!-- BEGIN table:NAME -->             the table of record NAME (its `table` field) and one line
  ...                                   of provenance (kind, command, date, commit, machine);
  <!-- END table:NAME -->               everything between the markers is replaced
  <!-- fig:NAME.KEY -->X<!-- /fig -->   X = value KEY of record NAME, as `fmt_value` prints it

A value may name the table cell it was read from (`"from": "RECORD:ROW:COL"`, 0-based over the
table's rows and columns): `check` reports it when its printed form is not part of that cell, so
a figure that prose quotes from a table cannot drift from the table's record.

Results quoted in the text right after a rendered table (its commentary, up to the next heading
or table: differences, intervals, p-values) must be numbers of that table's record
(`quote_mismatches`); a figure from another record goes in a fig marker.

A record's `stale` field lists the printed forms that an older figure had (e.g. the 7B decode
bound before the decode layout): `check` reports any of them found in a document outside the
record's own table. Records are read with `tseeds_jax.results_record.load` (JAX-free).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from typing import Any

from tseeds_jax.results_record import load_all

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_TABLE = re.compile(r"(<!-- BEGIN table:(?P<name>[\w.-]+) -->\n)(?P<body>.*?)(<!-- END table:"
                    r"(?P=name) -->)", re.S)
_FIG = re.compile(r"(<!-- fig:(?P<name>[\w-]+)\.(?P<key>[\w-]+) -->)(?P<text>.*?)(<!-- /fig -->)",
                  re.S)


def documents(root: str = ROOT) -> list[str]:
    """README.md and docs/*.md, relative to `root`."""
    docs = os.path.join(root, "docs")
    return ["README.md"] + sorted(os.path.join("docs", f) for f in os.listdir(docs)
                                  if f.endswith(".md"))


def fmt_number(v: Any) -> str:
    """1234 -> "1,234"; 0.79 -> "0.79"; 10945.0 -> "10,945.0": the digits stored, with commas."""
    if isinstance(v, bool) or not isinstance(v, int | float):
        return str(v)
    if isinstance(v, int):
        return f"{v:,}"
    text = repr(v)
    whole, _, frac = text.partition(".")
    return f"{int(whole):,}" + (f".{frac}" if frac else "") if "e" not in text else text


def fmt_value(entry: dict[str, Any]) -> str:
    v = entry["value"]
    return ", ".join(fmt_number(x) for x in v) if isinstance(v, list) else fmt_number(v)


def provenance(rec: dict[str, Any]) -> str:
    m = rec.get("machine") or {}
    # the CPU as the record names it, with the flags that change XLA's CPU code: a figure is
    # of that machine, never of "this machine" (the reader's)
    cpu = m.get("cpu")
    if cpu and m.get("flags"):
        cpu = f"{cpu} ({'/'.join(m['flags'])})"
    where = ", ".join(str(x) for x in (cpu, f"{m['cores']} cores" if m.get("cores")
                                       else None) if x)
    load = m.get("load_avg") or m.get("load_avg_start")
    parts = [f"*{rec['kind']}*", f"`{rec['command']}`", rec["date"],
             _commit(rec),
             f"backend {rec['backend']}"]
    if where:
        # A load is the 1-minute average list of os.getloadavg(), or a range written as text.
        first = load if isinstance(load, str) else (load[0] if load else None)
        parts.append(where + (f", load {first}" if first is not None else ""))
    if rec.get("transcribed"):
        parts.append(f"transcribed from {rec['source']}")
    return "Source: " + "; ".join(parts) + f" (record `docs/results/{rec['name']}.json`)."


def _commit(rec: dict[str, Any]) -> str:
    """The provenance's commit: the hash, whether the tree had changes, and the record's note on
    what the field does not say (runs that span commits, a legacy "+dirty" name)."""
    text = f"commit {rec['commit']}" if rec.get("commit") else "commit unknown"
    if rec.get("dirty"):
        text += " with uncommitted changes"
    return text + (f" ({rec['commit_note']})" if rec.get("commit_note") else "")


def render_table(rec: dict[str, Any]) -> str:
    t = rec["table"]
    lines = ["| " + " | ".join(t["columns"]) + " |", "|" + "---|" * len(t["columns"])]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in t["rows"]]
    return "\n".join(lines) + "\n\n" + provenance(rec) + "\n"


def render(text: str, records: dict[str, dict[str, Any]], doc: str) -> tuple[str, list[str]]:
    """(`text` with every marked table and figure rendered, problems: unknown records/keys)."""
    problems: list[str] = []

    def table(m):
        rec = records.get(m["name"])
        if rec is None or "table" not in rec:
            problems.append(f"{doc}: table:{m['name']}: no record with a table of that name")
            return m[0]
        return m[1] + render_table(rec) + m[4]

    def fig(m):
        rec = records.get(m["name"])
        entry = (rec or {}).get("values", {}).get(m["key"])
        if entry is None:
            problems.append(f"{doc}: fig:{m['name']}.{m['key']}: no such recorded value")
            return m[0]
        return m[1] + fmt_value(entry) + m[5]

    return _FIG.sub(fig, _TABLE.sub(table, text)), problems


def stale_hits(text: str, records: dict[str, dict[str, Any]], doc: str) -> list[str]:
    """Printed forms of superseded figures found in `text` outside the record's own table."""
    out = []
    for name, rec in records.items():
        own = "".join(m["body"] for m in _TABLE.finditer(text) if m["name"] == name)
        rest = text.replace(own, "") if own else text
        for key, forms in (rec.get("stale") or {}).items():
            for form in forms:
                words = r"\s+".join(re.escape(w) for w in form.split())  # a line may break
                if re.search(rf"(?<![\d,.]){words}(?!\d|[,.]\d)", rest):
                    out.append(f"{doc}: prints {form!r}, a superseded value of {name}.{key} "
                               f"(recorded: {fmt_value(rec['values'][key])})")
    return out


_NUMBER = re.compile(r"(?<![\w.,\d])([+−-]?)(\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+\.\d+)(?![\d])")
_UNQUOTED = re.compile(r"<!-- fig:.*?<!-- /fig -->|`[^`\n]*`|<!--.*?-->|\]\([^)]*\)", re.S)
_HEADING = re.compile(r"^#", re.M)


_INTERVAL = r"[+−-]?\d[\d,]*\.\d+\s*±\s*\d[\d,]*\.\d+"
_DEC = r"\d[\d,]*\.\d+"
# The kinds of result a commentary quotes, most specific first (a match consumes its text):
# an interval with its p, an interval, a pair "a / b" (SD between / within), a count "N of M",
# a p-value, a signed difference, a multiplier (skipped), any other decimal (a mean, an SD, a
# per-base or per-seed value).
_KINDS = (("interval_p", rf"(?<![\w.,\d]){_INTERVAL}\s*[(,;]\s*p\s*[=<]\s*\d*\.\d+"),
          ("interval", rf"(?<![\w.,\d]){_INTERVAL}"),
          ("pair", rf"(?<![\w.,\d+−-]){_DEC}\s*/\s*{_DEC}(?![\d])"),
          ("count", r"(?<![\w.,\d])\d+\s+of\s+\d+(?![\d.,]\d|\d)"),
          ("p", r"\bp\s*[=<]\s*\d*\.\d+"),
          ("signed", rf"(?<![\w.,\d])[+−-]{_DEC}(?![\d])"),
          # a multiplier or a range of them ("1.44×", "1.1–1.2×"): a theory's or a paper's
          # ratio in prose, not checked (a recorded one is printed by a fig marker)
          ("ratio", rf"(?<![\w.,\d]){_DEC}(?:\s*[–-]\s*{_DEC})?\s?[x×](?!\w)"),
          ("decimal", rf"(?<![\w.,\d]){_DEC}(?![\d]|\.\d)"))
_QUOTED = re.compile("|".join(f"(?P<{k}>{r})" for k, r in _KINDS))
_ALPHA = re.compile(r"p\s*<\s*0\.05")  # the test's level, not a result


def _numbers(text: str) -> list[tuple[str, str]]:
    """(sign, digits) of every decimal number (or number with thousands commas) in `text`,
    outside figure markers, inline code, comments and link targets; "−" read as "-"."""
    text = _UNQUOTED.sub(" ", text)
    return [(m[1].replace("−", "-"), m[2]) for m in _NUMBER.finditer(text)]


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text.replace("−", "-"))


def _holds(kind: str, quote: str, corpus: str, have: set[tuple[str, str]]) -> bool:
    """Whether the record text `corpus` (normalized; its numbers `have`) holds `quote` of
    `kind` exactly:
      interval  the same pair "a ± b" (with the quote's sign where it gives one)
      pair      the same "a / b";  count: the same "N of M";  p: the same "p = x" / "p < x"
      interval_p  the pair with its own p ("a ± b (p = x" as the cell prints it)
      signed    the number with the same sign ("+x" never matches an unsigned x)
      decimal   a number the record prints (any sign). A number of one cell or base (a
                per-base mean, a per-seed value) that another cell could also print goes in a
                fig marker of the value quoting it (`bases_table`'s q_<m>_base<b>,
                c_<m>_base<b>_seeds), which the check compares exactly."""
    quote = _norm(quote)
    bound = r"(?<![\d.,+-])"
    if kind == "interval_p":  # the difference with its own p, as the table's cell prints them
        diff, sym, digits = re.fullmatch(r"(.+?) ?[(,;] ?p ?([=<]) ?(\S+)", quote).groups()
        sign, a, b = re.fullmatch(r"([+-]?)(\S+) ?± ?(\S+)", diff).groups()
        lead = {"-": "-", "+": r"\+", "": "[+-]?"}[sign]
        return re.search(rf"{bound}{lead}{re.escape(a)} ± {re.escape(b)} \(p ?{re.escape(sym)} ?"
                         rf"{re.escape(digits)}(?![\d])", corpus) is not None
    if kind == "interval":
        sign, a, b = re.fullmatch(r"([+-]?)(\S+) ?± ?(\S+)", quote).groups()
        lead = {"-": "-", "+": r"\+", "": "[+-]?"}[sign]
        return re.search(rf"{bound}{lead}{re.escape(a)} ± {re.escape(b)}(?![\d])",
                         corpus) is not None
    if kind == "pair":
        a, b = (x.strip() for x in quote.split("/"))
        return re.search(rf"{bound}{re.escape(a)} / {re.escape(b)}(?![\d])", corpus) is not None
    if kind == "count":
        return re.search(rf"(?<![\d.,]){re.escape(quote)}(?![\d])", corpus) is not None
    if kind == "p":
        sym, digits = re.fullmatch(r"p ?([=<]) ?(\S+)", quote).groups()
        return re.search(rf"\bp ?{re.escape(sym)} ?{re.escape(digits)}(?![\d])",
                         corpus) is not None
    sign, digits = _numbers(quote)[0]
    if kind == "signed":
        return (sign, digits) in have
    return any((s, digits) in have for s in ("+", "-", ""))


def _quoted(text: str) -> list[tuple[str, str]]:
    """(kind, text) of the parts of `text` that quote a result (`_KINDS`)."""
    text = _UNQUOTED.sub(" ", text)
    return [(m.lastgroup, m[0]) for m in _QUOTED.finditer(text)
            if not (m.lastgroup == "p" and _ALPHA.fullmatch(m[0]))]


def quote_mismatches(text: str, records: dict[str, dict[str, Any]], doc: str) -> list[str]:
    """Results that the commentary of a rendered table (the text after its END marker, up to
    the next heading or table) quotes (`_quoted`: intervals, SD pairs, counts, p-values,
    signed differences, other decimals) and its record does not hold exactly (`_holds`; a
    figure from elsewhere goes in a fig marker). So an edited "+14.9", "9.2 / 1.5", "4 of 5",
    "p = 0.06" or per-seed "21.9" below a table whose record says otherwise is caught."""
    out = []
    for m in _TABLE.finditer(text):
        rec = records.get(m["name"])
        if rec is None or "table" not in rec:
            continue
        rest = text[m.end():]
        stop = min([x.start() for x in (_HEADING.search(rest), re.search(r"<!-- BEGIN table:",
                                                                        rest)) if x]
                   + [len(rest)])
        values = rec.get("values") or {}
        corpus = " ".join(str(c) for row in rec["table"]["rows"] for c in row)
        corpus = _norm(corpus + " " + " ".join(fmt_value(v) for v in values.values()
                                               if not isinstance(v["value"], list | dict)))
        have = set(_numbers(corpus))
        per_run = any(isinstance(v["value"], list) for v in values.values())
        for kind, quote in _quoted(rest[:stop]):
            # Other decimals and counts are checked below the records of per-run results (values
            # with per-base / per-seed lists: the demo's): elsewhere prose also gives targets,
            # paper figures, ratios and step counts that no record holds.
            if kind == "ratio" or kind in ("decimal", "count") and not per_run:
                continue
            if not _holds(kind, quote, corpus, have):
                out.append(f"{doc}: below table:{m['name']}, the text quotes {quote!r}, which "
                           f"record {m['name']} does not hold")
    return out


def cell_mismatches(records: dict[str, dict[str, Any]]) -> list[str]:
    """Values whose `from` cell (RECORD:ROW:COL) does not contain their printed form."""
    out = []
    for name, rec in records.items():
        for key, entry in (rec.get("values") or {}).items():
            if "from" not in entry:
                continue
            src, _, rest = str(entry["from"]).partition(":")
            table = (records.get(src) or {}).get("table")
            try:
                row, col = (int(x) for x in rest.split(":"))
                cell = str(table["rows"][row][col]) if table else None
            except (ValueError, IndexError):
                cell = None
            if cell is None:
                out.append(f"docs/results/{name}.json: values.{key}.from = {entry['from']!r} "
                           "names no table cell")
            elif fmt_value(entry) not in cell:
                out.append(f"docs/results/{name}.json: values.{key} = {fmt_value(entry)!r} is not "
                           f"in {entry['from']} = {cell!r}")
    return out


def check(root: str = ROOT) -> list[str]:
    """Every difference between the documents and their records, as lines (empty: in sync)."""
    records = load_all(os.path.join(root, "docs", "results"))
    problems: list[str] = cell_mismatches(records)
    for doc in documents(root):
        with open(os.path.join(root, doc)) as f:
            text = f.read()
        new, bad = render(text, records, doc)
        problems += bad + stale_hits(text, records, doc) + quote_mismatches(text, records, doc)
        if new != text:
            old_lines, new_lines = text.splitlines(), new.splitlines()
            first = next((i for i, (a, b) in enumerate(zip(old_lines, new_lines)) if a != b),
                         min(len(old_lines), len(new_lines)))
            problems.append(f"{doc}:{first + 1}: differs from its record(s): "
                            f"{(old_lines[first] if first < len(old_lines) else '')[:120]!r}")
    return problems


def write(root: str = ROOT) -> list[str]:
    """Renders in place; returns the documents changed."""
    records = load_all(os.path.join(root, "docs", "results"))
    changed = []
    for doc in documents(root):
        path = os.path.join(root, doc)
        with open(path) as f:
            text = f.read()
        new, bad = render(text, records, doc)
        if bad:
            raise ValueError("; ".join(bad))
        if new != text:
            with open(path, "w") as f:
                f.write(new)
            changed.append(doc)
    return changed


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--root", default=ROOT, help="repository root (default: this checkout)")
    p.add_argument("--check", action="store_true", help="report differences; write nothing")
    a = p.parse_args(argv)
    if a.check:
        problems = check(a.root)
        for line in problems:
            print(line)
        return 1 if problems else 0
    for doc in write(a.root):
        print(f"rendered {doc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
