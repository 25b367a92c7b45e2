"""Shared helpers for the fused log-prob / entropy kernels.

Shape letters: N flattened tokens, D model width, V vocabulary, and for blocked code Bn / Bv / Bd
the token / vocab / width block sizes.

Every implementation returns, per token, the log-probability of the target and the entropy of
softmax(hidden @ unembed / temperature), both float32. The blocked implementations keep, per token,
three float32 statistics for the backward pass:

* ``m``: the row maximum of the logits,
* ``r``: log of sum(exp(logits - m)), so that logsumexp = m + r. The pair is kept instead of the sum
  because rounding m + r to float32 loses up to ulp(|m|)/2 (3e-5 at |m| ~ 1e3), which would show up
  as relative error in every probability when the logits carry a large common offset,
* ``H``: the entropy itself (the backward formula needs it).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def entropy_from_stats(s, t, r=None):
    """Entropy from the online accumulators.

    With e_v = exp(z_v - m): s = sum(e), t = sum(e * (z - m)) and r = log(s). Then
    H = sum p * (lse - z) = r - t / s. Both terms are >= 0 (t <= 0), so there is no cancellation
    between large numbers: the offset m never enters.
    """
    if r is None:
        r = jnp.log(s)
    return r - t / s


def merge_stats(m_a, s_a, t_a, m_b, s_b, t_b):
    """Merges two online-softmax partial states (m, s, t) over disjoint column sets.

    Rescaling t to a new maximum M uses sum e^{z-M}(z-M) = a * (t + (m - M) * s), a = e^{m-M}. A
    state with s == 0 (nothing seen yet, m = -inf) contributes nothing; the `where` keeps
    (-inf) * 0 from turning into NaN.
    """
    m = jnp.maximum(m_a, m_b)
    da = jnp.where(s_a > 0, m_a - m, 0.0)
    db = jnp.where(s_b > 0, m_b - m, 0.0)
    a = jnp.where(s_a > 0, jnp.exp(da), 0.0)
    b = jnp.where(s_b > 0, jnp.exp(db), 0.0)
    s = a * s_a + b * s_b
    t = a * (t_a + da * s_a) + b * (t_b + db * s_b)
    return m, s, t


def dlogits(z, m, r, ent, onehot, g_lp, g_ent, valid, inv_temp):
    """Closed-form gradient w.r.t. the *unscaled* logits hidden @ unembed for one tile, float32.

    z: [Bn, Bv] scaled logits; m, r, ent, g_lp, g_ent: [Bn, 1]; onehot, valid: [Bn, Bv] bool.
    With log p = (z - m) - r:
    dz = g_lp * (onehot - p) - g_ent * p * (log p + H), then / temperature.
    Invalid (padded or duplicate) columns get exactly 0.
    """
    logp = (z - m) - r
    p = jnp.exp(logp)
    dz = g_lp * (onehot.astype(jnp.float32) - p) - g_ent * p * (logp + ent)
    return jnp.where(valid, dz * inv_temp, 0.0)


def is_concrete(x) -> bool:
    return not isinstance(x, jax.core.Tracer)


def validate(hidden_ND, unembed_DV, targets_N, temperature) -> float:
    """Checks shapes/dtypes/values; returns temperature as a Python float.

    Targets are range-checked only when concrete (numpy arrays or committed jax arrays, i.e. outside
    tracing). Under jit the check cannot run; out-of-range targets then give logp = NaN (entropy and
    the entropy gradient are unaffected), see `nan_if_out_of_range`.
    """
    for name, x in (("hidden_ND", hidden_ND), ("unembed_DV", unembed_DV), ("targets_N", targets_N)):
        if not hasattr(x, "shape") or not hasattr(x, "dtype"):
            raise TypeError(f"{name} must be an array, got {type(x).__name__}")
    if hidden_ND.ndim != 2:
        raise ValueError(f"hidden_ND must be 2-D [N, D], got shape {tuple(hidden_ND.shape)}")
    if unembed_DV.ndim != 2:
        raise ValueError(f"unembed_DV must be 2-D [D, V], got shape {tuple(unembed_DV.shape)}")
    if targets_N.ndim != 1:
        raise ValueError(f"targets_N must be 1-D [N], got shape {tuple(targets_N.shape)}")
    n, d = hidden_ND.shape
    d2, v = unembed_DV.shape
    if d != d2:
        raise ValueError(
            f"hidden_ND width D={d} does not match unembed_DV rows D={d2} "
            f"(shapes {tuple(hidden_ND.shape)} and {tuple(unembed_DV.shape)})")
    if targets_N.shape[0] != n:
        raise ValueError(
            f"targets_N has {targets_N.shape[0]} entries but hidden_ND has N={n} tokens")
    if n == 0 or d == 0 or v == 0:
        raise ValueError(f"empty input: N={n}, D={d}, V={v}")
    if not jnp.issubdtype(hidden_ND.dtype, jnp.floating):
        raise TypeError(f"hidden_ND must be a floating dtype, got {hidden_ND.dtype}")
    if not jnp.issubdtype(unembed_DV.dtype, jnp.floating):
        raise TypeError(f"unembed_DV must be a floating dtype, got {unembed_DV.dtype}")
    if not jnp.issubdtype(targets_N.dtype, jnp.integer):
        raise TypeError(f"targets_N must be an integer dtype, got {targets_N.dtype}")
    if not is_concrete(temperature):
        raise TypeError("temperature must be a concrete Python number (it is static), got a tracer")
    try:
        temp = float(temperature)
    except (TypeError, ValueError) as e:
        raise TypeError(f"temperature must be a number, got {temperature!r}") from e
    if not np.isfinite(temp) or temp <= 0.0:
        raise ValueError(f"temperature must be finite and > 0, got {temperature!r}")
    if is_concrete(targets_N):
        t = np.asarray(targets_N)
        bad = (t < 0) | (t >= v)
        if bad.any():
            i = int(np.argmax(bad))
            raise ValueError(
                f"targets_N[{i}] = {int(t[i])} is out of range [0, {v}) for vocabulary size V={v}")
    return temp


def nan_if_out_of_range(logp_N, targets_N, v: int):
    ok = (targets_N >= 0) & (targets_N < v)
    return jnp.where(ok, logp_N, jnp.nan)
