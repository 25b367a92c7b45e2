"""Pallas implementation (TPU Mosaic, GPU Triton, CPU interpret) of the fused log-prob / entropy.

Shape letters: N tokens, D model width, V vocabulary; Bn / Bv / Bd block sizes; Np / Vp / Dp sizes
padded up to a block multiple; nT = Np / Bn token blocks, nV = Vp / Bv vocab blocks.

Kernels (the tile math is shared; only how a reduction over the grid is done depends on backend):

* forward, grid (nT, nV), every cell independent: each tile [Bn, Bv] of logits yields its partial
  online-softmax state (max m, sum s, entropy accumulator t, target logit) per token, written to
  [nV, Np, 1] arrays; a tiny XLA epilogue merges the nV partials (1/Bv of the size of the logits).
  No reduction across the grid, so the same kernel is valid on TPU and GPU.
* backward, strategy "sequential" (TPU, and CPU interpret): two kernels, d hidden with grid
  (nT, nV) accumulating over the vocab axis in its resident output block, d unembed with grid
  (nV, nT) accumulating over the token axis; each recomputes its logits tile (TPU grids run in
  order, the reduction axis is marked "arbitrary").
* backward, strategy "atomic" (GPU, where grid cells run concurrently): one kernel with grid
  (nT, nV) that recomputes the tile once and atomically adds its share into float32 d hidden and
  d unembed buffers, in Bd-wide slices of D so that Triton tiles stay small.

Padded vocab columns are masked to -inf (zero gradient); padded tokens have zero hidden state and
zero cotangents and are dropped from the outputs.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl

from ._common import cdiv, dlogits, entropy_from_stats, nan_if_out_of_range


@dataclasses.dataclass(frozen=True)
class BlockConfig:
    block_n: int  # tokens per tile
    block_v: int  # vocab columns per tile
    block_d: int | None  # width of the inner D loop; None = whole D in one dot
    strategy: str  # "sequential" (ordered grid) or "atomic" (concurrent grid + atomic adds)


# Per-backend defaults. TPU: tiles of (256 x D) and (D x 512) bf16 fit VMEM for D <= ~4k with
# double buffering; GPU: Triton-sized tiles (powers of two, >= 16). Only the CPU row is measured
# (interpret mode); TPU/GPU rows are starting points for benchmarks/gpu_logprob_entropy.sh.
BLOCK_TABLE = {
    "tpu": BlockConfig(block_n=256, block_v=512, block_d=None, strategy="sequential"),
    "gpu": BlockConfig(block_n=64, block_v=128, block_d=64, strategy="atomic"),
    "cpu": BlockConfig(block_n=128, block_v=512, block_d=None, strategy="sequential"),
}
_TPU_VMEM_LIMIT = 96 * 2**20


def _backend() -> str:
    b = jax.default_backend()
    return "gpu" if b in ("gpu", "cuda", "rocm") else b


def _compiler_params(backend: str, semantics: tuple[str, ...], interpret: bool):
    if interpret:
        return None
    if backend == "tpu":
        from jax.experimental.pallas import tpu as pltpu

        return pltpu.CompilerParams(dimension_semantics=semantics,
                                    vmem_limit_bytes=_TPU_VMEM_LIMIT)
    if backend == "gpu":
        from jax.experimental.pallas import triton as plgpu

        return plgpu.CompilerParams(num_warps=4, num_stages=2)
    return None


# ---------------------------------------------------------------------------------------------
# Tile math, shared by all kernels.


def _tile_logits(h_ref, w_ref, bd, inv_temp):
    """Scaled logits [Bn, Bv] (float32) of the resident tiles h_ref [Bn, Dp], w_ref [Dp, Bv]."""
    dp = h_ref.shape[1]
    if bd is None or bd >= dp:
        acc = jnp.dot(h_ref[...], w_ref[...], preferred_element_type=jnp.float32)
    else:
        def body(k, acc):
            sl = pl.ds(pl.multiple_of(k * bd, bd), bd)
            return acc + jnp.dot(h_ref[:, sl], w_ref[sl, :], preferred_element_type=jnp.float32)

        acc = lax.fori_loop(0, dp // bd, body,
                            jnp.zeros((h_ref.shape[0], w_ref.shape[1]), jnp.float32))
    return acc.astype(jnp.float32) * inv_temp


def _cols(j, bn, bv):
    return j * bv + lax.broadcasted_iota(jnp.int32, (bn, bv), 1)


def _tile_dz(h_ref, w_ref, tgt_ref, m_ref, r_ref, ent_ref, glp_ref, gent_ref, j, *, v, bd,
             inv_temp):
    """d(logits) of one tile, float32 [Bn, Bv], zero on padded columns."""
    z = _tile_logits(h_ref, w_ref, bd, inv_temp)
    cols = _cols(j, z.shape[0], z.shape[1])
    valid = cols < v
    z = jnp.where(valid, z, -jnp.inf)
    return dlogits(z, m_ref[...], r_ref[...], ent_ref[...], cols == tgt_ref[...], glp_ref[...],
                   gent_ref[...], valid, inv_temp)


# ---------------------------------------------------------------------------------------------
# Kernels.


def _fwd_kernel(h_ref, w_ref, tgt_ref, m_ref, s_ref, t_ref, zy_ref, *, v, bd, inv_temp):
    j = pl.program_id(1)
    z = _tile_logits(h_ref, w_ref, bd, inv_temp)
    cols = _cols(j, z.shape[0], z.shape[1])
    valid = cols < v  # every tile has >= 1 valid column, so m below is finite
    z = jnp.where(valid, z, -jnp.inf)
    m = jnp.max(z, axis=1, keepdims=True)
    e = jnp.exp(z - m)
    m_ref[...] = m
    s_ref[...] = jnp.sum(e, axis=1, keepdims=True)
    t_ref[...] = jnp.sum(jnp.where(valid, e * (z - m), 0.0), axis=1, keepdims=True)
    zy_ref[...] = jnp.sum(jnp.where(cols == tgt_ref[...], z, 0.0), axis=1, keepdims=True)


def _dh_kernel(h_ref, w_ref, *refs, v, bd, inv_temp):
    tok_refs, dh_ref = refs[:6], refs[6]
    j = pl.program_id(1)

    @pl.when(j == 0)
    def _():
        dh_ref[...] = jnp.zeros_like(dh_ref)

    dz = _tile_dz(h_ref, w_ref, *tok_refs, j, v=v, bd=bd, inv_temp=inv_temp)
    dh_ref[...] += lax.dot_general(dz.astype(w_ref.dtype), w_ref[...], (((1,), (1,)), ((), ())),
                                   preferred_element_type=jnp.float32)


def _dw_kernel(h_ref, w_ref, *refs, v, bd, inv_temp):
    tok_refs, dw_ref = refs[:6], refs[6]
    j, i = pl.program_id(0), pl.program_id(1)

    @pl.when(i == 0)
    def _():
        dw_ref[...] = jnp.zeros_like(dw_ref)

    dz = _tile_dz(h_ref, w_ref, *tok_refs, j, v=v, bd=bd, inv_temp=inv_temp)
    dw_ref[...] += lax.dot_general(h_ref[...], dz.astype(h_ref.dtype), (((0,), (0,)), ((), ())),
                                   preferred_element_type=jnp.float32)


def _bwd_atomic_kernel(h_ref, w_ref, *refs, v, bd, inv_temp):
    from jax.experimental.pallas import triton as plgpu

    tok_refs, dh_ref, dw_ref = refs[:6], refs[8], refs[9]  # refs[6:8]: aliased zero inputs
    i, j = pl.program_id(0), pl.program_id(1)
    bn, bv = h_ref.shape[0], w_ref.shape[1]
    dp = h_ref.shape[1]
    bd = dp if bd is None else bd
    dz = _tile_dz(h_ref, w_ref, *tok_refs, j, v=v, bd=bd, inv_temp=inv_temp).astype(h_ref.dtype)
    rows, cols = pl.ds(i * bn, bn), pl.ds(j * bv, bv)

    def body(k, carry):
        sl = pl.ds(pl.multiple_of(k * bd, bd), bd)
        dh = lax.dot_general(dz, w_ref[sl, :], (((1,), (1,)), ((), ())),
                             preferred_element_type=jnp.float32)
        plgpu.atomic_add(dh_ref, (rows, sl), dh)
        dw = lax.dot_general(h_ref[:, sl], dz, (((0,), (0,)), ((), ())),
                             preferred_element_type=jnp.float32)
        plgpu.atomic_add(dw_ref, (sl, cols), dw)
        return carry

    lax.fori_loop(0, dp // bd, body, 0)


# ---------------------------------------------------------------------------------------------
# Drivers.


def _pad_to(x, axis, size, value=0):
    extra = size - x.shape[axis]
    if extra == 0:
        return x
    pads = [(0, 0)] * x.ndim
    pads[axis] = (0, extra)
    return jnp.pad(x, pads, constant_values=value)


def _prepare(hidden_ND, unembed_DV, targets_N, cfg: BlockConfig):
    n, d = hidden_ND.shape
    v = unembed_DV.shape[1]
    bn, bv = cfg.block_n, cfg.block_v
    bd = cfg.block_d if cfg.block_d is not None and cfg.block_d < d else None
    np_, vp = cdiv(n, bn) * bn, cdiv(v, bv) * bv
    dp = d if bd is None else cdiv(d, bd) * bd
    cdt = jnp.promote_types(hidden_ND.dtype, unembed_DV.dtype)
    h = _pad_to(_pad_to(hidden_ND.astype(cdt), 0, np_), 1, dp)
    w = _pad_to(_pad_to(unembed_DV.astype(cdt), 0, dp), 1, vp)
    tgt = _pad_to(targets_N.astype(jnp.int32), 0, np_)[:, None]
    return h, w, tgt, bd


def _specs(bn, bv, dp, token_first: bool):
    """BlockSpecs for (h, w, 6 per-token [Np, 1] arrays) on a grid ordered (i, j) or (j, i)."""
    if token_first:
        h = pl.BlockSpec((bn, dp), lambda i, j: (i, 0))
        w = pl.BlockSpec((dp, bv), lambda i, j: (0, j))
        tok = pl.BlockSpec((bn, 1), lambda i, j: (i, 0))
    else:
        h = pl.BlockSpec((bn, dp), lambda j, i: (i, 0))
        w = pl.BlockSpec((dp, bv), lambda j, i: (0, j))
        tok = pl.BlockSpec((bn, 1), lambda j, i: (i, 0))
    return h, w, tok


def _forward(hidden_ND, unembed_DV, targets_N, temperature, cfg, backend, interpret):
    n = hidden_ND.shape[0]
    v = unembed_DV.shape[1]
    h, w, tgt, bd = _prepare(hidden_ND, unembed_DV, targets_N, cfg)
    (np_, dp), vp = h.shape, w.shape[1]
    bn, bv = cfg.block_n, cfg.block_v
    nt, nv = np_ // bn, vp // bv
    h_spec, w_spec, tok_spec = _specs(bn, bv, dp, token_first=True)
    part = jax.ShapeDtypeStruct((nv, np_, 1), jnp.float32)
    part_spec = pl.BlockSpec((None, bn, 1), lambda i, j: (j, i, 0))
    kernel = functools.partial(_fwd_kernel, v=v, bd=bd, inv_temp=1.0 / temperature)
    m_p, s_p, t_p, zy_p = pl.pallas_call(
        kernel, grid=(nt, nv), in_specs=[h_spec, w_spec, tok_spec],
        out_specs=[part_spec] * 4, out_shape=[part] * 4, interpret=interpret,
        compiler_params=_compiler_params(backend, ("parallel", "parallel"), interpret),
    )(h, w, tgt)
    # Merge the nV partial states (see _common.merge_stats); all m_p are finite.
    m = jnp.max(m_p, axis=0)
    a = jnp.exp(m_p - m)
    s = jnp.sum(a * s_p, axis=0)
    t = jnp.sum(a * (t_p + (m_p - m) * s_p), axis=0)
    r = jnp.log(s)
    logp = (jnp.sum(zy_p, axis=0) - m) - r
    ent = entropy_from_stats(s, t, r)
    return logp[:n, 0], ent[:n, 0], m[:n, 0], r[:n, 0]


def _backward(hidden_ND, unembed_DV, targets_N, m, r, ent, g_lp, g_ent, temperature, cfg,
              backend, interpret):
    n, d = hidden_ND.shape
    v = unembed_DV.shape[1]
    h, w, tgt, bd = _prepare(hidden_ND, unembed_DV, targets_N, cfg)
    (np_, dp), vp = h.shape, w.shape[1]
    bn, bv = cfg.block_n, cfg.block_v
    nt, nv = np_ // bn, vp // bv
    col = lambda x: _pad_to(x.astype(jnp.float32), 0, np_)[:, None]
    g_lp = jnp.where(jnp.isnan(g_lp), 0.0, g_lp)
    tok_args = (tgt, col(m), col(r), col(ent), col(g_lp), col(g_ent))
    kw = dict(v=v, bd=bd, inv_temp=1.0 / temperature)
    if cfg.strategy == "sequential":
        h_spec, w_spec, tok_spec = _specs(bn, bv, dp, token_first=True)
        dh = pl.pallas_call(
            functools.partial(_dh_kernel, **kw), grid=(nt, nv),
            in_specs=[h_spec, w_spec] + [tok_spec] * 6,
            out_specs=pl.BlockSpec((bn, dp), lambda i, j: (i, 0)),
            out_shape=jax.ShapeDtypeStruct((np_, dp), jnp.float32), interpret=interpret,
            compiler_params=_compiler_params(backend, ("parallel", "arbitrary"), interpret),
        )(h, w, *tok_args)
        h_spec, w_spec, tok_spec = _specs(bn, bv, dp, token_first=False)
        dw = pl.pallas_call(
            functools.partial(_dw_kernel, **kw), grid=(nv, nt),
            in_specs=[h_spec, w_spec] + [tok_spec] * 6,
            out_specs=pl.BlockSpec((dp, bv), lambda j, i: (0, j)),
            out_shape=jax.ShapeDtypeStruct((dp, vp), jnp.float32), interpret=interpret,
            compiler_params=_compiler_params(backend, ("parallel", "arbitrary"), interpret),
        )(h, w, *tok_args)
    elif cfg.strategy == "atomic":
        h_spec, w_spec, tok_spec = _specs(bn, bv, dp, token_first=True)
        full = lambda shape: pl.BlockSpec(shape, lambda i, j: (0, 0))
        dh, dw = pl.pallas_call(
            functools.partial(_bwd_atomic_kernel, **kw), grid=(nt, nv),
            in_specs=[h_spec, w_spec] + [tok_spec] * 6 + [full((np_, dp)), full((dp, vp))],
            out_specs=[full((np_, dp)), full((dp, vp))],
            out_shape=[jax.ShapeDtypeStruct((np_, dp), jnp.float32),
                       jax.ShapeDtypeStruct((dp, vp), jnp.float32)],
            input_output_aliases={8: 0, 9: 1}, interpret=interpret,
            compiler_params=_compiler_params(backend, ("parallel", "parallel"), interpret),
        )(h, w, *tok_args, jnp.zeros((np_, dp), jnp.float32), jnp.zeros((dp, vp), jnp.float32))
    else:
        raise ValueError(f"unknown Pallas strategy {cfg.strategy!r}")
    return dh[:n, :d].astype(hidden_ND.dtype), dw[:d, :v].astype(unembed_DV.dtype)


@functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4, 5, 6))
def _fused(hidden_ND, unembed_DV, targets_N, temperature, cfg, backend, interpret):
    logp, ent, _, _ = _forward(hidden_ND, unembed_DV, targets_N, temperature, cfg, backend,
                               interpret)
    return logp, ent


def _fused_fwd(hidden_ND, unembed_DV, targets_N, temperature, cfg, backend, interpret):
    logp, ent, m, r = _forward(hidden_ND, unembed_DV, targets_N, temperature, cfg, backend,
                               interpret)
    return (logp, ent), (hidden_ND, unembed_DV, targets_N, m, r, ent)


def _fused_bwd(temperature, cfg, backend, interpret, res, cts):
    hidden_ND, unembed_DV, targets_N, m, r, ent = res
    dh, dw = _backward(hidden_ND, unembed_DV, targets_N, m, r, ent, *cts, temperature, cfg,
                       backend, interpret)
    return dh, dw, None


_fused.defvjp(_fused_fwd, _fused_bwd)


def logprob_entropy_pallas(hidden_ND, unembed_DV, targets_N, *, temperature: float = 1.0,
                           block_n: int | None = None, block_v: int | None = None,
                           block_d: int | None = None, strategy: str | None = None,
                           interpret: bool | None = None):
    """(logp_N, entropy_N) float32 from Pallas kernels; custom VJP in hidden and unembed.

    Unset block sizes / strategy come from BLOCK_TABLE for the default backend; `interpret`
    defaults to True on CPU (the only way Pallas runs there). Not validated (see `api`).
    """
    backend = _backend()
    base = BLOCK_TABLE.get(backend, BLOCK_TABLE["cpu"])
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
    if interpret is None:
        interpret = backend not in ("tpu", "gpu")
    logp, ent = _fused(hidden_ND, unembed_DV, targets_N, float(temperature), cfg, backend,
                       bool(interpret))
    return nan_if_out_of_range(logp, targets_N, unembed_DV.shape[1]), ent
