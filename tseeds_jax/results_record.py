"""Recorded results: one small JSON file per figure (or table) that README.md and docs/ print.

A record says what was measured, compiled or estimated, by which command, when, on which commit
and machine, and which of three kinds of number it is:

  measured             timed or counted on this CPU machine (the load average is part of it)
  compile-only bound   a roofline read from a program compiled for a TPU by libtpu; nothing ran
  estimate             a model's prediction (the memory planner, a step-time model)

Commands that produce figures write their record with `write` (`tseeds compile --record PATH`,
the benchmarks' `docsection.write_section(..., record=...)`, `tseeds demo`'s summary); figures
from earlier sessions that cannot be re-run here are transcribed with `"transcribed": true` and
the commit that produced them. `tseeds_jax.results_render` renders the docs' tables from these
files. No JAX import here: the writer runs in any process.

Record fields: name (= file stem), what, kind, command, date (ISO), commit (or null: a commit of
the repository, HEAD when the record was written, never a name of a tree that is not a commit),
dirty (optional, true: the tree had uncommitted changes to tracked files then), commit_note
(optional: what the commit field does and does not say, e.g. for records whose runs span commits;
records written before issue 55 carry "+dirty" or a rebased-away commit and say so here), machine
({cpu, cores, flags, load_avg}), backend, values ({key: {"value", "unit"}}, optional; a value
quoted from a table cell says so with "from": "RECORD:ROW:COL", which results_render checks),
table ({"columns": [...], "rows": [[...]]}; optional), transcribed (bool), source (where a transcribed
figure was read), stale ({key: [printed strings that an older figure had]}; optional), note.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import re
import subprocess
import tempfile
from typing import Any

KINDS = ("measured", "compile-only bound", "estimate")
REQUIRED = ("name", "what", "kind", "command", "date", "commit", "machine", "backend",
            "transcribed")
# CPU flags that change the numbers of XLA:CPU programs (docs/demo_results.md: "Numbers vary
# with the CPU"); the rest of /proc/cpuinfo's list is noise for a reader.
_FLAGS = ("avx", "avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "amx_tile")


class RecordError(ValueError):
    """A record file or field that does not follow the schema; the message names both."""


def machine() -> dict[str, Any]:
    """This machine as a record states it: CPU model, cores, the flags above, load average."""
    cpu, flags = platform.processor() or platform.machine(), []
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, val = line.partition(":")
                if key.strip() == "model name" and cpu in ("", platform.machine(),
                                                             platform.processor()):
                    cpu = val.strip()
                elif key.strip() == "flags":
                    have = set(val.split())
                    flags = [x for x in _FLAGS if x in have]
                    break
    except OSError:  # not Linux: the model name from platform is all there is
        pass
    load = [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None
    return {"cpu": cpu, "cores": os.cpu_count(), "flags": flags, "load_avg": load}


def git_state(path: str | None = None) -> tuple[str | None, bool]:
    """(HEAD of the repository holding `path` (default: this package) as a short hash, whether
    its tracked files have uncommitted changes); (None, False) outside a git checkout (an
    installed wheel). The hash is always a commit of the repository: a changed tree is a flag
    beside it, never a made-up name such as "abc1234+dirty"."""
    where = path or os.path.dirname(os.path.abspath(__file__))
    try:
        head = subprocess.run(["git", "-C", where, "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, timeout=10)
        if head.returncode:
            return None, False
        dirty = subprocess.run(["git", "-C", where, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return None, False
    return head.stdout.strip(), bool(dirty)


def git_commit(path: str | None = None) -> str | None:
    """HEAD of the repository holding `path` as a short hash (None outside a checkout)."""
    return git_state(path)[0]


def run_commit(path: str | None = None) -> str | None:
    """The code a run ran, as a record's per-run value: HEAD's hash, with " + uncommitted
    changes" when the tracked files differed from it (a commit of the repository either way)."""
    commit, dirty = git_state(path)
    return None if commit is None else commit + (" + uncommitted changes" if dirty else "")


_HASH = r"[0-9a-f]{7,40}"
# A commit, or two compared ("22b23ca (after) vs 5d82e06 (before)").
_COMMIT = re.compile(rf"{_HASH}(?: \(\w+\))?(?: vs {_HASH}(?: \(\w+\))?)?")
COMMIT_HASH = re.compile(_HASH)
_ABS_PATH = re.compile(r"(?<![\w.~:/-])/[\w.+@-]+(?:/[\w.+@-]*)*")


def portable_command(command: str, cwd: str | None = None) -> str:
    """`command` without absolute paths of the machine it ran on: a path under `cwd` (default
    the working folder) becomes relative to it, any other absolute path its last component."""
    here = os.path.abspath(cwd or os.getcwd())

    def fix(m):
        path = m[0].rstrip("/") or "/"
        if path == here or path.startswith(here + os.sep):
            return os.path.relpath(path, here)
        return os.path.basename(path) or "."

    return _ABS_PATH.sub(fix, command)


