"""Chunked pure-XLA implementation: never materialises the [N, V] logits.

Shape letters: N tokens, D model width, V vocabulary; Bn / Bv token / vocab block sizes.

Layout: an outer `fori_loop` over token blocks and an inner `scan` over vocab blocks with an online
log-sum-exp (running max m, sum s, entropy accumulator t). The custom VJP saves (m, r = log s, H)
per token and recomputes each logits tile exactly once in the backward, where the closed form gives
the tile's d logits; d hidden is accumulated over vocab blocks and d unembed over token blocks.

Ragged edges are handled without padding copies of the (large) inputs: the last block is shifted
back to end at N (or V) and overlaps its predecessor; overlapping columns are masked out of the
online statistics and of the gradients, overlapping tokens are recomputed (identical values
overwritten) and excluded from d unembed.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax

from ._common import dlogits, entropy_from_stats, merge_stats, nan_if_out_of_range

# Tuned on CPU at (N, D, V) = (2048, 512, 32768); see benchmarks/bench_logprob_entropy.py.
DEFAULT_BLOCK_N = 2048
DEFAULT_BLOCK_V = 2048


def _block_start(j, block: int, total: int):
    """Start of block j, shifted back so the block never runs past `total`."""
    return jnp.minimum(j * block, total - block)


def _vocab_tile(h_nd, w_dv, j, bv: int, v: int, inv_temp):
    """Scaled logits of vocab block j for the given tokens; mask of the columns new to block j."""
    start = _block_start(j, bv, v)
    w_blk = lax.dynamic_slice_in_dim(w_dv, start, bv, axis=1)
    z = jnp.dot(h_nd, w_blk, preferred_element_type=jnp.float32).astype(jnp.float32) * inv_temp
    cols = start + lax.broadcasted_iota(jnp.int32, (1, bv), 1)
    fresh = cols >= j * bv
    return z, cols, fresh, w_blk


def _fwd_token_block(h_nd, tgt_n, w_dv, *, bv: int, inv_temp):
    """Per-token (logp, H, m, r) for one token block, scanning over the vocabulary."""
    bn = h_nd.shape[0]
    v = w_dv.shape[1]
    tgt = tgt_n[:, None]

    def body(carry, j):
        m, s, t, zy = carry
        z, cols, fresh, _ = _vocab_tile(h_nd, w_dv, j, bv, v, inv_temp)
        zm = jnp.where(fresh, z, -jnp.inf)
        m_b = jnp.max(zm, axis=1, keepdims=True)
        e = jnp.exp(zm - m_b)
        s_b = jnp.sum(e, axis=1, keepdims=True)
        t_b = jnp.sum(jnp.where(fresh, e * (zm - m_b), 0.0), axis=1, keepdims=True)
        zy = zy + jnp.sum(jnp.where(fresh & (cols == tgt), z, 0.0), axis=1, keepdims=True)
        m, s, t = merge_stats(m, s, t, m_b, s_b, t_b)
        return (m, s, t, zy), None

    init = (jnp.full((bn, 1), -jnp.inf, jnp.float32),) + tuple(
        jnp.zeros((bn, 1), jnp.float32) for _ in range(3))
    (m, s, t, zy), _ = lax.scan(body, init, jnp.arange(-(-v // bv)))
    r = jnp.log(s)
    return (zy - m) - r, entropy_from_stats(s, t, r), m, r


def _forward(hidden_ND, unembed_DV, targets_N, temperature, bn, bv):
    n = hidden_ND.shape[0]
    inv_temp = 1.0 / temperature
    # Upcast/align dtypes once; matmuls then run in the common dtype with float32 accumulation.
    cdt = jnp.promote_types(hidden_ND.dtype, unembed_DV.dtype)
    h, w = hidden_ND.astype(cdt), unembed_DV.astype(cdt)
    tgt = targets_N.astype(jnp.int32)
    block = functools.partial(_fwd_token_block, w_dv=w, bv=bv, inv_temp=inv_temp)
    if bn == n:
        outs = block(h, tgt)
    else:
        def body(i, acc):
            start = _block_start(i, bn, n)
            sl = lambda x: lax.dynamic_slice_in_dim(x, start, bn)
            res = block(sl(h), sl(tgt))
            return tuple(lax.dynamic_update_slice_in_dim(a, x, start, 0) for a, x in zip(acc, res))
        outs = lax.fori_loop(0, -(-n // bn), body,
                             tuple(jnp.zeros((n, 1), jnp.float32) for _ in range(4)))
    return tuple(x[:, 0] for x in outs)  # logp, H, m, r


def _bwd_token_block(h_nd, tgt_n, m, r, ent, g_lp, g_ent, keep_n, dw_acc, w_dv, *, bv, inv_temp):
    """d hidden of one token block; adds its kept tokens' share into dw_acc [D, V] float32."""
    v = w_dv.shape[1]
    tgt = tgt_n[:, None]
    cols_args = (m[:, None], r[:, None], ent[:, None])
    g_lp, g_ent = g_lp[:, None], g_ent[:, None]
    # Tokens recomputed by an overlapping last block must not be counted twice in d unembed.
    h_dw = h_nd if keep_n is None else jnp.where(keep_n[:, None], h_nd, 0)

    def body(carry, j):
        dh, dw = carry
        z, cols, fresh, w_blk = _vocab_tile(h_nd, w_dv, j, bv, v, inv_temp)
        dz = dlogits(z, *cols_args, cols == tgt, g_lp, g_ent, fresh, inv_temp).astype(h_nd.dtype)
        dh = dh + lax.dot_general(dz, w_blk, (((1,), (1,)), ((), ())),
                                  preferred_element_type=jnp.float32)
        dw_blk = lax.dot_general(h_dw, dz, (((0,), (0,)), ((), ())),
                                 preferred_element_type=jnp.float32)
        start = _block_start(j, bv, v)
        old = lax.dynamic_slice_in_dim(dw, start, bv, axis=1)
        dw = lax.dynamic_update_slice_in_dim(dw, old + dw_blk, start, axis=1)
        return (dh, dw), None

    dh0 = jnp.zeros(h_nd.shape, jnp.float32)
    (dh, dw_acc), _ = lax.scan(body, (dh0, dw_acc), jnp.arange(-(-v // bv)))
    return dh, dw_acc


def _backward(hidden_ND, unembed_DV, targets_N, m, r, ent, g_lp, g_ent, temperature, bn, bv):
    n, d = hidden_ND.shape
    v = unembed_DV.shape[1]
    inv_temp = 1.0 / temperature
    cdt = jnp.promote_types(hidden_ND.dtype, unembed_DV.dtype)
    h, w = hidden_ND.astype(cdt), unembed_DV.astype(cdt)
    tgt = targets_N.astype(jnp.int32)
    # Tokens whose logp is NaN (out-of-range target under jit) must not poison the gradients.
    g_lp = jnp.where(jnp.isnan(g_lp), 0.0, g_lp).astype(jnp.float32)
    g_ent = g_ent.astype(jnp.float32)
    block = functools.partial(_bwd_token_block, w_dv=w, bv=bv, inv_temp=inv_temp)
    dw0 = jnp.zeros((d, v), jnp.float32)
    if bn == n:
        dh, dw = block(h, tgt, m, r, ent, g_lp, g_ent, None, dw0)
    else:
        def body(i, carry):
            dh_all, dw = carry
            start = _block_start(i, bn, n)
            sl = lambda x: lax.dynamic_slice_in_dim(x, start, bn)
            keep = (start + jnp.arange(bn)) >= i * bn
            dh, dw = block(sl(h), sl(tgt), sl(m), sl(r), sl(ent), sl(g_lp), sl(g_ent), keep, dw)
            return lax.dynamic_update_slice_in_dim(dh_all, dh, start, 0), dw
        dh, dw = lax.fori_loop(0, -(-n // bn), body, (jnp.zeros((n, d), jnp.float32), dw0))
    return dh.astype(hidden_ND.dtype), dw.astype(unembed_DV.dtype)


@functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4, 5))
def _fused(hidden_ND, unembed_DV, targets_N, temperature, bn, bv):
    logp, ent, _, _ = _forward(hidden_ND, unembed_DV, targets_N, temperature, bn, bv)
    return logp, ent


def _fused_fwd(hidden_ND, unembed_DV, targets_N, temperature, bn, bv):
    logp, ent, m, r = _forward(hidden_ND, unembed_DV, targets_N, temperature, bn, bv)
    return (logp, ent), (hidden_ND, unembed_DV, targets_N, m, r, ent)


def _fused_bwd(temperature, bn, bv, res, cts):
    hidden_ND, unembed_DV, targets_N, m, r, ent = res
    g_lp, g_ent = cts
    dh, dw = _backward(hidden_ND, unembed_DV, targets_N, m, r, ent, g_lp, g_ent, temperature,
                       bn, bv)
    return dh, dw, None


_fused.defvjp(_fused_fwd, _fused_bwd)


def logprob_entropy_chunked(hidden_ND, unembed_DV, targets_N, *, temperature: float = 1.0,
                            block_n: int = DEFAULT_BLOCK_N, block_v: int = DEFAULT_BLOCK_V):
    """(logp_N, entropy_N) float32 without [N, V] intermediates; custom VJP in hidden and unembed.

    Not validated (see `api.logprob_entropy`). block_n / block_v are clipped to N / V.
    """
    n, v = hidden_ND.shape[0], unembed_DV.shape[1]
    bn, bv = min(int(block_n), n), min(int(block_v), v)
    logp, ent = _fused(hidden_ND, unembed_DV, targets_N, float(temperature), bn, bv)
    return nan_if_out_of_range(logp, targets_N, v), ent
