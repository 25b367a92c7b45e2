"""The machinery that derives everything else from the typed config schema (`config_sections.py`,
`config.TrainConfig`): the ml_collections ConfigDict, the type checks and `from_config`.

A schema is a frozen dataclass whose fields carry the one default of each config field. Sections
are fields whose default is another schema dataclass (`section(RolloutConfig)`). Two field kinds
need a word for the ConfigDict: `optional(float)` (None by default; the ConfigDict holds a typed
placeholder so that `--config.x=0.3` is accepted) and `mapping({...}, type_safe=...)` (a nested
dict kept whole, e.g. HF architecture fields or a loss's hyperparameters).
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Mapping
from typing import Any

import ml_collections
from ml_collections import config_dict

from tseeds_jax.rl.config.errors import ConfigValueError


def bad(field: str, value: Any, why: str):
    raise ConfigValueError(f"config.{field}={value!r}: {why}")


def section(cls):
    """A nested section whose defaults are `cls`'s."""
    return dataclasses.field(default_factory=cls)


def optional(kind: type):
    """A field that is None (the consumer's own default) unless set to a `kind`."""
    return dataclasses.field(default=None, metadata={"placeholder": kind})


def mapping(default: Mapping[str, Any], *, type_safe: bool = True):
    """A nested dict kept whole. type_safe=False lets an override change a value's type (loss
    and task hyperparameters of any kind); True keeps each key's type (architecture, mesh)."""
    frozen = dict(default)
    return dataclasses.field(default_factory=lambda: dict(frozen),
                             metadata={"type_safe": type_safe})


def to_config_dict(obj) -> ml_collections.ConfigDict:
    """The ConfigDict of a schema instance, in field order."""
    c = ml_collections.ConfigDict()
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if dataclasses.is_dataclass(value):
            value = to_config_dict(value)
        elif value is None and "placeholder" in f.metadata:
            value = config_dict.placeholder(f.metadata["placeholder"])
        elif isinstance(value, dict):
            value = ml_collections.ConfigDict(value, type_safe=f.metadata.get("type_safe", True))
        setattr(c, f.name, value)
    return c


@functools.cache
def _hints(cls) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _kinds(hint) -> tuple[type, ...]:
    """The runtime types a field's annotation admits (an int is a float, a bool is no int)."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        return tuple(k for arg in typing.get_args(hint) for k in _kinds(arg))
    origin = typing.get_origin(hint) or hint
    if hint is type(None):
        return (type(None),)
    if origin is float:
        return (float, int)
    return (origin,) if isinstance(origin, type) else (object,)


def _check_type(name: str, value: Any, hint) -> None:
    kinds = _kinds(hint)
    if isinstance(value, bool) and bool not in kinds:
        bad(name, value, f"must be {_type_words(kinds)}, not a bool")
    if not isinstance(value, kinds):
        bad(name, value, f"must be {_type_words(kinds)}")


def _type_words(kinds: tuple[type, ...]) -> str:
    words = {int: "an integer", float: "a number", bool: "True or False", str: "a string",
             dict: "a dict", tuple: "a list", type(None): "None"}
    seen = []
    for k in kinds:
        w = words.get(k, k.__name__)
        if w not in seen and not (k is int and float in kinds):
            seen.append(w)
    return " or ".join(seen)


def build(cls, values: Mapping[str, Any] | None, prefix: str = ""):
    """A `cls` instance from a (nested) dict: a missing key takes the schema's default, an
    unknown key or a value of the wrong type raises `ConfigValueError` naming the field."""
    values = dict(values or {})
    hints = _hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    for key in values:
        if key not in names:
            bad(prefix + key, values[key], f"no such field; known: {sorted(names)}")
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name not in values:
            continue
        value, name = values[f.name], prefix + f.name
        default = (f.default_factory() if f.default_factory is not dataclasses.MISSING
                   else f.default)
        if dataclasses.is_dataclass(default):
            if not isinstance(value, Mapping):
                bad(name, value, "must be a section (a dict of its fields)")
            value = build(type(default), value, name + ".")
        else:
            if isinstance(value, list) and tuple in _kinds(hints[f.name]):
                value = tuple(value)  # JSON (checkpoint meta) has no tuples
            if isinstance(value, Mapping):
                value = dict(value)
            _check_type(name, value, hints[f.name])
        kwargs[f.name] = value
    return cls(**kwargs)


def defaults(cls) -> dict[str, Any]:
    """{dotted field: default} of a schema, sections flattened."""
    out = {}
    for f in dataclasses.fields(cls):
        default = (f.default_factory() if f.default_factory is not dataclasses.MISSING
                   else f.default)
        if dataclasses.is_dataclass(default):
            out.update({f"{f.name}.{k}": v for k, v in defaults(type(default)).items()})
        else:
            out[f.name] = default
    return out
