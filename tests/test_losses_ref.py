"""Float64 numpy references of the loss family, written from docs/algorithms.md, plus their own checks.

Other test_losses_* files import from here. References never call tseeds_jax. Where a loss uses a
stop-gradient, the reference takes the stop-gradient copy `lp_sg` as a separate argument: its value
is f(lp=lp_sg, lp_sg) and its gradient is ∂f/∂lp at lp = lp_sg, by central differences.
"""

from __future__ import annotations

import numpy as np

MODES = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")


# ---------------------------------------------------------------- aggregation, metrics, gradients
def ref_agg(L, m, mode, loss_scale=None):
    """verl HEAD agg_loss: fully masked rows excluded from seq means; empty batch -> 0."""
    B, T = L.shape
    if mode == "token-mean":
        n = m.sum()
        return float((L * m).sum() / n) if n > 0 else 0.0
    per_row = []
    for i in range(B):
        n_i = m[i].sum()
        if n_i == 0:
            continue
        s_i = float((L[i] * m[i]).sum())
        per_row.append(s_i / n_i if mode == "seq-mean-token-mean" else s_i)
    if not per_row:
        return 0.0
    if mode == "seq-mean-token-sum-norm":  # Dr. GRPO: row mean of token sums / constant
        return float(np.mean(per_row) / (T if loss_scale is None else loss_scale))
    return float(np.mean(per_row))


def ref_agg_weights(m, mode, loss_scale=None):
    """d agg / d L[i, t] (the aggregation is linear in L)."""
    B, T = m.shape
    w = np.zeros((B, T))
    if mode == "token-mean":
        return m / m.sum() if m.sum() > 0 else w
    rows = [i for i in range(B) if m[i].sum() > 0]
    scale = (T if loss_scale is None else loss_scale) if mode == "seq-mean-token-sum-norm" else 1.0
    for i in rows:
        w[i] = m[i] / len(rows) / (m[i].sum() if mode == "seq-mean-token-mean" else 1.0) / scale
    return w


def ref_masked_mean(x, m):
    return float((x * m).sum() / m.sum()) if m.sum() > 0 else 0.0


def fd_grad(f, x, h=1e-6):
    """Central finite differences of a scalar float64 function."""
    g = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        xp, xm = x.copy(), x.copy()
        xp[idx] += h
        xm[idx] -= h
        g[idx] = (f(xp) - f(xm)) / (2 * h)
    return g


# ---------------------------------------------------------------- vanilla clipped PPO (verl §1.1)
def ref_vanilla_tokens(lp, olp, A, clip_low, clip_high, clip_c):
    """Per-token loss in the reduced form of algorithms.md §1.1 (not the max/min composition):
    A >= 0: -A·min(r, 1+ε_h);  A < 0: |A|·min(c, max(r, 1-ε_l)) (no c: |A|·max(r, 1-ε_l))."""
    d = np.clip(lp - olp, -20.0, 20.0)
    r = np.exp(d)
    pos = -A * np.minimum(r, 1.0 + clip_high)
    upper = np.inf if clip_c is None else clip_c
    neg = np.abs(A) * np.minimum(upper, np.maximum(r, 1.0 - clip_low))
    L = np.where(A >= 0, pos, neg)
    clipped = ((A > 0) & (r > 1 + clip_high)) | ((A < 0) & (r < 1 - clip_low))
    dual = (A < 0) & (r > upper)
    # d L / d lp: the ratio factor r where the unclipped branch is active, else 0.
    inside = np.abs(lp - olp) < 20.0
    g_pos = np.where(r < 1 + clip_high, -A * r, 0.0)
    g_neg = np.where((r > 1 - clip_low) & (r < upper), np.abs(A) * r, 0.0)
    g = np.where(A >= 0, g_pos, g_neg) * inside
    return L, g, clipped, dual, d


def ref_policy_loss(lp, olp, A, m, *, clip_low=0.2, clip_high=0.28, clip_c=3.0,
                    mode="token-mean", loss_scale=None):
    """(loss, metrics, grad wrt lp) of verl's vanilla loss, float64."""
    A = np.broadcast_to(A[:, None], lp.shape) if A.ndim == 1 else A
    L, g, clipped, dual, d = ref_vanilla_tokens(lp, olp, A, clip_low, clip_high, clip_c)
    loss = ref_agg(L, m, mode, loss_scale)
    metrics = {
        "pg_clipfrac": ref_masked_mean(clipped.astype(float), m),
        "pg_clipfrac_lower": ref_masked_mean(dual.astype(float), m),
        "ppo_kl": ref_masked_mean(-d, m),
    }
    grad = g * ref_agg_weights(m, mode, loss_scale)
    return loss, metrics, grad


