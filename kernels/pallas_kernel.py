"""Pallas implementation (TPU Mosaic, GPU Triton, CPU interpret) of the fused log-prob / entropy.

Shape letters: N tokens, D model width, V vocabulary; Bn / Bv / Bd block sizes.

Two strategies, one custom VJP:

* "sequential" (TPU, and CPU interpret): lane-dense layout, ordered grid reductions in VMEM;
  see pallas_tpu.py.
* "atomic" (GPU): concurrent grid, atomic adds into float32 gradient buffers; see pallas_gpu.py.

The target (platform, TPU generation) comes from `target.detect`: an explicit
`compile_target(...)`, else the mesh of the inputs' shardings, else the default backend. On TPU,
unset block sizes come from `tpu_blocks.choose_blocks(generation, N, D, V)`; explicit block
sizes (or a whole `BlockConfig`) override them.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import tseeds_jax.kernels.pallas_gpu as pallas_gpu
import tseeds_jax.kernels.pallas_tpu as pallas_tpu
import tseeds_jax.kernels.target as target

from ._common import nan_if_out_of_range
from ._pallas_common import BlockConfig
from .tpu_blocks import choose_blocks, vmem_limit_bytes

# Per-platform defaults. TPU: the generation- and shape-dependent choice of tpu_blocks.py fills
# block_n / block_v (this row only names the strategy); GPU: Triton-sized tiles (powers of two,
# >= 16), starting points for benchmarks/gpu_logprob_entropy.sh; CPU: interpret mode.
BLOCK_TABLE = {
    "tpu": BlockConfig(block_n=256, block_v=512, block_d=None, strategy="sequential"),
    "gpu": BlockConfig(block_n=64, block_v=128, block_d=64, strategy="atomic"),
    "cpu": BlockConfig(block_n=128, block_v=512, block_d=None, strategy="sequential"),
}


def block_config(platform: str, generation: str | None, n: int, d: int, v: int,
                 dtype=jnp.bfloat16) -> BlockConfig:
    """The default BlockConfig of an (N, D, V) problem for a platform ('tpu'/'gpu'/'cpu') and, on
    TPU, a generation ('v4'/'v5e'/'v5p'/'v6e'; None: the smallest-VMEM generation's choice)."""
    base = BLOCK_TABLE.get(platform, BLOCK_TABLE["cpu"])
    if platform != "tpu":
        return base
    bn, bv = choose_blocks(generation, n, d, v, jnp.dtype(dtype).itemsize)
    return BlockConfig(block_n=bn, block_v=bv, block_d=None, strategy="sequential")


def _forward(h, w, t, temperature, cfg, backend, interpret, vmem_limit):
    if cfg.strategy == "sequential":
        return pallas_tpu.forward(h, w, t, temperature, cfg, backend, interpret, vmem_limit)
    return pallas_gpu.forward(h, w, t, temperature, cfg, backend, interpret)


@functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4, 5, 6, 7))
def _fused(hidden_ND, unembed_DV, targets_N, temperature, cfg, backend, interpret, vmem_limit):
    logp, ent, _, _ = _forward(hidden_ND, unembed_DV, targets_N, temperature, cfg, backend,
                               interpret, vmem_limit)
    return logp, ent


def _fused_fwd(hidden_ND, unembed_DV, targets_N, temperature, cfg, backend, interpret,
               vmem_limit):
    logp, ent, m, r = _forward(hidden_ND, unembed_DV, targets_N, temperature, cfg, backend,
                               interpret, vmem_limit)
    return (logp, ent), (hidden_ND, unembed_DV, targets_N, m, r, ent)


def _fused_bwd(temperature, cfg, backend, interpret, vmem_limit, res, cts):
    hidden_ND, unembed_DV, targets_N, m, r, ent = res
    g_lp, g_ent = cts
    g_lp = jnp.where(jnp.isnan(g_lp), 0.0, g_lp)  # NaN logp of out-of-range ids (see _common)
    args = (hidden_ND, unembed_DV, targets_N, m, r, ent, g_lp, g_ent, temperature, cfg, backend,
            interpret)
    if cfg.strategy == "sequential":
        dh, dw = pallas_tpu.backward(*args, vmem_limit)
    else:
        dh, dw = pallas_gpu.backward(*args)
    return dh, dw, None


_fused.defvjp(_fused_fwd, _fused_bwd)


def logprob_entropy_pallas(hidden_ND, unembed_DV, targets_N, *, temperature: float = 1.0,
                           block_n: int | None = None, block_v: int | None = None,
                           block_d: int | None = None, strategy: str | None = None,
                           blocks: BlockConfig | None = None, interpret: bool | None = None):
    """(logp_N, entropy_N) float32 from Pallas kernels; custom VJP in hidden and unembed.

    blocks: a whole BlockConfig; block_n / block_v / block_d / strategy override single fields
    (of `blocks`, or of the target's default, `block_config`). `interpret` defaults to True when
    the target is not TPU/GPU (the only way Pallas runs on CPU). Not validated (see `api`).
    """
    tgt = target.detect(hidden_ND, unembed_DV, targets_N)
    n, d = hidden_ND.shape
    v = unembed_DV.shape[1]
    cdt = jnp.promote_types(hidden_ND.dtype, unembed_DV.dtype)
    base = blocks if blocks is not None else block_config(tgt.platform, tgt.generation, n, d, v,
                                                          cdt)
    cfg = BlockConfig(
        block_n=base.block_n if block_n is None else int(block_n),
        block_v=base.block_v if block_v is None else int(block_v),
        block_d=base.block_d if block_d is None else int(block_d),
        strategy=base.strategy if strategy is None else strategy,
    )
    if cfg.strategy not in ("sequential", "atomic"):
        raise ValueError(f"strategy must be 'sequential' or 'atomic', got {cfg.strategy!r}")
    if min(cfg.block_n, cfg.block_v) <= 0 or (cfg.block_d is not None and cfg.block_d <= 0):
        raise ValueError(f"block sizes must be positive, got {cfg}")
    if cfg.strategy == "sequential" and v >= pallas_tpu.MAX_EXACT_ID:
        raise ValueError(f"unembed_DV: vocabulary size V={v} must be below 2^24 for the "
                         "'sequential' Pallas kernels (target ids travel as float32)")
    if interpret is None:
        interpret = tgt.platform not in ("tpu", "gpu")
    if cfg.strategy == "sequential" and tgt.platform == "gpu" and not interpret:
        raise ValueError("strategy 'sequential' is the TPU layout (VMEM scratch, ordered grid); "
                         "on GPU use strategy='atomic'")
    vmem = vmem_limit_bytes(tgt.generation) if tgt.platform == "tpu" else None
    logp, ent = _fused(hidden_ND, unembed_DV, targets_N, float(temperature), cfg, tgt.platform,
                       bool(interpret), vmem)
    return nan_if_out_of_range(logp, targets_N, unembed_DV.shape[1]), ent
