"""Compile-only TPU devices for an accelerator name, and the chip table of the roofline.

`devices_for("v5p-64")` asks libtpu (`jax.experimental.topologies.get_topology_desc`) for the
devices of that slice's topology (v5p-64: 32 chips "2x4x4", 8 hosts of 4 chips) without owning
one: XLA's TPU compiler then compiles for them from this process; nothing can run on them.
`--topology v5p:2x2x1` names a topology directly.

Chip numbers (peak FLOP/s, HBM and ICI bandwidth) are `chips.chip(family)`: the project's one
chip table.
"""

from __future__ import annotations

import re

from tseeds_jax.chips import parse_accelerator

# libtpu's name of each family, and the chip grid of a slice of n chips (Cloud TPU's shapes).
_TPU_NAMES = {"v4": "v4", "v5e": "v5e", "v5p": "v5p", "v6e": "v6e"}
_GRID_3D = {1: "1x1x1", 2: "1x2x1", 4: "2x2x1", 8: "2x2x2", 16: "2x2x4", 32: "2x4x4",
            64: "4x4x4", 128: "4x4x8", 256: "4x8x8", 512: "8x8x8"}
_GRID_2D = {1: "1x1", 4: "2x2", 8: "2x4", 16: "4x4", 32: "4x8", 64: "8x8", 128: "8x16",
            256: "16x16"}
_FAMILY_OF_KIND = (("v6 lite", "v6e"), ("v5 lite", "v5e"), ("v5", "v5p"), ("v4", "v4"))


def topology_name(accelerator: str) -> str:
    """`v5p-64` -> "v5p:2x4x4". Raises ValueError naming the accelerator when it has none."""
    acc = parse_accelerator(accelerator)
    if acc.family not in _TPU_NAMES:
        raise ValueError(f"hardware.accelerator={accelerator!r}: no compile-only topology for "
                         f"{acc.family} (TPU families only: {sorted(_TPU_NAMES)}; docs/scale.md "
                         "says why GPU targets cannot be compiled here)")
    if acc.devices is None:
        raise ValueError(f"hardware.accelerator={accelerator!r}: the name carries no size "
                         "(expected e.g. 'v5p-64')")
    grids = _GRID_2D if acc.family in ("v5e", "v6e") else _GRID_3D
    if acc.devices not in grids:
        raise ValueError(f"hardware.accelerator={accelerator!r}: {acc.devices} chips is not a "
                         f"slice shape this tool knows ({sorted(grids)} chips); pass --topology")
    return f"{_TPU_NAMES[acc.family]}:{grids[acc.devices]}"


def family_of(devices) -> str:
    kind = devices[0].device_kind.lower()
    for text, family in _FAMILY_OF_KIND:
        if text in kind:
            return family
    raise ValueError(f"topology: unknown TPU device kind {devices[0].device_kind!r}")


def devices_for(topology: str):
    """Compile-only devices of a libtpu topology name ("v5p:2x4x4"). Raises ValueError naming
    the topology when libtpu does not know it."""
    if not isinstance(topology, str) or not re.fullmatch(r"[a-z0-9]+:\d+(x\d+){1,2}", topology):
        raise ValueError(f"--topology={topology!r}: expected FAMILY:GRID like 'v5p:2x2x1' or "
                         "'v6e:8x8'")
    import os

    # libtpu takes a machine-wide lock file by default: a second process (another compile, a
    # test) would fail with "Internal error when accessing libtpu multi-process lockfile". Compile
    # -only use owns no chip, so several processes may load it.
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    from jax.experimental import topologies

    try:
        desc = topologies.get_topology_desc(platform="tpu", topology_name=topology)
    except Exception as e:  # libtpu raises XlaRuntimeError / RuntimeError with long traces
        first = str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__
        raise ValueError(f"--topology={topology!r}: libtpu does not know it ({first})") from None
    return list(desc.devices)


def libtpu_available() -> str | None:
    """None when compile-only TPU devices can be made here, else the reason."""
    try:
        import libtpu  # noqa: F401
    except ImportError as e:
        return f"libtpu is not installed ({e}); pip install -r requirements-tpu.txt"
    try:
        devices_for("v5p:2x2x1")
    except ValueError as e:
        return str(e)
    return None
