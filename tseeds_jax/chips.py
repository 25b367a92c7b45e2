"""Chip facts, the project's one table: per accelerator family its peak FLOP/s, HBM bandwidth
and size, interconnect bandwidth, how JAX names its devices, and how many JAX devices a slice
name stands for. A leaf module (it imports nothing from tseeds_jax and JAX only inside `chip()`,
to read JAX's own TPU table), used by rl, scale, sampling and kernels.

Names: Cloud TPU slice types (`v4-32`, `v5p-64`, `v5litepod-16` / `v5e-16`, `v6e-64`) and GPU
hosts (`8xH100`, `h200-8`, `H100`). In `v2`/`v3`/`v4`/`v5p` names the number counts TensorCores
(2 per chip; v4/v5p run one JAX device per chip, "megacore"); in `v5litepod`/`v5e`/`v6e` names it
counts chips (one device each) -- the rule `tpu_scripts/lib.sh` uses as well.
"""

from __future__ import annotations

import dataclasses
import functools
import re

GIB = 1 << 30
# Usable share of a device's HBM for planned buffers: the rest is the runtime's reservation,
# collectives' scratch and fragmentation (the memory plan and the decode layout both use it).
FIT_FRACTION = 0.9


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


@dataclasses.dataclass(frozen=True)
class Chip:
    """One JAX device of a family: peak dense bf16 FLOP/s, HBM bandwidth (bytes/s), HBM (GiB),
    bidirectional inter-chip bandwidth (bytes/s: ICI on TPU, NVLink on GPU), and where each
    number comes from."""

    family: str
    bf16_flops: float
    hbm_bandwidth: float
    hbm_gib: float
    ici_bandwidth: float
    source: str

    @property
    def ici_one_way(self) -> float:
        """Bytes/s a device sends over the interconnect: half the bidirectional figure. A
        collective's bytes sent per device divided by this is its time (docs/scale.md rooflines,
        the decode layout's all-reduce term)."""
        return self.ici_bandwidth / 2


# The project's one chip table. TPU peak FLOP/s and HBM bandwidth are JAX's own
# (`jax.experimental.pallas.tpu.get_tpu_info_for_chip`: per TensorCore, times the cores of a
# megacore device), read by `chip()`; the values here are what it returned for jax 0.10.2 and
# are used only where JAX's table cannot be read. JAX has no interconnect figure and reports HBM
# per core before the runtime's reservation: those come from the cited pages.
# family -> (bf16 FLOP/s, HBM B/s, HBM GiB, ICI B/s bidirectional, devices per number in the
# name, source of the non-JAX numbers)
_TABLE: dict[str, tuple[float, float, float, float, float, str]] = {
    "v4": (275e12, 1230e9, 32.0, 300e9, 0.5,
           "cloud.google.com/tpu/docs/v4: 32 GiB HBM, ICI 2,400 Gbps per chip"),
    "v5e": (197e12, 820e9, 16.0, 400e9, 1.0,
            "cloud.google.com/tpu/docs/v5e: 16 GB HBM, bidirectional ICI 400 GBps per chip"),
    "v5p": (459e12, 2460e9, 95.0, 1200e9, 0.5,
            "cloud.google.com/tpu/docs/v5p: 95 GiB HBM, bidirectional ICI 1,200 GBps per chip"),
    "v6e": (920e12, 1640e9, 32.0, 800e9, 1.0,
            "cloud.google.com/tpu/docs/v6e: 32 GB HBM, bidirectional ICI 800 GBps per chip"),
    "h100": (989e12, 3350e9, 80.0, 900e9, 1.0,
             "nvidia.com H100 SXM datasheet: 989 TFLOP/s dense bf16, 3.35 TB/s, 80 GB, "
             "NVLink 900 GB/s"),
    "h200": (989e12, 4800e9, 141.0, 900e9, 1.0,
             "nvidia.com H200 SXM datasheet: 989 TFLOP/s dense bf16, 4.8 TB/s, 141 GB, "
             "NVLink 900 GB/s"),
}
TPU_MEGACORE = ("v4", "v5p")  # one JAX device = the chip's 2 TensorCores
# family -> (HBM GiB per JAX device, devices per number in the name)
FAMILIES: dict[str, tuple[float, float]] = {f: (row[2], row[4]) for f, row in _TABLE.items()}


