"""Per-position top-K log-probabilities (and log-probs at given ids) without [N, V] logits.

Shape letters: N tokens, D model width, V vocabulary, K ids per token; Bn / Bv token / vocab
block sizes.

SIS (Selective Importance Sampling) needs, at every response position, the proposal policy's K
most likely next tokens with their log-probabilities, and the current policy's log-probabilities
at those same ids. Both are values only (SIS uses them without gradient), so these functions stop
gradients at their inputs and have no custom VJP.

One sweep over the vocabulary per token block (a `lax.map` over token blocks, a `scan` over vocab
blocks) keeps, per token: a running top-K of the logits (merged with each tile's own top-K), an
online log-sum-exp, and optionally the logits at K given ids (picked out of the tile that holds
them). The last vocab block is shifted back to end at V; its columns already seen are masked to
-inf (top-K, log-sum-exp) and skipped by the gather, so every column counts exactly once.
Ties between equal logits resolve to the lower vocabulary id, as `lax.top_k` on the full row.
Tokens are padded up to a multiple of Bn (a copy of the [N, D] hidden states, not of logits).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax

DEFAULT_BLOCK_N = 512
DEFAULT_BLOCK_V = 2048


def _check(hidden_ND, unembed_DV, k, ids_NK, temperature):
    if jnp.ndim(hidden_ND) != 2 or jnp.ndim(unembed_DV) != 2:
        raise ValueError(f"hidden_ND must be [N, D] and unembed_DV [D, V], got "
                         f"{jnp.shape(hidden_ND)} and {jnp.shape(unembed_DV)}")
    n, d = hidden_ND.shape
    if unembed_DV.shape[0] != d:
        raise ValueError(f"unembed_DV has D={unembed_DV.shape[0]}, hidden_ND has D={d}")
    v = unembed_DV.shape[1]
    if k is not None and (not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= v):
        raise ValueError(f"k must be an int in [1, V={v}], got {k!r}")
    if ids_NK is not None:
        if jnp.ndim(ids_NK) != 2 or ids_NK.shape[0] != n:
            raise ValueError(f"ids_NK must have shape [N={n}, K], got {jnp.shape(ids_NK)}")
        if not jnp.issubdtype(ids_NK.dtype, jnp.integer):
            raise TypeError(f"ids_NK must be integer, got {ids_NK.dtype}")
    if not isinstance(temperature, (int, float)) or not temperature > 0:
        raise ValueError(f"temperature must be a number > 0, got {temperature!r}")


def _block_sweep(h_nd, ids_nk, w_dv, *, k, bv, inv_temp):
    """(top logits [Bn, k], top ids [Bn, k], lse [Bn, 1], logits at ids [Bn, K']) of one block."""
    bn = h_nd.shape[0]
    v = w_dv.shape[1]
    kk = 0 if ids_nk is None else ids_nk.shape[1]
    nblocks = -(-v // bv)

    def body(carry, j):
        top_z, top_i, m, s, picked = carry
        start = jnp.minimum(j * bv, v - bv)
        w_blk = lax.dynamic_slice_in_dim(w_dv, start, bv, axis=1)
        z = jnp.dot(h_nd, w_blk, preferred_element_type=jnp.float32).astype(jnp.float32)
        z = z * inv_temp
        cols = start + lax.broadcasted_iota(jnp.int32, (1, bv), 1)
        fresh = cols >= j * bv
        zm = jnp.where(fresh, z, -jnp.inf)
        # online log-sum-exp
        m_new = jnp.maximum(m, jnp.max(zm, axis=1, keepdims=True))
        s = s * jnp.exp(m - m_new) + jnp.sum(jnp.exp(zm - m_new), axis=1, keepdims=True)
        m = m_new
        if k:
            tz, ti = lax.top_k(zm, k)
            cz = jnp.concatenate([top_z, tz], axis=1)
            ci = jnp.concatenate([top_i, ti.astype(jnp.int32) + start], axis=1)
            top_z, sel = lax.top_k(cz, k)  # running entries first: ties keep the lower id
            top_i = jnp.take_along_axis(ci, sel, axis=1)
        if kk:
            local = ids_nk - start
            inside = (local >= 0) & (local < bv) & (ids_nk >= j * bv)
            val = jnp.take_along_axis(z, jnp.clip(local, 0, bv - 1), axis=1)
            picked = picked + jnp.where(inside, val, 0.0)
        return (top_z, top_i, m, s, picked), None

    init = (jnp.full((bn, k), -jnp.inf, jnp.float32), jnp.zeros((bn, k), jnp.int32),
            jnp.full((bn, 1), -jnp.inf, jnp.float32), jnp.zeros((bn, 1), jnp.float32),
            jnp.zeros((bn, kk), jnp.float32))
    (top_z, top_i, m, s, picked), _ = lax.scan(body, init, jnp.arange(nblocks))
    return top_z, top_i, m + jnp.log(s), picked


@functools.partial(jax.jit, static_argnames=("k", "temperature", "block_n", "block_v"))
def _sweep(hidden_ND, unembed_DV, ids_NK, *, k, temperature, block_n, block_v):
    n = hidden_ND.shape[0]
    v = unembed_DV.shape[1]
    cdt = jnp.promote_types(hidden_ND.dtype, unembed_DV.dtype)
    h = lax.stop_gradient(hidden_ND).astype(cdt)
    w = lax.stop_gradient(unembed_DV).astype(cdt)
    bv = min(max(int(block_v), k), v)
    bn = min(int(block_n), n)
    nb = -(-n // bn)
    pad = nb * bn - n
    h = jnp.pad(h, ((0, pad), (0, 0))).reshape(nb, bn, -1)
    ids = None if ids_NK is None else jnp.pad(ids_NK.astype(jnp.int32), ((0, pad), (0, 0)))
    fn = functools.partial(_block_sweep, w_dv=w, k=k, bv=bv, inv_temp=1.0 / temperature)
    if ids is None:
        top_z, top_i, lse, _ = lax.map(lambda x: fn(x, None), h)
        picked = None
    else:
        top_z, top_i, lse, picked = lax.map(lambda xs: fn(*xs), (h, ids.reshape(nb, bn, -1)))
    flat = lambda x: x.reshape((nb * bn,) + x.shape[2:])[:n]
    lse = flat(lse)
    top_lp = flat(top_z) - lse
    gathered = None
    if picked is not None:
        gathered = flat(picked) - lse
        bad = (ids_NK < 0) | (ids_NK >= v)
        gathered = jnp.where(bad, jnp.nan, gathered)
    return flat(top_i), top_lp, gathered


def topk_logprobs(hidden_ND, unembed_DV, k: int, *, gather_ids_NK=None, temperature: float = 1.0,
                  block_n: int = DEFAULT_BLOCK_N, block_v: int = DEFAULT_BLOCK_V):
    """Top-K of log softmax(hidden @ unembed / temperature) per token, without [N, V] logits.

    Args:
      hidden_ND: [N, D] float hidden states (gradient stopped).
      unembed_DV: [D, V] float LM head (gradient stopped).
      k: number of ids per token, 1 <= k <= V (static).
      gather_ids_NK: optional [N, K'] int ids; their log-probs are returned too (same sweep).
        An id outside [0, V) gives NaN.
      temperature: > 0 (static).
    Returns:
      (ids_NK int32 sorted by decreasing log-prob, logp_NK float32, gathered_NK' float32 or None).
    """
    _check(hidden_ND, unembed_DV, k, gather_ids_NK, temperature)
    return _sweep(hidden_ND, unembed_DV, gather_ids_NK, k=k, temperature=float(temperature),
                  block_n=int(block_n), block_v=int(block_v))


def gather_logprobs(hidden_ND, unembed_DV, ids_NK, *, temperature: float = 1.0,
                    block_n: int = DEFAULT_BLOCK_N, block_v: int = DEFAULT_BLOCK_V):
    """[N, K] log softmax(hidden @ unembed / temperature) at the given ids (NaN outside [0, V))."""
    _check(hidden_ND, unembed_DV, None, ids_NK, temperature)
    return _sweep(hidden_ND, unembed_DV, ids_NK, k=0, temperature=float(temperature),
                  block_n=int(block_n), block_v=int(block_v))[2]

