"""Known accelerators: HBM per device and how many JAX devices a slice name stands for.

Names: Cloud TPU slice types (`v4-32`, `v5p-64`, `v5litepod-16` / `v5e-16`, `v6e-64`) and GPU
hosts (`8xH100`, `h200-8`, `H100`). In `v2`/`v3`/`v4`/`v5p` names the number counts TensorCores
(2 per chip; v4/v5p run one JAX device per chip, "megacore"); in `v5litepod`/`v5e`/`v6e` names it
counts chips (one device each) -- the rule `tpu_scripts/lib.sh` uses as well.
"""

from __future__ import annotations

import dataclasses
import re

GIB = 1 << 30


@dataclasses.dataclass(frozen=True)
class Accelerator:
    """`hbm_gib`: memory of one JAX device in GiB; `devices`: JAX devices in the slice/host
    (None when the name carries no count)."""

    name: str
    family: str
    hbm_gib: float
    devices: int | None
    devices_per_host: int | None = None

    @property
    def hbm_bytes(self) -> int:
        return int(self.hbm_gib * GIB)


# family -> (HBM GiB per JAX device, devices per number in the name)
FAMILIES: dict[str, tuple[float, float]] = {
    "v4": (32.0, 0.5),
    "v5e": (16.0, 1.0),
    "v5p": (95.0, 0.5),
    "v6e": (32.0, 1.0),
    "h100": (80.0, 1.0),
    "h200": (141.0, 1.0),
}
_ALIASES = {"v5litepod": "v5e", "v5lite": "v5e", "tpuv4": "v4", "tpuv5p": "v5p", "tpuv6e": "v6e"}


def parse_accelerator(name: str, *, hbm_gib: float | None = None) -> Accelerator:
    """`v5p-64` -> Accelerator("v5p-64", "v5p", 95.0, 32); `8xH100` -> (..., "h100", 80.0, 8).

    `hbm_gib` overrides the table (any name is then accepted, e.g. "cpu" for tests).
    """
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"accelerator {name!r}: expected a name like 'v5p-64', 'v6e-64' or "
                         f"'8xH100'; known families: {sorted(FAMILIES)}")
    text = name.strip().lower()
    family, count = text, None
    m = re.fullmatch(r"(\d+)\s*[x*]\s*([a-z0-9]+)", text)
    if m:
        family, count = m.group(2), int(m.group(1))
    else:
        m = re.fullmatch(r"([a-z0-9]+?)[-_x](\d+)", text)
        if m:
            family, count = m.group(1), int(m.group(2))
    family = _ALIASES.get(family, family)
    if family not in FAMILIES:
        if hbm_gib is None:
            raise ValueError(f"accelerator {name!r}: unknown family {family!r}; known: "
                             f"{sorted(FAMILIES)} (or give hbm_gib / --hbm-gib)")
        return Accelerator(name, family, float(hbm_gib), count, count)
    table_hbm, per_count = FAMILIES[family]
    devices = None
    if count is not None:
        devices = int(count * per_count)
        if devices < 1 or count * per_count != devices:
            raise ValueError(f"accelerator {name!r}: {count} is not a valid size for {family}")
    if hbm_gib is not None and hbm_gib <= 0:
        raise ValueError(f"hbm_gib={hbm_gib!r}: must be > 0")
    return Accelerator(name, family, float(hbm_gib or table_hbm), devices,
                       _devices_per_host(family, devices))


def _devices_per_host(family: str, devices: int | None) -> int | None:
    """JAX devices of one host (process): 4 on multi-host TPU slices (v4/v5p: 4 chips; v5e/v6e
    slices beyond 8 chips: 4), up to 8 on single-host v5e/v6e and GPU machines."""
    if devices is None:
        return None
    if family in ("v4", "v5p"):
        return min(devices, 4)
    if family in ("v5e", "v6e"):
        return devices if devices <= 8 else 4
    return min(devices, 8)