def ref_kl(lp, ref, kind):
    d = lp - ref
    if kind == "k1":
        return d
    if kind == "abs":
        return np.abs(d)
    if kind == "k2":
        return 0.5 * d * d
    kappa = np.clip(ref - lp, -20, 20)
    return np.clip(np.exp(kappa) - kappa - 1.0, -10, 10)


# ---------------------------------------------------------------- the family (algorithms.md §2-5)
def ref_surrogate(r, A, lo, hi, c=None):
    """Clipped surrogate in reduced form, bounds in ratio space: A >= 0: -A·min(r, hi);
    A < 0: |A|·min(c, max(r, lo)) (c None: no dual clip)."""
    upper = np.inf if c is None else c
    return np.where(A >= 0, -A * np.minimum(r, hi), np.abs(A) * np.minimum(upper, np.maximum(r, lo)))


def _bt(A, shape):
    return np.broadcast_to(A[:, None], shape) if A.ndim == 1 else A


def ref_m2po(lp, olp, A, m, tau, mode="token-mean", lp_sg=None):
    """Paper Algorithm 1, literally: drop the largest M̂2 while the trust-region mean exceeds τ."""
    lp_sg = lp if lp_sg is None else lp_sg
    A = _bt(A, lp.shape)
    d = lp_sg - olp
    tr = (m > 0) & (((A > 0) & (d > 0)) | ((A < 0) & (d < 0)))
    m2 = d * d
    remaining = [idx for idx in np.ndindex(lp.shape) if tr[idx]]
    keep = np.ones(lp.shape, bool)
    while remaining and np.mean([m2[i] for i in remaining]) > tau:
        worst = max(remaining, key=lambda i: m2[i])
        remaining.remove(worst)
        keep[worst] = False
    r = np.exp(np.clip(lp - olp, -20, 20))
    loss = ref_agg(-A * r * keep, m, mode)
    metrics = {"m2po_masked_frac": ref_masked_mean((~keep).astype(float), m),
               "m2po_trust_region_frac": ref_masked_mean(tr.astype(float), m)}
    return loss, metrics, keep


def ref_luffy(lp, olp, A, m, off, *, gamma=0.1, clip=False, clip_low=0.2, clip_high=0.2,
              mode="token-mean", loss_scale=None):
    A = _bt(A, lp.shape)
    p = np.exp(lp)
    f = p / (p + gamma)
    r = np.exp(np.clip(lp - olp, -20, 20))
    on = ref_surrogate(r, A, 1 - clip_low, 1 + clip_high) if clip else -A * r
    return ref_agg(np.where(off > 0, -A * f, on), m, mode, loss_scale)


def ref_gspo(lp, olp, A, m, *, token_form, clip_low=3e-4, clip_high=4e-4, cap=10.0, lp_sg=None):
    """GSPO (sequence ratio through all tokens) or GSPO-token (lp - sg(lp) + sg(seq)); always
    seq-mean-token-mean."""
    lp_sg = lp if lp_sg is None else lp_sg
    A = _bt(A, lp.shape)
    B, T = lp.shape
    L = np.zeros((B, T))
    for i in range(B):
        n = max(m[i].sum(), 1.0)
        if token_form:
            seq = ((lp_sg[i] - olp[i]) * m[i]).sum() / n
            log_s = np.minimum(lp[i] - lp_sg[i] + seq, cap)
        else:
            log_s = np.full(T, min(((lp[i] - olp[i]) * m[i]).sum() / n, cap))
        L[i] = ref_surrogate(np.exp(log_s), A[i], 1 - clip_low, 1 + clip_high)
    return ref_agg(L, m, "seq-mean-token-mean")


