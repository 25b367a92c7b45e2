"""Errors raised by the data package; each names the file, line (or row) and field at fault."""

from __future__ import annotations


class DataFormatError(ValueError):
    """A record in a dataset file is malformed or lacks a required field.

    Attributes mirror the message so callers (and tests) can inspect them: `path` (file), `line`
    (1-based line of a JSONL/JSON file or row of a Parquet file; None when the whole file is at
    fault) and `field` (the field name, None for a record-level error).
    """

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None,
                 field: str | None = None):
        where = ""
        if path is not None:
            where = str(path) + (f":{line}" if line is not None else "")
        if field is not None:
            where += f" field {field!r}"
        super().__init__(f"{where}: {message}" if where else message)
        self.path, self.line, self.field = path, line, field


class UnknownDatasetError(KeyError):
    """A dataset (or reasoning-gym task, or prompt template) name is not registered."""

    def __str__(self) -> str:  # KeyError would print the repr of its argument
        return str(self.args[0]) if self.args else ""


class OverlongPromptError(ValueError):
    """A formatted prompt has more tokens than the configured maximum (with on_overlong='error')."""
