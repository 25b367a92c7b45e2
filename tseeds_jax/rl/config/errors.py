"""Errors shared by the config modules and the modules they call (a leaf: imports nothing)."""


class ConfigValueError(ValueError):
    """An invalid config value; the message names the dotted field and the value."""