def ref_ctpo(lp, olp, A, m, *, la, geomean=False, clip_low=0.2, clip_high=0.28, clip_c=3.0,
             la_low=0.025, la_high=0.05, la_c=0.05, power=None, cap=10.0, mode="token-mean",
             lp_sg=None):
    """Row loop: running K over valid tokens (from lp_sg), log ρ = min(K + lp - lp_sg, cap)."""
    lp_sg = lp if lp_sg is None else lp_sg
    A = _bt(A, lp.shape)
    power = (-0.5 if geomean else 0.5) if power is None else power
    B, T = lp.shape
    L = np.zeros((B, T))
    for i in range(B):
        K, t = 0.0, 0
        for j in range(T):
            if m[i, j] > 0:
                t += 1
                K += float(np.clip(lp_sg[i, j] - olp[i, j], -20, 20))
            k_j = K / t if (geomean and t > 0) else K
            rho = np.exp(min(k_j + lp[i, j] - lp_sg[i, j], cap))
            if la:
                sc = max(t, 1) ** power
                c = None if la_c is None else np.exp(la_c * sc)
                L[i, j] = ref_surrogate(rho, A[i, j], np.exp(-la_low * sc), np.exp(la_high * sc), c)
            else:
                L[i, j] = ref_surrogate(rho, A[i, j], 1 - clip_low, 1 + clip_high, clip_c)
    return ref_agg(L, m, mode)


def ref_sis_accept(lp_sg, olp, topk_old, topk_cur, in_topk, u):
    w = np.exp(lp_sg - olp)
    env = np.max(np.exp(topk_cur - topk_old), axis=-1)
    return (in_topk > 0) & (u < np.minimum(1.0, w / env))


def ref_sis(lp, olp, A, m, accept, *, base, lp_sg=None, clip_low=0.2, clip_high=0.28, clip_c=3.0,
            g_low=3e-4, g_high=4e-4):
    """Accepted tokens: ratio exp(lp - lp_sg); others: the base's ratio ("ppo" or "gspo_token")."""
    lp_sg = lp if lp_sg is None else lp_sg
    A = _bt(A, lp.shape)
    unit = np.exp(lp - lp_sg)
    if base == "ppo":
        r = np.where(accept, unit, np.exp(np.clip(lp - olp, -20, 20)))
        return ref_agg(ref_surrogate(r, A, 1 - clip_low, 1 + clip_high, clip_c), m, "token-mean")
    B, T = lp.shape
    L = np.zeros((B, T))
    for i in range(B):
        seq = ((lp_sg[i] - olp[i]) * m[i]).sum() / max(m[i].sum(), 1.0)
        s = np.exp(np.minimum(lp[i] - lp_sg[i] + seq, 10.0))
        L[i] = ref_surrogate(np.where(accept[i], unit[i], s), A[i], 1 - g_low, 1 + g_high)
    return ref_agg(L, m, "seq-mean-token-mean")


def ref_stare_weights(lp_sg, A, m, *, gate_on, P=0.1, W=1.1, M=0.9, c2=False):
    from fractions import Fraction
    A = _bt(A, lp_sg.shape)
    omega = np.ones(lp_sg.shape)
    if not gate_on:
        return omega
    s = -lp_sg
    for sign, weight in ((1, W), (-1, M)) if c2 else ((1, W),):
        members = [idx for idx in np.ndindex(s.shape) if m[idx] > 0 and np.sign(A[idx]) == sign]
        if not members:
            continue
        k = max(1, int(np.ceil(Fraction(str(P)) * len(members))))
        flat = lambda idx: idx[0] * s.shape[1] + idx[1]
        for idx in sorted(members, key=lambda i: (-s[i], flat(i)))[:k]:
            omega[idx] = weight
    return omega


def ref_stare(lp, olp, A, m, omega, *, clip_low=0.2, clip_high=0.28, clip_c=3.0):
    A = _bt(A, lp.shape)
    L, _, _, _, _ = ref_vanilla_tokens(lp, olp, A, clip_low, clip_high, clip_c)
    return ref_agg(L * omega, m, "token-mean")


# ---------------------------------------------------------------- shared random inputs
def make_batch(seed, B=6, T=7, *, empty_row=True, extreme=True):
    """Random log-probs, advantages with both signs (some zero) and ragged masks (one empty row)."""
    rng = np.random.default_rng(seed)
    lp = np.log(rng.uniform(0.05, 0.95, size=(B, T)))
    olp = lp + rng.normal(scale=0.35, size=(B, T))
    if extreme:
        olp[0, 0] = lp[0, 0] - 25.0  # beyond the ±20 clamp (huge ratio)
        olp[1, 1] = lp[1, 1] + 25.0  # tiny ratio
        olp[2, 2] = lp[2, 2] - 3.0  # r ≈ 20 > c
    A_B = rng.normal(size=B)
    A_B[1] = -abs(A_B[1]) - 0.5
    A_B[2] = -abs(A_B[2]) - 0.5
    A_B[0] = abs(A_B[0]) + 0.5
    A_B[3] = 0.0
    lengths = rng.integers(1, T + 1, size=B)
    m = (np.arange(T)[None, :] < lengths[:, None]).astype(np.float64)
    m[:3, :3] = 1.0  # keep the extreme tokens valid
    if empty_row:
        m[4] = 0.0
    return lp, olp, A_B, m


