"""Pieces shared by the Pallas kernels of both layouts (pallas_tpu.py, pallas_gpu.py).

Shape letters: N tokens, D model width, V vocabulary; Bn / Bv / Bd block sizes; Dp D padded to a
Bd multiple.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl

from ._common import entropy_from_stats


@dataclasses.dataclass(frozen=True)
class BlockConfig:
    block_n: int  # tokens per tile
    block_v: int  # vocab columns per tile
    block_d: int | None  # width of the inner D loop; None = whole D in one dot
    strategy: str  # "sequential" (ordered grid, lane-dense TPU layout) or "atomic" (GPU)


def compiler_params(backend: str, semantics: tuple[str, ...], interpret: bool,
                    vmem_limit: int | None = None):
    if interpret:
        return None
    if backend == "tpu":
        from jax.experimental.pallas import tpu as pltpu

        return pltpu.CompilerParams(dimension_semantics=semantics, vmem_limit_bytes=vmem_limit)
    if backend == "gpu":
        from jax.experimental.pallas import triton as plgpu

        return plgpu.CompilerParams(num_warps=4, num_stages=2)
    return None


def pad_to(x, axis, size, value=0):
    extra = size - x.shape[axis]
    if extra == 0:
        return x
    pads = [(0, 0)] * x.ndim
    pads[axis] = (0, extra)
    return jnp.pad(x, pads, constant_values=value)


def dot_precision(dtype):
    """Explicit matmul precision inside kernels: float32 inputs get full float32 accuracy, 16-bit
    inputs a single pass (Mosaic rejects an fp32 contract precision on bf16 operands, which a
    process-wide `jax_default_matmul_precision=highest` would otherwise request)."""
    return lax.Precision.HIGHEST if jnp.dtype(dtype).itemsize >= 4 else lax.Precision.DEFAULT


def tile_logits(h, w_ref, bd, inv_temp):
    """Scaled logits [Bn, Bv] (float32) of a hidden tile h [Bn, Dp] (value or ref) and the
    resident unembedding tile w_ref [Dp, Bv]; Bd-wide slices of D when bd is set."""
    dp = h.shape[1]
    if bd is None or bd >= dp:
        acc = jnp.dot(h[...], w_ref[...], preferred_element_type=jnp.float32,
                      precision=dot_precision(w_ref.dtype))
    else:
        def body(k, acc):
            sl = pl.ds(pl.multiple_of(k * bd, bd), bd)
            return acc + jnp.dot(h[:, sl], w_ref[sl, :], preferred_element_type=jnp.float32,
                                 precision=dot_precision(w_ref.dtype))

        acc = lax.fori_loop(0, dp // bd, body,
                            jnp.zeros((h.shape[0], w_ref.shape[1]), jnp.float32))
    return acc.astype(jnp.float32) * inv_temp


def merge_partials(m_p, s_p, t_p, zy_p):
    """Merges the forward's per-vocab-block partial states ([nV, ...] each, all m_p finite) into
    (log p of the target, entropy, max logit m, log-sum-exp offset r), float32 [...]."""
    m = jnp.max(m_p, axis=0)
    a = jnp.exp(m_p - m)
    s = jnp.sum(a * s_p, axis=0)
    t = jnp.sum(a * (t_p + (m_p - m) * s_p), axis=0)
    r = jnp.log(s)
    logp = (jnp.sum(zy_p, axis=0) - m) - r
    return logp, entropy_from_stats(s, t, r), m, r