def make(name: str, what: str, kind: str, command: str, *, backend: str,
         values: dict[str, dict[str, Any]] | None = None, table: dict[str, list] | None = None,
         note: str = "", date: str | None = None, commit: str | None = None,
         machine_info: dict[str, Any] | None = None, transcribed: bool = False,
         source: str | None = None, stale: dict[str, list[str]] | None = None,
         commit_note: str = "") -> dict[str, Any]:
    """A record for a figure produced now (date, commit and machine filled in unless given);
    the command's absolute paths are made portable (`portable_command`). A commit filled in is
    HEAD, with "dirty": true beside it when the tracked files had changes."""
    dirty = False
    if commit is None and not transcribed:
        commit, dirty = git_state()
    rec: dict[str, Any] = {
        "name": name, "what": what, "kind": kind, "command": portable_command(command),
        "date": date or datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": commit,
        "machine": machine_info if machine_info is not None else machine(),
        "backend": backend, "transcribed": transcribed}
    if dirty:
        rec["dirty"] = True
    if commit_note:
        rec["commit_note"] = commit_note
    for key, val in (("values", values), ("table", table), ("source", source), ("stale", stale)):
        if val:
            rec[key] = val
    if note:
        rec["note"] = note
    validate(rec, f"<record {name}>")
    return rec


def validate(rec: Any, where: str) -> dict[str, Any]:
    """Raises RecordError naming `where` (the file), the field and its value."""
    if not isinstance(rec, dict):
        raise RecordError(f"{where}: a record is a JSON object, got {type(rec).__name__}")
    for key in REQUIRED:
        if key not in rec:
            raise RecordError(f"{where}: field {key!r} is missing")
    if rec["kind"] not in KINDS:
        raise RecordError(f"{where}: field 'kind' = {rec['kind']!r}; expected one of {KINDS}")
    commit = rec["commit"]
    if commit is not None and not (isinstance(commit, str) and _COMMIT.fullmatch(commit)) \
            and not rec.get("commit_note"):
        raise RecordError(f"{where}: field 'commit' = {commit!r}; expected a commit hash of the "
                          "repository (or null, or 'A vs B' for a comparison), with 'dirty': true "
                          "beside it for a changed tree "
                          "(a value that names no commit needs a 'commit_note' saying so)")
    if "dirty" in rec and not isinstance(rec["dirty"], bool):
        raise RecordError(f"{where}: field 'dirty' = {rec['dirty']!r}; expected a bool")
    if not isinstance(rec["transcribed"], bool):
        raise RecordError(f"{where}: field 'transcribed' = {rec['transcribed']!r}; expected a bool")
    if rec["transcribed"] and not rec.get("source"):
        raise RecordError(f"{where}: field 'source' is missing: a transcribed record names where "
                          "its figures were read")
    for key, val in (rec.get("values") or {}).items():
        if not isinstance(val, dict) or "value" not in val or "unit" not in val:
            raise RecordError(f"{where}: field 'values.{key}' = {val!r}; expected "
                              "{{'value': ..., 'unit': ...}}")
        frm = val.get("from")
        if frm is not None and not re.fullmatch(r"[\w.-]+:\d+:\d+", str(frm)):
            raise RecordError(f"{where}: field 'values.{key}.from' = {frm!r}; expected "
                              "'RECORD:ROW:COL' (the table cell the value is quoted from)")
    table = rec.get("table")
    if table is not None:
        cols = table.get("columns") if isinstance(table, dict) else None
        if not isinstance(cols, list) or not isinstance(table.get("rows"), list):
            raise RecordError(f"{where}: field 'table' = {table!r:.80}; expected "
                              "{'columns': [...], 'rows': [[...], ...]}")
        for i, row in enumerate(table["rows"]):
            if not isinstance(row, list) or len(row) != len(cols):
                raise RecordError(f"{where}: field 'table.rows[{i}]' = {row!r:.80} has "
                                  f"{len(row) if isinstance(row, list) else '?'} cells; "
                                  f"the columns are {len(cols)}")
    for key, val in (rec.get("stale") or {}).items():
        if key not in (rec.get("values") or {}) or not isinstance(val, list):
            raise RecordError(f"{where}: field 'stale.{key}' = {val!r}; expected a list of "
                              "strings for a key of 'values'")
    return rec


def write(path: str, rec: dict[str, Any]) -> str:
    """Validates and writes `rec` to `path` atomically (temporary file, then rename)."""
    validate(rec, path)
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".record_", suffix=".json")
    with os.fdopen(fd, "w") as f:
        json.dump(rec, f, indent=1, ensure_ascii=False)
        f.write("\n")
    os.replace(tmp, path)
    return path


def load(path: str) -> dict[str, Any]:
    try:
        with open(path) as f:
            rec = json.load(f)
    except json.JSONDecodeError as e:
        raise RecordError(f"{path}: not JSON ({e})") from e
    rec = validate(rec, path)
    stem = os.path.splitext(os.path.basename(path))[0]
    if rec["name"] != stem:
        raise RecordError(f"{path}: field 'name' = {rec['name']!r}; expected the file's stem "
                          f"{stem!r}")
    return rec


def load_all(folder: str) -> dict[str, dict[str, Any]]:
    """{name: record} of every *.json under `folder` (sorted)."""
    if not os.path.isdir(folder):
        raise RecordError(f"{folder}: no such folder of records")
    return {os.path.splitext(f)[0]: load(os.path.join(folder, f))
            for f in sorted(os.listdir(folder)) if f.endswith(".json")}
