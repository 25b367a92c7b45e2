"""Which accelerator a kernel is being built for, and which TPU generation.

`jax.default_backend()` is not enough: a program compiled from a CPU-only machine for compile-only
TPU devices (`jax.experimental.topologies.get_topology_desc`) is traced while the default backend is
CPU. The target is therefore taken, in order, from

1. an explicit `compile_target(...)` context (for callers that lower with `in_shardings=` or
   `SingleDeviceSharding`s, whose devices are not visible while tracing);
2. the mesh of an input's sharding (`jax.ShapeDtypeStruct(..., sharding=NamedSharding(mesh, ...))`
   on TPU devices carries the platform and device kind into the trace), or the ambient mesh of
   `jax.sharding.set_mesh`;
3. the default backend and its first device.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses

import jax

from tseeds_jax.chips import TPU_DEVICE_KINDS

PLATFORMS = ("tpu", "gpu", "cpu")


@dataclasses.dataclass(frozen=True)
class Target:
    platform: str  # "tpu" | "gpu" | "cpu"
    generation: str | None = None  # TPU only: "v4" | "v5e" | "v5p" | "v6e" | None (unknown)


_OVERRIDE: contextvars.ContextVar[Target | None] = contextvars.ContextVar(
    "tseeds_kernel_target", default=None)


def tpu_generation(device_kind: str | None) -> str | None:
    """'v4' / 'v5e' / 'v5p' / 'v6e' for a TPU device_kind string, None when not known."""
    if device_kind is None:
        return None
    return TPU_DEVICE_KINDS.get(device_kind.strip())  # the chip table's (tseeds_jax/chips.py)


def _normalise_platform(p: str) -> str:
    p = p.lower()
    return "gpu" if p in ("gpu", "cuda", "rocm") else p


@contextlib.contextmanager
def compile_target(platform: str, generation: str | None = None):
    """Builds kernels traced inside the block for `platform` ('tpu'/'gpu'/'cpu') and, on TPU, the
    generation ('v4', 'v5e', 'v5p', 'v6e'), whatever the default backend is."""
    from .tpu_blocks import TPU_GENERATIONS

    plat = _normalise_platform(str(platform))
    if plat not in PLATFORMS:
        raise ValueError(f"compile_target: platform must be one of {PLATFORMS}, got {platform!r}")
    if generation is not None and (plat != "tpu" or generation not in TPU_GENERATIONS):
        raise ValueError(f"compile_target: generation must be one of {sorted(TPU_GENERATIONS)} "
                         f"on platform 'tpu', got {generation!r} on {plat!r}")
    token = _OVERRIDE.set(Target(plat, generation))
    try:
        yield
    finally:
        _OVERRIDE.reset(token)


def _from_abstract_device(dev) -> Target | None:
    plat = getattr(dev, "platform", None)
    if not plat:
        return None
    plat = _normalise_platform(plat)
    gen = tpu_generation(getattr(dev, "device_kind", None)) if plat == "tpu" else None
    return Target(plat, gen)


def detect(*arrays) -> Target:
    """The target of a kernel whose inputs are `arrays` (traced or concrete); see the module doc."""
    override = _OVERRIDE.get()
    if override is not None:
        return override
    for x in arrays:
        try:
            mesh = jax.typeof(x).sharding.mesh
        except Exception:  # no sharding in the aval (old-style tracer, numpy input): try the next
            continue
        t = _from_abstract_device(getattr(mesh, "abstract_device", None))
        if t is not None:
            return t
    try:
        t = _from_abstract_device(jax.sharding.get_abstract_mesh().abstract_device)
    except Exception:
        t = None
    if t is not None:
        return t
    plat = _normalise_platform(jax.default_backend())
    gen = tpu_generation(jax.devices()[0].device_kind) if plat == "tpu" else None
    return Target(plat, gen)
