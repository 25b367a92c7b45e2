"""Which features of a run combine: one table, checked once when the config is built (and once
more when the run is built, with the process count), never inside the training loop.

A feature is switched on by one config field (`features()`). Every pair of features is either
combinable or refused with a reason (`refused()`); a few pairs cannot both be on by construction
(one restart method, one loss: `exclusive()`). The restart methods' rows come from their registry
entries (rl/methods/registry.py: each family's `Feature` with the pairs it refuses); any two of
them are exclusive (one `restart.method` per run). The table is built when asked (`features()`,
`refused()`, `exclusive()`), since the registry loads the method modules, which import this
package. Checks of a single feature (its values, the loss or
seed variant it needs) are checks.py's. `render()` writes the table that docs/architecture.md
shows (tests/test_route_table.py keeps the two equal).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable
from typing import Any

from tseeds_jax.rl.config.errors import ConfigValueError
from tseeds_jax.rl.methods import registry as method_registry


@dataclasses.dataclass(frozen=True)
class Feature:
    name: str
    label: str  # as the table shows it
    field: str  # the dotted config field that switches it on
    on: Callable[[Any, int], bool]  # (config, process count) -> on?
    value: Callable[[Any, int], Any]


def _get(cfg, dotted: str):
    for part in dotted.split("."):
        cfg = getattr(cfg, part)
    return cfg


def _feature(name, label, field, on=None, value=None):
    value = value or (lambda cfg, hosts: _get(cfg, field))
    return Feature(name, label, field, on or (lambda cfg, hosts: bool(_get(cfg, field))), value)


def _topk(cfg, hosts) -> bool:
    from tseeds_jax.rl import losses  # local: keeps the config importable without JAX work

    return cfg.loss.name in losses.names() and bool(losses.get(cfg.loss.name).needs.topk_proposal)


_BEFORE = (
    _feature("seeds", "Thinking Seeds (refresh T > 1)", "seeds.refresh_interval",
             on=lambda cfg, hosts: cfg.seeds.refresh_interval > 1),
    _feature("luffy", "LUFFY traces", "offpolicy.source"),
)  # the restart methods' rows follow these
_AFTER = (
    _feature("lag", "M2PO's lag", "stale.steps"),
    _feature("overlap", "generation overlapped with the update", "stale.overlap"),
    _feature("partial", "partial rollouts", "stale.partial_tokens"),
    _feature("filter", "DAPO dynamic sampling", "advantage.filter_groups"),
    _feature("topk", "a top-K proposal loss (SIS)", "loss.name", on=_topk),
    _feature("tis", "truncated importance weights", "stale.correction",
             on=lambda cfg, hosts: cfg.stale.correction == "tis"),
    _feature("packed", "packed learner rows", "learner.layout",
             on=lambda cfg, hosts: cfg.learner.layout == "packed"),
    _feature("hosts", "several hosts", "(process count)", on=lambda cfg, hosts: hosts > 1,
             value=lambda cfg, hosts: hosts),
)


def _method_feature(row: method_registry.Feature) -> Feature:
    names = method_registry.members(row.name)
    return _feature(row.name, row.label, "restart.method",
                    on=lambda cfg, hosts: cfg.restart.method in names)


def features() -> tuple[Feature, ...]:
    return _BEFORE + tuple(_method_feature(f) for f in method_registry.features()) + _AFTER


# Pairs that cannot both be on: one loss per run (LUFFY's traces need the LUFFY loss, a top-K
# proposal needs SIS, TIS needs a loss that takes token weights); one restart method (below).
_EXCLUSIVE = {
    frozenset({"luffy", "topk"}): "LUFFY traces need loss.name='luffy', a top-K proposal SIS",
    frozenset({"luffy", "tis"}): "LUFFY traces need loss.name='luffy', which takes no per-token "
                                 "weight (checks.stale)",
}
_ONE_RESTART = "one restart.method per run"

_REFUSED = {
    frozenset({"seeds", "lag"}): "a refresh cycle's seeded batches are trained at their own "
                                 "step; use partial rollouts (stale.partial_tokens, "
                                 "max_staleness) for Thinking Seeds generated ahead",
    frozenset({"seeds", "overlap"}): "overlap needs M2PO's lag, which refresh cycles refuse",
    frozenset({"luffy", "partial"}): "a trace is a whole response of another model: nothing to "
                                     "interrupt, and the pool admits prompts, not traces",
    frozenset({"partial", "filter"}): "the pool admits whole groups before their rewards are "
                                      "known; dynamic sampling would discard admitted groups",
    frozenset({"partial", "topk"}): "a carried response has no proposal top-K for the tokens "
                                    "of earlier versions",
    frozenset({"packed", "hosts"}): "each host would pack its own rows, but the update and the "
                                    "statistics passes read one global array of every host's "
                                    "rows (not built for packed rows yet)",
}


def exclusive() -> dict[frozenset, str]:
    rows = [f.name for f in method_registry.features()]
    return {**{frozenset(p): _ONE_RESTART for p in itertools.combinations(rows, 2)},
            **_EXCLUSIVE}


def refused() -> dict[frozenset, str]:
    return {**{frozenset({f.name, other}): why for f in method_registry.features()
               for other, why in f.refused.items()}, **_REFUSED}


def _conditional(on: dict[str, bool], cfg, hosts: int) -> list[tuple[str, Any, str]]:
    """Pairs that combine only under a condition: (field, value, why) of each unmet one."""
    out = []
    if on["overlap"] and on["hosts"]:
        if cfg.hardware.sampler_placement != "replica":
            out.append(("hardware.sampler_placement", cfg.hardware.sampler_placement,
                        "stale.overlap on several processes needs a host-local sampler "
                        "('replica'): the worker's collectives would interleave with the "
                        "update's (docs/async.md)"))
        if cfg.advantage.filter_groups:
            out.append(("advantage.filter_groups", True,
                        "stale.overlap on several processes: dynamic sampling's rounds are "
                        "collective, and the worker thread makes no collective call"))
    return out


def active(cfg, hosts: int = 1) -> dict[str, bool]:
    return {f.name: bool(f.on(cfg, hosts)) for f in features()}


def check(cfg, hosts: int = 1) -> None:
    """ConfigValueError naming both fields for the first refused combination in `cfg` (hosts:
    the process count; 1 while the config is validated, the real count when the run is built)."""
    on = active(cfg, hosts)
    no, one_of = refused(), exclusive()
    for a, b in itertools.combinations(features(), 2):
        if not (on[a.name] and on[b.name]):
            continue
        why = no.get(frozenset({a.name, b.name})) or one_of.get(frozenset({a.name, b.name}))
        if why:
            raise ConfigValueError(
                f"config.{b.field}={b.value(cfg, hosts)!r} with config.{a.field}="
                f"{a.value(cfg, hosts)!r}: {b.label} does not combine with {a.label}: {why}")
    for field, value, why in _conditional(on, cfg, hosts):
        raise ConfigValueError(f"config.{field}={value!r}: {why}")


def status(a: str, b: str) -> str:
    """"works", "refused" or "exclusive" for features `a` and `b`."""
    key = frozenset({a, b})
    return "exclusive" if key in exclusive() else "refused" if key in refused() else "works"


def render() -> str:
    """The combination table (markdown): ✓ combine, ✗ refused (numbered reasons), — one of."""
    table = features()
    names = [f.name for f in table]
    no, one_of = refused(), exclusive()
    notes: list[str] = []
    head = "| | " + " | ".join(f"**{n}**" for n in names) + " |"
    rows = [head, "|---" * (len(names) + 1) + "|"]
    for a in names:
        cells = []
        for b in names:
            if a == b:
                cells.append("")
                continue
            st = status(a, b)
            if st == "works":
                cells.append("✓")
                continue
            why = (no if st == "refused" else one_of)[frozenset({a, b})]
            if why not in notes:
                notes.append(why)
            mark = "✗" if st == "refused" else "—"
            cells.append(f"{mark}{notes.index(why) + 1}")
        rows.append(f"| **{a}** | " + " | ".join(cells) + " |")
    legend = ["", "Features: " + "; ".join(f"**{f.name}** {f.label} (`{f.field}`)"
                                            for f in table) + ".",
              "", "✓ combine; ✗ refused; — cannot both be on. Why:", ""]
    legend += [f"{i}. {why}" for i, why in enumerate(notes, 1)]
    conditional = ("Conditional: **overlap** with **hosts** needs "
                   "`hardware.sampler_placement='replica'` and no `advantage.filter_groups`.")
    return "\n".join(rows + legend + ["", conditional])
