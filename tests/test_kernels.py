"""Fused log-prob / entropy kernels vs an independent float64 numpy reference.

Shape letters: N tokens, D model width, V vocabulary.

Error metric: norm-wise relative error ||x - ref||_2 / ||ref||_2 per output (logp_N, entropy_N,
d hidden_ND, d unembed_DV). Element-wise relative error is meaningless here: with extreme logits
many entropies (and many gradient entries) are ~1e-30 or exactly 0 in float32 while their float64
reference is a denormal-sized positive number, so a single underflowed entry would dominate. The
norm-wise error asks that each output *vector* is correct to ~1e-5 of its size, which is what a
float32 loss that sums these values can rely on.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tseeds_jax.kernels import (
    TPU_GENERATIONS,
    choose_blocks,
    compile_target,
    default_impl,
    logprob_entropy,
    logprob_entropy_chunked,
    logprob_entropy_naive,
    logprob_entropy_pallas,
)

N, D, V = 37, 20, 300  # N, V not multiples of the test blocks (16, 128); D not of block_d=8
F32_TOL, BF16_TOL = 1e-5, 1e-2

# Small blocks so every path runs several tiles, ragged last blocks included (Pallas interprets
# ~1 ms per tile on CPU; these grids have 9 tiles per kernel).
IMPLS = {
    "naive": logprob_entropy_naive,
    "chunked": functools.partial(logprob_entropy_chunked, block_n=16, block_v=128),
    "chunked_default_blocks": logprob_entropy_chunked,
    "pallas": functools.partial(logprob_entropy_pallas, block_n=16, block_v=128),
    "pallas_atomic": functools.partial(logprob_entropy_pallas, block_n=16, block_v=128,
                                       block_d=8, strategy="atomic"),
}
FUSED = [k for k in IMPLS if k != "naive"]


# --------------------------------------------------------------------------- float64 reference


def reference(h, w, tgt, temperature, g_lp, g_ent):
    """float64 numpy: logp, entropy and the VJP (d hidden, d unembed) from the formulas."""
    h, w = np.asarray(h, np.float64), np.asarray(w, np.float64)
    g_lp, g_ent = np.asarray(g_lp, np.float64), np.asarray(g_ent, np.float64)
    z = h @ w / temperature
    zmax = z.max(axis=1, keepdims=True)
    logp_all = z - (zmax + np.log(np.exp(z - zmax).sum(axis=1, keepdims=True)))
    p = np.exp(logp_all)
    rows = np.arange(z.shape[0])
    logp = logp_all[rows, tgt]
    ent = -(p * logp_all).sum(axis=1)
    onehot = np.zeros_like(z)
    onehot[rows, tgt] = 1.0
    # d logp_n / d z = onehot - p;  d H_n / d z = -p * (log p + H).
    dz = (g_lp[:, None] * (onehot - p) - g_ent[:, None] * p * (logp_all + ent[:, None]))
    dz /= temperature
    return logp, ent, dz @ w.T, h.T @ dz


def rel_err(x, ref):
    x, ref = np.asarray(x, np.float64), np.asarray(ref, np.float64)
    assert np.all(np.isfinite(x)), "non-finite values"
    return float(np.linalg.norm(x - ref) / np.linalg.norm(ref))


def run_vjp(fn, h, w, tgt, temperature, g_lp, g_ent):
    f = jax.jit(lambda h, w: fn(h, w, tgt, temperature=temperature))
    (logp, ent), vjp = jax.vjp(f, h, w)
    dh, dw = vjp((g_lp, g_ent))
    return logp, ent, dh, dw


def random_case(seed, dtype, scale=1.0):
    rng = np.random.default_rng(seed)
    h = rng.normal(size=(N, D)) * scale
    w = rng.normal(size=(D, V)) / np.sqrt(D) * 3.0  # logits ~ N(0, 9): a realistic spread
    tgt = rng.integers(0, V, N)
    g_lp, g_ent = rng.normal(size=N), rng.normal(size=N)
    return (jnp.asarray(h, dtype), jnp.asarray(w, dtype), jnp.asarray(tgt, jnp.int32),
            jnp.asarray(g_lp, jnp.float32), jnp.asarray(g_ent, jnp.float32))


def extreme_case(seed):
    """Logits spanning about +-3e3, rows with a +1024 common offset, and moderate rows.

    The inputs are small integers times powers of two, so every logit (and logit / 0.5) is exact
    in float32: the test then measures the kernels' own error (online log-sum-exp, exp/log,
    accumulation), not the float32 rounding of |z| ~ 1e3 logits (ulp 6e-5, which alone moves
    probabilities by ~1e-4 relative in *any* float32 implementation and is not what is tested).
    """
    rng = np.random.default_rng(seed)
    h = rng.integers(-4, 5, size=(N, D)).astype(np.float64)
    w = rng.integers(-8, 9, size=(D, V)).astype(np.float64)
    h *= 2.0 ** rng.choice([-6, -4, 0, 2, 4], size=(N, 1))  # logit std from ~1 to ~1e3
    # Feature 0 adds 64 * 16 = 1024 to every logit of half of the rows: a large common offset.
    h[:, 0] = np.where(rng.random(N) < 0.5, 64.0, 0.0)
    w[0, :] = 16.0
    tgt = rng.integers(0, V, N)
    g_lp, g_ent = rng.normal(size=N), rng.normal(size=N)
    return (jnp.asarray(h, jnp.float32), jnp.asarray(w, jnp.float32), jnp.asarray(tgt, jnp.int32),
            jnp.asarray(g_lp, jnp.float32), jnp.asarray(g_ent, jnp.float32))


def check(impl, case, temperature, tol):
    h, w, tgt, g_lp, g_ent = case
    got = run_vjp(IMPLS[impl], h, w, tgt, temperature, g_lp, g_ent)
    want = reference(np.asarray(h.astype(jnp.float32)), np.asarray(w.astype(jnp.float32)),
                     np.asarray(tgt), temperature, g_lp, g_ent)
    assert got[0].dtype == jnp.float32 and got[1].dtype == jnp.float32
    assert got[2].dtype == h.dtype and got[3].dtype == w.dtype
    for name, x, ref in zip(("logp", "entropy", "d_hidden", "d_unembed"), got, want):
        assert rel_err(x, ref) <= tol, f"{impl} {name}: rel err {rel_err(x, ref):.3g} > {tol}"


# --------------------------------------------------------------------------- numerics


def test_reference_vjp_matches_finite_differences():
    # Guards the closed-form VJP of the reference itself (central differences in float64).
    rng = np.random.default_rng(7)
    n, d, v, temp = 3, 4, 9, 0.7
    h, w = rng.normal(size=(n, d)), rng.normal(size=(d, v))
    tgt, g_lp, g_ent = rng.integers(0, v, n), rng.normal(size=n), rng.normal(size=n)
    loss = lambda h, w: (reference(h, w, tgt, temp, g_lp, g_ent)[0] @ g_lp
                         + reference(h, w, tgt, temp, g_lp, g_ent)[1] @ g_ent)
    _, _, dh, dw = reference(h, w, tgt, temp, g_lp, g_ent)
    eps = 1e-6
    for x, g, other in ((h, dh, "h"), (w, dw, "w")):
        num = np.zeros_like(x)
        for idx in np.ndindex(*x.shape):
            xp, xm = x.copy(), x.copy()
            xp[idx] += eps
            xm[idx] -= eps
            args_p = (xp, w) if other == "h" else (h, xp)
            args_m = (xm, w) if other == "h" else (h, xm)
            num[idx] = (loss(*args_p) - loss(*args_m)) / (2 * eps)
        np.testing.assert_allclose(g, num, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("impl", list(IMPLS))
def test_f32_random(impl):
    check(impl, random_case(0, jnp.float32), 1.0, F32_TOL)


@pytest.mark.parametrize("impl", FUSED)
def test_f32_temperature(impl):
    check(impl, random_case(1, jnp.float32), 0.6, F32_TOL)


@pytest.mark.parametrize("impl", FUSED)
def test_f32_extreme_logits(impl):
    case = extreme_case(2)
    z = np.asarray(case[0]) @ np.asarray(case[1]) / 0.5
    assert np.abs(z).max() > 1e3  # the case really is extreme
    check(impl, case, 0.5, F32_TOL)


@pytest.mark.parametrize("impl", ["chunked", "pallas", "pallas_atomic"])
def test_bf16(impl):
    check(impl, random_case(3, jnp.bfloat16), 0.8, BF16_TOL)


def test_mixed_dtypes_grads_in_input_dtypes():
    h, w, tgt, g_lp, g_ent = random_case(6, jnp.float32)
    w16 = w.astype(jnp.bfloat16)
    for impl in ("chunked", "pallas"):
        logp, ent, dh, dw = run_vjp(IMPLS[impl], h, w16, tgt, 1.0, g_lp, g_ent)
        assert (logp.dtype, ent.dtype, dh.dtype, dw.dtype) == (
            jnp.float32, jnp.float32, jnp.float32, jnp.bfloat16)
        want = reference(h, np.asarray(w16.astype(jnp.float32)), np.asarray(tgt), 1.0, g_lp, g_ent)
        for x, ref in zip((logp, ent, dh), want):
            assert rel_err(x, ref) <= F32_TOL  # all-f32 math once the bf16 weights are upcast
        assert rel_err(dw, want[3]) <= BF16_TOL


def test_public_api_grad_and_jit():
    h, w, tgt, g_lp, g_ent = random_case(4, jnp.float32)
    want = reference(h, w, np.asarray(tgt), 1.3, g_lp, g_ent)
    for impl in ("auto", "chunked", "pallas", "naive"):
        def loss(h, w, impl=impl):
            logp, ent = logprob_entropy(h, w, tgt, temperature=1.3, impl=impl)
            return logp @ g_lp + ent @ g_ent
        dh, dw = jax.jit(jax.grad(loss, argnums=(0, 1)))(h, w)
        assert rel_err(dh, want[2]) <= F32_TOL and rel_err(dw, want[3]) <= F32_TOL, impl
    assert default_impl() == "chunked"  # CPU
    with compile_target("tpu", "v5e"):  # compile-only TPU targets select the Pallas kernels
        assert default_impl(h) == "pallas"
    assert default_impl(h) == "chunked"


def test_compile_target_bad_input():
    with pytest.raises(ValueError, match="platform.*'npu'"):
        with compile_target("npu"):
            pass
    with pytest.raises(ValueError, match="generation.*'v9'"):
        with compile_target("tpu", "v9"):
            pass


@pytest.mark.parametrize("gen", [*TPU_GENERATIONS, None])
@pytest.mark.parametrize("n, d, v", [(3072, 3584, 152064), (8192, 1536, 151936),
                                     (16384, 2560, 151936), (2048, 512, 32768), (37, 20, 300)])
def test_tpu_block_choice_fits_layout_and_vmem(gen, n, d, v):
    from tseeds_jax.kernels.tpu_blocks import (
        FALLBACK_GENERATION,
        VMEM_BUDGET_FRACTION,
        vmem_estimate,
    )

    bn, bv = choose_blocks(gen, n, d, v)
    # (8, 128) tiles: lane blocks are multiples of 128 unless one block covers all N tokens.
    assert bv % 128 == 0 and (bn % 128 == 0 or bn >= n), (bn, bv)
    vmem = TPU_GENERATIONS[gen or FALLBACK_GENERATION].vmem_bytes
    assert vmem_estimate(bn, bv, d) <= VMEM_BUDGET_FRACTION * vmem, (bn, bv)


# --------------------------------------------------------------------------- memory


def _fwd_bwd(fn):
    def loss(h, w, t, a, b):
        logp, ent = fn(h, w, t)
        return logp @ a + ent @ b

    return jax.jit(jax.grad(loss, argnums=(0, 1)))


def _abstract_args(n, d, v, dtype=jnp.float32):
    s = jax.ShapeDtypeStruct
    return (s((n, d), dtype), s((d, v), dtype), s((n,), jnp.int32), s((n,), jnp.float32),
            s((n,), jnp.float32))


def test_chunked_temp_memory_at_most_10pct_of_naive():
    args = _abstract_args(4096, 1024, 65536)  # compile only, never run at this size
    temp = {name: _fwd_bwd(fn).lower(*args).compile().memory_analysis().temp_size_in_bytes
            for name, fn in (("naive", logprob_entropy_naive),
                             ("chunked", logprob_entropy_chunked))}
    assert temp["naive"] >= 4096 * 65536 * 4  # naive holds at least one [N, V] f32 buffer
    assert temp["chunked"] <= 0.10 * temp["naive"], temp


def test_chunked_has_no_NV_buffer():
    n, d, v = 512, 64, 8192
    hlo = _fwd_bwd(logprob_entropy_chunked).lower(*_abstract_args(n, d, v)).compile().as_text()
    assert f"[{n},{v}]" not in hlo
    naive_hlo = _fwd_bwd(logprob_entropy_naive).lower(*_abstract_args(n, d, v)).compile().as_text()
    assert f"[{n},{v}]" in naive_hlo  # the probe can see an [N, V] buffer when there is one


# --------------------------------------------------------------------------- bad input


def _ok():
    h, w, tgt, _, _ = random_case(5, jnp.float32)
    return h, w, tgt


@pytest.mark.parametrize(
    "mutate, exc, words",
    [
        (lambda h, w, t: (h[:, :-1], w, t), ValueError, ["hidden_ND", "unembed_DV", "D="]),
        (lambda h, w, t: (h, w, t[:-1]), ValueError, ["targets_N", "36"]),
        (lambda h, w, t: (h[None], w, t), ValueError, ["hidden_ND", "2-D"]),
        (lambda h, w, t: (h, w, t.at[3].set(V)), ValueError, ["targets_N[3]", str(V)]),
        (lambda h, w, t: (h, w, t.at[0].set(-1)), ValueError, ["targets_N[0]", "-1"]),
        (lambda h, w, t: (h.astype(jnp.int32), w, t), TypeError, ["hidden_ND", "int32"]),
        (lambda h, w, t: (h, w, t.astype(jnp.float32)), TypeError, ["targets_N", "float32"]),
        (lambda h, w, t: (h, [[1.0]], t), TypeError, ["unembed_DV", "list"]),
    ],
)
def test_bad_input(mutate, exc, words):
    with pytest.raises(exc) as e:
        logprob_entropy(*mutate(*_ok()))
    for word in words:
        assert word in str(e.value), (word, str(e.value))


def test_bad_impl_and_temperature():
    h, w, tgt = _ok()
    with pytest.raises(ValueError, match="impl.*'fast'"):
        logprob_entropy(h, w, tgt, impl="fast")
    with pytest.raises(ValueError, match="temperature.*0.0"):
        logprob_entropy(h, w, tgt, temperature=0.0)
    with pytest.raises(TypeError, match="temperature"):
        jax.jit(lambda t: logprob_entropy(h, w, tgt, temperature=t))(1.0)


@pytest.mark.parametrize("impl", ["naive", "chunked"])
def test_out_of_range_targets_under_jit_give_nan_logp(impl):
    h, w, tgt = _ok()
    bad = tgt.at[2].set(V + 5).at[4].set(-1)
    logp, ent = jax.jit(lambda t: logprob_entropy(h, w, t, impl=impl))(bad)
    ref_logp, ref_ent, _, _ = reference(h, w, np.asarray(tgt), 1.0, np.zeros(N), np.zeros(N))
    logp, ent = np.asarray(logp), np.asarray(ent)
    assert np.isnan(logp[[2, 4]]).all()
    keep = np.ones(N, bool)
    keep[[2, 4]] = False
    assert rel_err(logp[keep], ref_logp[keep]) <= F32_TOL
    assert rel_err(ent, ref_ent) <= F32_TOL


# --------------------------------------------------------------------------- sharded inputs


def test_pallas_on_a_mesh_runs_per_token_shard():
    # A Pallas call cannot be partitioned by XLA; on a mesh the public API runs it per token shard
    # (kernels/sharded.py) and d unembed is summed over the shards.
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    n = 40  # 10 tokens per shard of a 2 x 2 mesh: ragged against block_n 16
    rng = np.random.default_rng(9)
    h = rng.normal(size=(n, D))
    w = rng.normal(size=(D, V)) / np.sqrt(D) * 3.0
    tgt, g_lp, g_ent = rng.integers(0, V, n), rng.normal(size=n), rng.normal(size=n)
    mesh = Mesh(np.array(jax.devices()[:4]).reshape(2, 2), ("data", "fsdp"))
    put = lambda x, spec, dt: jax.device_put(jnp.asarray(x, dt), NamedSharding(mesh, spec))
    args = (put(h, P(("data", "fsdp"), None), jnp.float32), put(w, P(None, "fsdp"), jnp.float32),
            put(tgt, P(("data", "fsdp")), jnp.int32))
    cts = (put(g_lp, P(("data", "fsdp")), jnp.float32),
           put(g_ent, P(("data", "fsdp")), jnp.float32))

    def loss(h, w, t, a, b):
        logp, ent = logprob_entropy(h, w, t, temperature=0.9, impl="pallas")
        return logp @ a + ent @ b, (logp, ent)

    (_, (logp, ent)), (dh, dw) = jax.jit(
        jax.value_and_grad(loss, argnums=(0, 1), has_aux=True))(*args, *cts)
    assert "shard_map" in str(jax.make_jaxpr(loss)(*args, *cts))
    want = reference(h, w, tgt, 0.9, g_lp, g_ent)
    for name, x, ref in zip(("logp", "entropy", "d_hidden", "d_unembed"), (logp, ent, dh, dw),
                            want):
        assert rel_err(x, ref) <= F32_TOL, (name, rel_err(x, ref))


def test_d_unembed_is_reduce_scattered_not_all_reduced():
    # Gradients move once (issue #24): d unembed leaves the kernel's shard_map reduce-scattered
    # into D slices, never all-reduced at full [D, V] size. Read in the compiled HLO (CPU, 4 of the
    # emulated devices); the values are checked by the test above.
    import re

    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    n = 40
    mesh = Mesh(np.array(jax.devices()[:4]).reshape(2, 2), ("data", "fsdp"))
    sds = lambda shape, dt, spec: jax.ShapeDtypeStruct(shape, dt, sharding=NamedSharding(mesh, spec))
    args = (sds((n, D), jnp.float32, P(("data", "fsdp"), None)),
            sds((D, V), jnp.float32, P("fsdp", None)), sds((n,), jnp.int32, P(("data", "fsdp"))))

    def loss(h, w, t):
        logp, ent = logprob_entropy(h, w, t, impl="pallas")
        return jnp.sum(logp) + jnp.sum(ent)

    hlo = jax.jit(jax.grad(loss, argnums=1)).lower(*args).compile().as_text()
    scattered = re.findall(rf"f32\[{D // 4},{V}\]\S* reduce-scatter\(", hlo)
    whole = re.findall(rf"f32\[{D},{V}\]\S* all-reduce(?:-start)?\(", hlo)
    assert scattered and not whole, (scattered, whole)