@functools.cache
def chip(family: str) -> Chip:
    """The chip table's row of `family`; TPU FLOP/s and HBM bandwidth from JAX's table."""
    if family not in _TABLE:
        raise ValueError(f"chip family {family!r}: unknown; known: {sorted(_TABLE)}")
    flops, bw, hbm, ici, _, source = _TABLE[family]
    if family in ("v4", "v5e", "v5p", "v6e"):
        info = jax_tpu_info(family)
        if info is not None:
            flops, bw = info
            source = (f"peak bf16 and HBM bandwidth: JAX get_tpu_info_for_chip({family!r}); "
                      + source)
    return Chip(family, float(flops), float(bw), float(hbm), float(ici), source)


# device_kind strings as libtpu reports them (checked against the compile-only topologies
# v4:2x2x1, v5e:2x2, v5p:2x2x1, v6e:2x2 of libtpu 0.0.42.1) -> family.
TPU_DEVICE_KINDS = {
    "TPU v4": "v4",
    "TPU v5 lite": "v5e",
    "TPU v5e": "v5e",
    "TPU v5": "v5p",
    "TPU v5p": "v5p",
    "TPU v6 lite": "v6e",
    "TPU v6e": "v6e",
}
# Other device_kind text -> family, most specific first (GPU names, TPU kinds not listed above).
_KIND_FAMILY = (("v6 lite", "v6e"), ("v5 lite", "v5e"), ("v5e", "v5e"), ("v5", "v5p"),
                ("v4", "v4"), ("h200", "h200"), ("h100", "h100"))


def family_of_device_kind(kind: str) -> str | None:
    """The chip family of a JAX `device_kind` string, None when the table does not know it."""
    kind = kind.strip()
    if kind in TPU_DEVICE_KINDS:
        return TPU_DEVICE_KINDS[kind]
    low = kind.lower()
    for text, family in _KIND_FAMILY:
        if text in low:
            return family
    return None


def chip_of_devices(devices) -> Chip | None:
    """The chip table's row for these devices' kind; None off TPU/GPU or for a kind the table
    does not know (callers then use no bandwidth figures)."""
    d = devices[0]
    if d.platform not in ("tpu", "gpu", "cuda", "rocm"):
        return None
    family = family_of_device_kind(d.device_kind)
    return chip(family) if family else None


def jax_tpu_info(family: str) -> tuple[float, float] | None:
    """(bf16 FLOP/s, HBM bytes/s) of one JAX device of a TPU family from JAX, None when this JAX
    has no such table."""
    try:
        from jax._src.pallas.mosaic.tpu_info import ChipVersion
        from jax.experimental.pallas import tpu as pltpu
    except ImportError:
        return None
    cores = 2 if family in TPU_MEGACORE else 1
    info = pltpu.get_tpu_info_for_chip(ChipVersion(family), cores)
    return float(info.bf16_ops_per_second) * cores, float(info.mem_bw_bytes_per_second) * cores


_ALIASES = {"v5litepod": "v5e", "v5lite": "v5e", "tpuv4": "v4", "tpuv5p": "v5p", "tpuv6e": "v6e"}


def hbm_bytes(family: str | None, hbm_gib: float = 0.0) -> int | None:
    """HBM bytes of one device: `hbm_gib` (config.hardware.hbm_gib_per_device) when set, else the
    table's figure for `family`; None when neither is known."""
    if hbm_gib:
        return int(hbm_gib * GIB)
    if family in FAMILIES:
        return int(FAMILIES[family][0] * GIB)
    return None


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