# ---------------------------------------------------------------- tests of the references
def test_reference_grad_matches_finite_differences():
    lp, olp, A, m = make_batch(0)
    for mode in MODES:
        _, _, g = ref_policy_loss(lp, olp, A, m, mode=mode, loss_scale=5.0)
        f = lambda x, mode=mode: ref_policy_loss(x, olp, A, m, mode=mode, loss_scale=5.0)[0]
        np.testing.assert_allclose(g, fd_grad(f, lp), rtol=1e-6, atol=1e-9)


def test_reference_hand_values():
    # One token per row: r = e^{0.5} ≈ 1.65 with A=+1 -> clipped at 1.28; r = e^{-0.5} ≈ 0.61 with
    # A=-1 -> floor 0.8; r = e^{1.5} ≈ 4.48 with A=-2 -> dual clip 2·3; r = 1 with A=0.5 -> -0.5.
    lp = np.array([[0.5], [-0.5], [1.5], [0.0]])
    olp = np.zeros_like(lp)
    A = np.array([1.0, -1.0, -2.0, 0.5])
    m = np.ones_like(lp)
    loss, metrics, _ = ref_policy_loss(lp, olp, A, m)
    np.testing.assert_allclose(loss, (-1.28 + 0.8 + 6.0 - 0.5) / 4)
    assert metrics["pg_clipfrac"] == 0.5 and metrics["pg_clipfrac_lower"] == 0.25
    np.testing.assert_allclose(metrics["ppo_kl"], -1.5 / 4)
    # seq-mean modes exclude the empty row; token-sum-norm then divides by the constant.
    L = np.array([[1.0, 2.0, 9.0], [3.0, 0.0, 0.0], [5.0, 5.0, 5.0]])
    mm = np.array([[1, 1, 0], [1, 0, 0], [0, 0, 0]], float)
    assert ref_agg(L, mm, "token-mean") == 2.0
    assert ref_agg(L, mm, "seq-mean-token-mean") == (1.5 + 3.0) / 2
    assert ref_agg(L, mm, "seq-mean-token-sum") == 3.0
    # (row sums 3 and 3, the empty row not counted) / 2 rows / T = 3
    assert ref_agg(L, mm, "seq-mean-token-sum-norm") == 1.0
    assert ref_agg(L, np.zeros_like(mm), "seq-mean-token-mean") == 0.0


def test_family_reference_hand_values():
    # M2PO: trust-region M̂2 = {0.01, 0.04, 0.09, 1.0} -> means 0.285, 0.0467, 0.025: drop two.
    lp = np.array([[0.1, 0.2, 0.3, 1.0, -0.5]])
    olp = np.zeros_like(lp)
    A = np.array([1.0])
    _, metrics, keep = ref_m2po(lp, olp, A, np.ones_like(lp), 0.04)
    np.testing.assert_array_equal(keep, [[True, True, False, False, True]])
    # CTPO cumprod: ρ_t = Π_{s≤t} r_s over valid tokens.
    lp = np.log(np.array([[0.5, 0.4, 0.3]]))
    olp = lp - np.array([[0.1, 0.05, -0.02]])
    m = np.array([[1.0, 0.0, 1.0]])
    got = ref_ctpo(lp, olp, np.array([1.0]), m, la=False, clip_high=10.0)
    np.testing.assert_allclose(got, -(np.exp(0.1) + np.exp(0.08)) / 2)
    # STARE: 30 positive tokens with P = 0.1 reweight exactly 3 (not 4).
    lp = -np.arange(1, 31, dtype=float)[None, :]
    w = ref_stare_weights(lp, np.array([1.0]), np.ones_like(lp), gate_on=True)
    np.testing.assert_array_equal(np.flatnonzero(w[0] != 1.0), [27, 28, 29])
