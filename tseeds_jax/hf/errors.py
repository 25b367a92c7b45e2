"""Errors of the HF conversion layer; every message names the file, tensor or config field."""

from __future__ import annotations


class ConversionError(ValueError):
    """Weights or config that cannot be converted (wrong shape, missing/unexpected tensor...)."""


class MissingFileError(ConversionError, FileNotFoundError):
    """A file the conversion needs does not exist."""
