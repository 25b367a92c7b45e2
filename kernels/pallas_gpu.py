"""Pallas strategy "atomic" (GPU Triton; also runs in CPU interpret mode) of the fused log-prob /
entropy.

Shape letters: N tokens, D model width, V vocabulary; Bn / Bv / Bd block sizes; Np / Vp / Dp sizes
padded up to a block multiple; nT = Np / Bn token blocks, nV = Vp / Bv vocab blocks.

GPU grid cells run concurrently, so no kernel reduces across the grid:

* forward, grid (nT, nV): each tile [Bn, Bv] writes its partial online-softmax state (max m, sum s,
  entropy accumulator t, target logit) per token to [nV, Np, 1] arrays (column layout: GPU memory
  is not tiled, unlike TPU's (8, 128) tiles, see pallas_tpu.py); an XLA epilogue merges them.
* backward, grid (nT, nV): one kernel recomputes the tile once and atomically adds its share into
  float32 d hidden and d unembed buffers, in Bd-wide slices of D so that Triton tiles stay small.

Inputs are padded to block multiples (Triton blocks are powers of two); padded vocab columns are
masked to -inf (zero gradient); padded tokens have zero hidden state and zero cotangents.
This path cannot be compiled on the CPU-only development machine (no CUDA toolchain); its math is
checked in interpret mode by tests/test_kernels.py.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl

from ._common import cdiv, dlogits
from ._pallas_common import compiler_params, merge_partials, pad_to, tile_logits


def _cols(j, bn, bv):
    return j * bv + lax.broadcasted_iota(jnp.int32, (bn, bv), 1)


def _tile_dz(h_ref, w_ref, tgt_ref, m_ref, r_ref, ent_ref, glp_ref, gent_ref, j, *, v, bd,
             inv_temp):
    """d(logits) of one tile, float32 [Bn, Bv], zero on padded columns."""
    z = tile_logits(h_ref, w_ref, bd, inv_temp)
    cols = _cols(j, z.shape[0], z.shape[1])
    valid = cols < v
    z = jnp.where(valid, z, -jnp.inf)
    return dlogits(z, m_ref[...], r_ref[...], ent_ref[...], cols == tgt_ref[...], glp_ref[...],
                   gent_ref[...], valid, inv_temp)


def _fwd_kernel(h_ref, w_ref, tgt_ref, m_ref, s_ref, t_ref, zy_ref, *, v, bd, inv_temp):
    j = pl.program_id(1)
    z = tile_logits(h_ref, w_ref, bd, inv_temp)
    cols = _cols(j, z.shape[0], z.shape[1])
    valid = cols < v  # every tile has >= 1 valid column, so m below is finite
    z = jnp.where(valid, z, -jnp.inf)
    m = jnp.max(z, axis=1, keepdims=True)
    e = jnp.exp(z - m)
    m_ref[...] = m
    s_ref[...] = jnp.sum(e, axis=1, keepdims=True)
    t_ref[...] = jnp.sum(jnp.where(valid, e * (z - m), 0.0), axis=1, keepdims=True)
    zy_ref[...] = jnp.sum(jnp.where(cols == tgt_ref[...], z, 0.0), axis=1, keepdims=True)


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


def _prepare(hidden_ND, unembed_DV, targets_N, cfg):
    n, d = hidden_ND.shape
    v = unembed_DV.shape[1]
    bn, bv = cfg.block_n, cfg.block_v
    bd = cfg.block_d if cfg.block_d is not None and cfg.block_d < d else None
    np_, vp = cdiv(n, bn) * bn, cdiv(v, bv) * bv
    dp = d if bd is None else cdiv(d, bd) * bd
    cdt = jnp.promote_types(hidden_ND.dtype, unembed_DV.dtype)
    h = pad_to(pad_to(hidden_ND.astype(cdt), 0, np_), 1, dp)
    w = pad_to(pad_to(unembed_DV.astype(cdt), 0, dp), 1, vp)
    tgt = pad_to(targets_N.astype(jnp.int32), 0, np_)[:, None]
    return h, w, tgt, bd


def _specs(bn, bv, dp):
    h = pl.BlockSpec((bn, dp), lambda i, j: (i, 0))
    w = pl.BlockSpec((dp, bv), lambda i, j: (0, j))
    tok = pl.BlockSpec((bn, 1), lambda i, j: (i, 0))
    return h, w, tok


def forward(hidden_ND, unembed_DV, targets_N, temperature, cfg, backend, interpret):
    """(logp_N, entropy_N, m_N, r_N) float32."""
    n = hidden_ND.shape[0]
    v = unembed_DV.shape[1]
    h, w, tgt, bd = _prepare(hidden_ND, unembed_DV, targets_N, cfg)
    (np_, dp), vp = h.shape, w.shape[1]
    bn, bv = cfg.block_n, cfg.block_v
    nt, nv = np_ // bn, vp // bv
    h_spec, w_spec, tok_spec = _specs(bn, bv, dp)
    part = jax.ShapeDtypeStruct((nv, np_, 1), jnp.float32)
    part_spec = pl.BlockSpec((None, bn, 1), lambda i, j: (j, i, 0))
    kernel = functools.partial(_fwd_kernel, v=v, bd=bd, inv_temp=1.0 / temperature)
    m_p, s_p, t_p, zy_p = pl.pallas_call(
        kernel, grid=(nt, nv), in_specs=[h_spec, w_spec, tok_spec],
        out_specs=[part_spec] * 4, out_shape=[part] * 4, interpret=interpret,
        compiler_params=compiler_params(backend, ("parallel", "parallel"), interpret),
    )(h, w, tgt)
    logp, ent, m, r = merge_partials(m_p, s_p, t_p, zy_p)  # see _common.merge_stats
    return logp[:n, 0], ent[:n, 0], m[:n, 0], r[:n, 0]


def backward(hidden_ND, unembed_DV, targets_N, m, r, ent, g_lp, g_ent, temperature, cfg,
             backend, interpret):
    """(d hidden_ND, d unembed_DV) in the input dtypes."""
    n, d = hidden_ND.shape
    v = unembed_DV.shape[1]
    h, w, tgt, bd = _prepare(hidden_ND, unembed_DV, targets_N, cfg)
    (np_, dp), vp = h.shape, w.shape[1]
    bn, bv = cfg.block_n, cfg.block_v
    nt, nv = np_ // bn, vp // bv
    col = lambda x: pad_to(x.astype(jnp.float32), 0, np_)[:, None]
    tok_args = (tgt, col(m), col(r), col(ent), col(g_lp), col(g_ent))
    kw = dict(v=v, bd=bd, inv_temp=1.0 / temperature)
    h_spec, w_spec, tok_spec = _specs(bn, bv, dp)
    full = lambda shape: pl.BlockSpec(shape, lambda i, j: (0, 0))
    dh, dw = pl.pallas_call(
        functools.partial(_bwd_atomic_kernel, **kw), grid=(nt, nv),
        in_specs=[h_spec, w_spec] + [tok_spec] * 6 + [full((np_, dp)), full((dp, vp))],
        out_specs=[full((np_, dp)), full((dp, vp))],
        out_shape=[jax.ShapeDtypeStruct((np_, dp), jnp.float32),
                   jax.ShapeDtypeStruct((dp, vp), jnp.float32)],
        input_output_aliases={8: 0, 9: 1}, interpret=interpret,
        compiler_params=compiler_params(backend, ("parallel", "parallel"), interpret),
    )(h, w, *tok_args, jnp.zeros((np_, dp), jnp.float32), jnp.zeros((dp, vp), jnp.float32))
    return dh[:n, :d].astype(hidden_ND.dtype), dw[:d, :v].astype(unembed_DV.dtype)
