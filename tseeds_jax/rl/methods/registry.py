"""The generation methods' registry: a restart method declares itself, once, in its own module.

A declaration (`MethodSpec`) holds everything the rest of the package asks of a method: the
name `config.restart.method` takes, its labels for tables and the demo, the seed variant it
needs, its presets, its own value checks, its random streams, the row of the combination table
it switches on (`Feature`, with the pairs it refuses and why) and its route (the `OnPolicy`
subclass that plans and generates its batches). The config checks, the combination table, the
route builder, the presets and every label list read these; no module compares a method's
name except the method's own.

Loading. A method module imports the run's machinery, which imports the config, while the
config's checks need the declarations: the registry therefore imports the method modules
itself (`MODULES`, by name) the first time it is asked, never at import time. A method written
elsewhere (tests/test_method_registry.py's example) calls `register` directly. Adding a method
to the package: its module, and its name in `MODULES` (docs/architecture.md has the recipe).
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Mapping
from typing import Any

# The package's method modules, in the order the tables list their methods.
MODULES = ("tseeds_jax.rl.methods.prefix", "tseeds_jax.rl.methods.branch")


_SYNC = ("runs inside the synchronous step: it draws and generates the whole batch itself at "
         "the step that trains it")
# What every restart method refuses: it replaces the step's generation, inside the step.
REFUSED_BY_ALL = {
    "seeds": "a restart method replaces the refresh cycle's generation",
    "luffy": "a restart method replaces the step's generation, traces included",
    "lag": "the restart method " + _SYNC,
    "overlap": "the restart method " + _SYNC,
}


@dataclasses.dataclass(frozen=True)
class Feature:
    """A row of the combination table (rl/config/compat.py) that a family of methods switches on:
    its name, label, and {other feature: why} for the pairs it refuses."""

    name: str
    label: str
    refused: Mapping[str, str]


@dataclasses.dataclass(frozen=True)
class MethodSpec:
    name: str  # config.restart.method
    label: str  # tables and plots ("PrefixRL")
    description: str  # the demo's method table ("PrefixRL (pool prefixes, half the groups)")
    feature: Feature  # the combination-table row it switches on
    variant: str  # the seeds.variant it needs: "state" (prefix as context) or "state+action"
    route: Callable[[Any], Any]  # SourceContext -> the method (an OnPolicy subclass)
    presets: Callable[[str], dict[str, Any]]  # scale ("tiny" | "paper") -> {dotted field: value}
    check: Callable[[Any, Callable], None] | None = None  # (cfg, bad(field, value, why))
    streams: Mapping[str, int] = dataclasses.field(default_factory=dict)  # method streams


_METHODS: dict[str, MethodSpec] = {}
_LOADED = False


def register(spec: MethodSpec) -> MethodSpec:
    """Adds `spec`; a second method of the same name, or a stream value another method already
    uses, is a ValueError (two streams of one value would draw the same numbers; the run's own
    streams are rl/rollout/streams.py's, which refuses a registered value that is one of them)."""
    if spec.name in _METHODS or not spec.name:
        raise ValueError(f"restart method {spec.name!r}: already registered or empty")
    # methods of one family may share a stream under one name (FR3E's and CURE's branches)
    taken = {v: (s.name, n, s.feature.name) for s in _METHODS.values()
             for n, v in s.streams.items()}
    for stream, value in spec.streams.items():
        owner = taken.get(value)
        if owner and owner[1:] != (stream, spec.feature.name):
            raise ValueError(f"restart method {spec.name!r}: stream {stream}={value:#x} is "
                             f"already {owner[0]}'s {owner[1]}")
    _METHODS[spec.name] = spec
    return spec


def unregister(name: str) -> None:
    """Removes a method registered outside the package (a test's example)."""
    _METHODS.pop(name, None)


def _load() -> None:
    global _LOADED
    if not _LOADED:
        _LOADED = True
        for module in MODULES:
            importlib.import_module(module)


def specs() -> tuple[MethodSpec, ...]:
    """Every method, in `MODULES` order (then those registered from elsewhere), whichever
    module a process happened to import first."""
    _load()
    rank = {m: i for i, m in enumerate(MODULES)}
    order = {name: i for i, name in enumerate(_METHODS)}
    return tuple(sorted(_METHODS.values(), key=lambda s: (
        rank.get(s.route.__module__, len(MODULES)), order[s.name])))


def names() -> tuple[str, ...]:
    return tuple(s.name for s in specs())


def get(name: str) -> MethodSpec:
    """The declaration of restart method `name`; KeyError naming the known ones."""
    _load()
    if name not in _METHODS:
        raise KeyError(f"unknown restart method {name!r}; known: {names()}")
    return _METHODS[name]


def features() -> tuple[Feature, ...]:
    """The combination-table rows the methods add, in the order their methods registered."""
    out: dict[str, Feature] = {}
    for spec in specs():
        out.setdefault(spec.feature.name, spec.feature)
    return tuple(out.values())


def members(feature: str) -> tuple[str, ...]:
    return tuple(s.name for s in specs() if s.feature.name == feature)


def labels() -> dict[str, str]:
    return {s.name: s.label for s in specs()}


def streams() -> dict[str, int]:
    """{stream name: value} of every registered method's own streams."""
    return {n: v for s in specs() for n, v in s.streams.items()}
