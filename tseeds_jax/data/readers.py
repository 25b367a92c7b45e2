"""Read raw records from local JSONL / JSON / Parquet files, each with its location.

A location is `(path, line)`: the 1-based line for JSONL, the 1-based record index for a JSON
array, the 1-based row for Parquet. Every error names the file and line.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from typing import Any

from tseeds_jax.data.errors import DataFormatError

FILE_SUFFIXES = (".jsonl", ".json", ".parquet")


def _read_jsonl(path: str) -> Iterator[tuple[int, dict[str, Any]]]:
    with open(path, encoding="utf-8") as f:
        for line_no, line in enumerate(f, start=1):
            if not line.strip():
                continue  # a trailing blank line is common and harmless
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                raise DataFormatError(f"malformed JSON at column {e.colno}: {e.msg}",
                                      path=path, line=line_no) from e
            if not isinstance(record, dict):
                raise DataFormatError(f"expected a JSON object, got {type(record).__name__}",
                                      path=path, line=line_no)
            yield line_no, record


def _read_json(path: str) -> Iterator[tuple[int, dict[str, Any]]]:
    with open(path, encoding="utf-8") as f:
        text = f.read()
    stripped = text.lstrip()
    if not stripped.startswith("["):
        # Many "*.json" dataset files are really JSON lines.
        yield from _read_jsonl(path)
        return
    try:
        records = json.loads(text)
    except json.JSONDecodeError as e:
        raise DataFormatError(f"malformed JSON at column {e.colno}: {e.msg}", path=path,
                              line=e.lineno) from e
    for i, record in enumerate(records, start=1):
        if not isinstance(record, dict):
            raise DataFormatError(f"record {i}: expected a JSON object, got "
                                  f"{type(record).__name__}", path=path, line=i)
        yield i, record


def _read_parquet(path: str) -> Iterator[tuple[int, dict[str, Any]]]:
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path)
    except Exception as e:  # pyarrow raises ArrowInvalid/OSError subclasses
        raise DataFormatError(f"not a readable Parquet file ({e})", path=path) from e
    row = 0
    for batch in pf.iter_batches(batch_size=1024):
        for record in batch.to_pylist():
            row += 1
            yield row, record


def read_records(path: str | os.PathLike) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield `(line, record)` for each record of one file; DataFormatError for a missing, empty
    or malformed file (with file and line)."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise DataFormatError("file not found", path=path)
    suffix = next((s for s in FILE_SUFFIXES if path.endswith(s)), None)
    if suffix is None:
        raise DataFormatError(f"unsupported file type; expected one of {FILE_SUFFIXES}",
                              path=path)
    reader = {".jsonl": _read_jsonl, ".json": _read_json, ".parquet": _read_parquet}[suffix]
    count = 0
    try:
        for item in reader(path):
            count += 1
            yield item
    except UnicodeDecodeError as e:
        raise DataFormatError(f"not UTF-8 text ({e})", path=path) from e
    if count == 0:
        raise DataFormatError("empty file: no records", path=path)


def expand_files(files: str | os.PathLike | Sequence[str | os.PathLike]) -> list[str]:
    """A file, a folder (its dataset files, sorted by name) or a list of those -> file paths
    (list order kept)."""
    items = [files] if isinstance(files, (str, os.PathLike)) else list(files)
    if not items:
        raise ValueError("no input files given")
    out: list[str] = []
    for item in items:
        item = os.fspath(item)
        if os.path.isdir(item):
            found = sorted(os.path.join(item, n) for n in os.listdir(item)
                           if n.endswith(FILE_SUFFIXES))
            if not found:
                raise DataFormatError(f"folder holds no {FILE_SUFFIXES} files", path=item)
            out += found
        else:
            out.append(item)
    return out
