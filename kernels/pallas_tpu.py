"""Pallas strategy "sequential" (TPU Mosaic; also CPU interpret mode) of the fused log-prob /
entropy, with every per-token buffer lane-dense.

Shape letters: N tokens, D model width, V vocabulary; Bn / Bv / Bd block sizes; Np = N padded to a
Bn multiple, Dp = D padded to a Bd multiple (only when Bd is set and does not divide D);
nT = Np / Bn token blocks, nV = ceil(V / Bv) vocab blocks.

Layout. TPU memory tiles the last two dimensions of an array by (8, 128) (sublanes, lanes) for
32-bit data, so a per-token column [Np, 1] occupies Np x 128 words: 128x its size. Every per-token
buffer here has tokens on the last (lane) axis instead:

* forward, grid (nT, nV), every cell independent ("parallel" twice: both TensorCores of a v4/v5p
  chip share the grid). A tile of logits is transposed to [Bv, Bn] so that reductions over the
  vocabulary run across sublanes and give [1, Bn] rows directly; the tile's partial online-softmax
  state (max m, sum s, entropy accumulator t, target logit) goes to rows 0..3 of one [nV, 4, Np]
  float32 array. An XLA epilogue merges the nV partials ([4, Np] per vocab block: 4 / Bv of the
  logits' size).
* backward: the per-token inputs travel as one [8, Np] float32 array (rows m, r = log sum exp,
  H, g_logp, g_entropy, target id; ids are exact in float32 below 2^24) and are transposed to
  [Bn, 8] columns inside the kernel. d hidden: grid (nT, nV), the vocab axis "arbitrary",
  accumulating in a float32 VMEM scratch [Bn, Dp] and writing the [Bn, Dp] output block once, in
  the hidden dtype. d unembed: grid (nV, nT), the token axis "arbitrary", float32 scratch [Dp, Bv],
  output in the unembedding's dtype. No float32 [D, V] buffer is ever written to HBM.

The vocabulary is never padded (a padded copy of the unembedding costs D x V x 2 bytes whenever
Bv does not divide V, as for Qwen's 151936 = 128 x 1187): the last vocab block reads past V, its
columns are masked to -inf, and in the d hidden kernel the out-of-range unembedding columns are
zeroed before the matmul (they may hold anything, and 0 x NaN is NaN); writes past V are dropped.
Tokens are padded (N x D, small) with zero hidden states and zero cotangents.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl

from ._common import cdiv, dlogits
from ._pallas_common import (
    compiler_params,
    dot_precision,
    merge_partials,
    pad_to,
    tile_logits,
)

STAT_ROWS = 8  # one (8, 128) tile height of per-token backward inputs
_M, _R, _ENT, _GLP, _GENT, _TGT = range(6)
MAX_EXACT_ID = 2**24  # float32 represents every integer below this exactly


def _scratch(shape):
    from jax.experimental.pallas import tpu as pltpu

    return pltpu.VMEM(shape, jnp.float32)


def _fwd_kernel(h_ref, w_ref, tgt_ref, part_ref, *, v, bd, inv_temp):
    j = pl.program_id(1)
    z_VN = tile_logits(h_ref, w_ref, bd, inv_temp).T  # [Bv, Bn]: tokens on lanes
    rows = j * z_VN.shape[0] + lax.broadcasted_iota(jnp.int32, z_VN.shape, 0)
    valid = rows < v  # every tile has >= 1 valid row, so m below is finite
    z_VN = jnp.where(valid, z_VN, -jnp.inf)
    m = jnp.max(z_VN, axis=0, keepdims=True)
    e = jnp.exp(z_VN - m)
    part_ref[0:1, :] = m
    part_ref[1:2, :] = jnp.sum(e, axis=0, keepdims=True)
    part_ref[2:3, :] = jnp.sum(jnp.where(valid, e * (z_VN - m), 0.0), axis=0, keepdims=True)
    part_ref[3:4, :] = jnp.sum(jnp.where(rows == tgt_ref[...], z_VN, 0.0), axis=0, keepdims=True)


def _tile_dz(h_ref, w_ref, stats_ref, j, *, v, bd, inv_temp):
    """d(logits) of one tile, float32 [Bn, Bv], zero on columns >= V; the column-valid mask."""
    z = tile_logits(h_ref, w_ref, bd, inv_temp)
    st = stats_ref[...].T  # [Bn, 8]
    cols = j * z.shape[1] + lax.broadcasted_iota(jnp.int32, z.shape, 1)
    valid = cols < v
    z = jnp.where(valid, z, -jnp.inf)
    col = lambda k: st[:, k:k + 1]
    onehot = cols.astype(jnp.float32) == col(_TGT)
    return dlogits(z, col(_M), col(_R), col(_ENT), onehot, col(_GLP), col(_GENT), valid,
                   inv_temp)


def _dh_kernel(h_ref, w_ref, stats_ref, dh_ref, acc_ref, *, v, bd, inv_temp):
    j, nv = pl.program_id(1), pl.num_programs(1)

    @pl.when(j == 0)
    def _():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    dz = _tile_dz(h_ref, w_ref, stats_ref, j, v=v, bd=bd, inv_temp=inv_temp)
    bv = w_ref.shape[1]

    def accumulate(w):
        acc_ref[...] += lax.dot_general(dz.astype(w.dtype), w, (((1,), (1,)), ((), ())),
                                        preferred_element_type=jnp.float32,
                                        precision=dot_precision(w.dtype))

    if v % bv == 0:
        accumulate(w_ref[...])
    else:
        @pl.when(j < nv - 1)
        def _():
            accumulate(w_ref[...])

        @pl.when(j == nv - 1)
        def _():
            cols = j * bv + lax.broadcasted_iota(jnp.int32, (1, bv), 1)
            accumulate(jnp.where(cols < v, w_ref[...], jnp.zeros((), w_ref.dtype)))

    @pl.when(j == nv - 1)
    def _():
        dh_ref[...] = acc_ref[...].astype(dh_ref.dtype)


def _dw_kernel(h_ref, w_ref, stats_ref, dw_ref, acc_ref, *, v, bd, inv_temp):
    j, i, nt = pl.program_id(0), pl.program_id(1), pl.num_programs(1)

    @pl.when(i == 0)
    def _():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    dz = _tile_dz(h_ref, w_ref, stats_ref, j, v=v, bd=bd, inv_temp=inv_temp)
    acc_ref[...] += lax.dot_general(h_ref[...], dz.astype(h_ref.dtype), (((0,), (0,)), ((), ())),
                                    preferred_element_type=jnp.float32,
                                    precision=dot_precision(h_ref.dtype))

    @pl.when(i == nt - 1)
    def _():
        dw_ref[...] = acc_ref[...].astype(dw_ref.dtype)


def _prepare(hidden_ND, unembed_DV, cfg):
    n, d = hidden_ND.shape
    bd = cfg.block_d if cfg.block_d is not None and cfg.block_d < d else None
    np_ = cdiv(n, cfg.block_n) * cfg.block_n
    dp = d if bd is None else cdiv(d, bd) * bd
    cdt = jnp.promote_types(hidden_ND.dtype, unembed_DV.dtype)
    h = pad_to(pad_to(hidden_ND.astype(cdt), 0, np_), 1, dp)
    w = pad_to(unembed_DV.astype(cdt), 0, dp)
    return h, w, bd


def _grid(h, w, cfg):
    (np_, dp), v = h.shape, w.shape[1]
    return np_, dp, np_ // cfg.block_n, cdiv(v, cfg.block_v)


def forward(hidden_ND, unembed_DV, targets_N, temperature, cfg, backend, interpret, vmem_limit):
    """(logp_N, entropy_N, m_N, r_N) float32."""
    n, v = hidden_ND.shape[0], unembed_DV.shape[1]
    h, w, bd = _prepare(hidden_ND, unembed_DV, cfg)
    np_, dp, nt, nv = _grid(h, w, cfg)
    bn, bv = cfg.block_n, cfg.block_v
    tgt = pad_to(targets_N.astype(jnp.int32), 0, np_)[None, :]
    part = pl.pallas_call(
        functools.partial(_fwd_kernel, v=v, bd=bd, inv_temp=1.0 / temperature),
        grid=(nt, nv),
        in_specs=[pl.BlockSpec((bn, dp), lambda i, j: (i, 0)),
                  pl.BlockSpec((dp, bv), lambda i, j: (0, j)),
                  pl.BlockSpec((1, bn), lambda i, j: (0, i))],
        out_specs=pl.BlockSpec((None, 4, bn), lambda i, j: (j, 0, i)),
        out_shape=jax.ShapeDtypeStruct((nv, 4, np_), jnp.float32), interpret=interpret,
        compiler_params=compiler_params(backend, ("parallel", "parallel"), interpret,
                                        vmem_limit),
    )(h, w, tgt)
    m_p, s_p, t_p, zy_p = (part[:, k, :] for k in range(4))
    logp, ent, m, r = merge_partials(m_p, s_p, t_p, zy_p)  # see _common.merge_stats
    return logp[:n], ent[:n], m[:n], r[:n]


def backward(hidden_ND, unembed_DV, targets_N, m, r, ent, g_lp, g_ent, temperature, cfg,
             backend, interpret, vmem_limit):
    """(d hidden_ND, d unembed_DV) in the input dtypes."""
    n, d = hidden_ND.shape
    v = unembed_DV.shape[1]
    h, w, bd = _prepare(hidden_ND, unembed_DV, cfg)
    np_, dp, nt, nv = _grid(h, w, cfg)
    bn, bv = cfg.block_n, cfg.block_v
    rows = [m, r, ent, g_lp, g_ent, targets_N.astype(jnp.float32)]
    stats = jnp.stack([x.astype(jnp.float32) for x in rows]
                      + [jnp.zeros((n,), jnp.float32)] * (STAT_ROWS - len(rows)))
    stats = pad_to(stats, 1, np_)  # padded tokens: zero cotangents, so zero gradient
    kw = dict(v=v, bd=bd, inv_temp=1.0 / temperature)
    dh = pl.pallas_call(
        functools.partial(_dh_kernel, **kw), grid=(nt, nv),
        in_specs=[pl.BlockSpec((bn, dp), lambda i, j: (i, 0)),
                  pl.BlockSpec((dp, bv), lambda i, j: (0, j)),
                  pl.BlockSpec((STAT_ROWS, bn), lambda i, j: (0, i))],
        out_specs=pl.BlockSpec((bn, dp), lambda i, j: (i, 0)),
        out_shape=jax.ShapeDtypeStruct((np_, dp), hidden_ND.dtype),
        scratch_shapes=[_scratch((bn, dp))], interpret=interpret,
        compiler_params=compiler_params(backend, ("parallel", "arbitrary"), interpret,
                                        vmem_limit),
    )(h, w, stats)
    dw = pl.pallas_call(
        functools.partial(_dw_kernel, **kw), grid=(nv, nt),
        in_specs=[pl.BlockSpec((bn, dp), lambda j, i: (i, 0)),
                  pl.BlockSpec((dp, bv), lambda j, i: (0, j)),
                  pl.BlockSpec((STAT_ROWS, bn), lambda j, i: (0, i))],
        out_specs=pl.BlockSpec((dp, bv), lambda j, i: (0, j)),
        out_shape=jax.ShapeDtypeStruct((dp, v), unembed_DV.dtype),
        scratch_shapes=[_scratch((dp, bv))], interpret=interpret,
        compiler_params=compiler_params(backend, ("parallel", "arbitrary"), interpret,
                                        vmem_limit),
    )(h, w, stats)
    return dh[:n, :d], dw[:d]
