"""Decode-step attention over the KV cache that reads only each slot's live positions.

Letters: B cache slots (rows), K kv heads, G = H // K query heads per kv head, E head dim,
S cache length, Bb / Sb slots / cache positions per kernel block, Nb / Ns blocks over B / S.

`decode_attention(q_BKGE, k_BKES, v_BKSE, length_B, impl=...)`: one new query per slot (already
written into the cache) attends to cache positions [0, length_B[b]) of its slot. The cache layout
is the model's `KVCache`: keys transposed [B, K, E, S], values [B, K, S, E]. Implementations:

* "xla": the reference and today's numerics: float32 scores over the whole cache [B, K, G, S],
  positions >= length masked, float32 softmax, probabilities cast to q's dtype for the value
  product. Reads all S positions of every slot every step.
* "ragged": our Pallas TPU kernel (below); on CPU it runs in Pallas interpret mode (tests only:
  ~1 ms per grid step).
* "auto": ragged on TPU, xla elsewhere (GPU included: there is no GPU kernel here, and XLA's
  fused masked softmax is what the GPU sampler ran before).

Output: [B, K, G, E] in q's dtype. A slot whose length is 0 gets zeros (both implementations);
lengths above S mean S (the cache write clamps its offset the same way).

An 8-bit cache (`ModelConfig.kv_cache_dtype = "int8"`, `quantize`): keys and values are int8 with
one float32 scale per (slot, kv head, position) over the head dim, `k_scale_BKS` / `v_scale_BKS`
[B, K, S]. Both implementations fold the scales into the products instead of dequantizing the
cache: scores = (q . k_int8) * k_scale, and the probabilities are multiplied by v_scale before the
value product (sum_s p_s v_scale_s v_int8_s = sum_s p_s v_s). The int8 values are converted to q's
dtype for the matmuls (exact: |x| <= 127 fits a bfloat16 mantissa); the kernel does that per block
in VMEM (checked to compile through Mosaic for v5p, v5e and v6e). Why float32 scales and not
bfloat16: a bfloat16 scale is rounded by up to 2^-9 relative, so x / scale may exceed 127 and clip,
and the per-element error bound absmax / 254 no longer holds; float32 keeps it (up to float32
rounding) for 4 bytes per position and head, 3% of a 128-wide int8 key (1.5% more than bfloat16
would cost).

Why our own kernel and not one from `jax.experimental.pallas.ops.tpu` (checked in jax 0.10.2):
`paged_attention` wants pages [K, pages, page, E] with E minor for both keys and values, and
`ragged_paged_attention` one combined [pages, page, 2K, E] array; our keys are stored transposed
([B, K, E, S], which makes the XLA path's two products plain batched matmuls, see `KVCache`), so
either would need the whole cache copied into its layout every step -- the traffic this kernel
exists to avoid.

The kernel. Grid (Nb, Ns), slot blocks outer ("parallel": split across TensorCores), cache blocks
inner ("arbitrary": an online softmax runs along them). Each step holds Bb slots and all local kv
heads: a grid step has a fixed cost on TPU (~0.35 us reported; not measured here), so one per
(slot, head, block) would dominate at sampler sizes (224 slots x 8 blocks x 28 layers). Two int32
arrays are scalar-prefetched (`PrefetchScalarGridSpec`): the lengths and, per slot block, its
number of live cache blocks (ceil(max length in the block / Sb)). The K/V index_map clamps the
cache-block index to the last live block of the slot block (`kv_block`): steps past it ask for the
block already in VMEM, so the pipeline issues no DMA for them, and `pl.when` skips their compute.
Inside a live block each slot whose length does not reach the block is skipped as well, and
positions past a slot's length are masked. Softmax statistics m, l and the accumulator are float32
VMEM scratch; scores are scaled by 1 / sqrt(E) in float32 as in the reference; the unnormalised
probabilities are cast to the value dtype for the second product (as the reference casts its
normalised ones).

Block sizes (TPU tiling: the last two dimensions of a block are multiples of (8, 128) or whole):
Sb = the largest multiple of 128 that divides S and is <= `BLOCK_S` (S itself when S is not a
multiple of 128: the sampler's small buckets 64, 96, 192); Bb = the largest divisor of the local
B, at most B / 2 (two TensorCores of a megacore chip share the slot-block axis), whose key block
stays within `BLOCK_BYTES` (K and V blocks are double-buffered: ~4x that in VMEM; measured from
compile-only v4 / v5e / v5p / v6e kernels: <= 7.4 MiB of scoped VMEM at 2 MiB). int8 blocks
need no other rule: their (32, 128) minor tiles are met by the same blocks, because the key
block's second-minor dimension is the whole head dim and the value block's is Sb (a multiple of
128, or all of S); an int8 key block counts 1 byte per element plus both scale blocks (8
bytes per position and head), so Bb about doubles. The scale blocks [Bb, K, Sb] hold all local heads
(whole) and Sb positions.

What it reads: per slot block, the cache blocks up to the longest slot of the block, for all of
its slots (a block's DMA covers Bb slots). Slots of very different lengths in one block cost
reads of the shorter ones' dead positions up to the longest; compute is skipped for them.

Sharding: under a multi-device mesh the kernel runs inside `shard_map` (XLA cannot partition a
Mosaic call), slots over the data axes and kv heads over `tensor`, as `attention_splash` does
(`attention._mesh_split`).
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from tseeds_jax.kernels import target as kernel_target
from tseeds_jax.model.attention import MASK_VALUE, _mesh_split

IMPLS = ("auto", "xla", "ragged")
# `ModelConfig.kv_cache_dtype` values (kept equal to `model.config.KV_CACHE_DTYPES`).
KV_CACHE_DTYPES = ("auto", "int8")
INT8_MAX = 127
# Bytes of one scale (float32) per slot, kv head and position, for keys and for values each.
KV_SCALE_BYTES = 4
# Cache positions per kernel block, at most (TPU); and the byte budget of one key block.
BLOCK_S = 512
BLOCK_BYTES = 2 << 20
LANES = 128
KERNEL_NAME = "ragged_decode_attention"


def resolve_impl(impl: str, *arrays) -> str:
    """The implementation "auto" stands for on the kernels' target (see `kernels.target`)."""
    if not isinstance(impl, str) or impl not in IMPLS:
        raise ValueError(f"decode_attention_impl must be one of {IMPLS}, got {impl!r}")
    if impl != "auto":
        return impl
    return "ragged" if kernel_target.detect(*arrays).platform == "tpu" else "xla"


def cache_dtype(kv_cache_dtype: str, compute_dtype):
    """The dtype of the cache's key / value arrays for `ModelConfig.kv_cache_dtype`."""
    if kv_cache_dtype not in KV_CACHE_DTYPES:
        raise ValueError(f"kv_cache_dtype must be one of {KV_CACHE_DTYPES}, got "
                         f"{kv_cache_dtype!r}")
    return jnp.dtype(jnp.int8) if kv_cache_dtype == "int8" else jnp.dtype(compute_dtype)


def quantize(x, axis: int):
    """Symmetric int8 quantization of `x` along `axis` (the head dim): (int8 values of x's shape,
    float32 scales with `axis` removed), scale = absmax / 127 over the axis, values =
    round(x / scale) (zeros where absmax is 0). |x - value * scale| <= absmax / 254 per element,
    up to float32 rounding."""
    x32 = jnp.asarray(x).astype(jnp.float32)
    scale = jnp.max(jnp.abs(x32), axis=axis, keepdims=True) / INT8_MAX
    q = jnp.round(x32 / jnp.where(scale > 0, scale, 1.0))
    q = jnp.clip(q, -INT8_MAX, INT8_MAX).astype(jnp.int8)
    return q, jnp.squeeze(scale, axis)


def dequantize(q, scale, axis: int, dtype=jnp.float32):
    """`q * scale` with the scale broadcast along `axis` (tests and references only: attention
    folds the scales into its products instead)."""
    return (q.astype(jnp.float32) * jnp.expand_dims(scale, axis)).astype(dtype)


def decode_attention(q_BKGE, k_BKES, v_BKSE, length_B, *, impl: str = "auto",
                     k_scale_BKS=None, v_scale_BKS=None,
                     block_b: int | None = None, block_s: int | None = None,
                     interpret: bool | None = None):
    """One query per slot over the first `length_B[b]` cache positions of its slot.

    q_BKGE [B, K, G, E] (compute dtype, RoPE applied); k_BKES [B, K, E, S] and v_BKSE
    [B, K, S, E] (the cache, new key/value already written); length_B int [B] (write offset + 1).
    An int8 cache passes its float32 scales k_scale_BKS / v_scale_BKS [B, K, S] (both or none).
    Returns [B, K, G, E] in q's dtype (zeros where the length is 0). `block_b` / `block_s` /
    `interpret` override the ragged kernel's block sizes and interpret mode (tests).
    """
    if q_BKGE.ndim != 4 or k_BKES.ndim != 4 or v_BKSE.ndim != 4:
        raise ValueError(f"decode_attention: q [B,K,G,E], k [B,K,E,S], v [B,K,S,E] expected, got "
                         f"{q_BKGE.shape}, {k_BKES.shape}, {v_BKSE.shape}")
    b, kh, _, e = q_BKGE.shape
    s = k_BKES.shape[3]
    if k_BKES.shape != (b, kh, e, s) or v_BKSE.shape != (b, kh, s, e):
        raise ValueError(f"decode_attention: k {k_BKES.shape} / v {v_BKSE.shape} do not match "
                         f"q {q_BKGE.shape} (k [B,K,E,S], v [B,K,S,E])")
    if (k_scale_BKS is None) != (v_scale_BKS is None):
        raise ValueError("decode_attention: k_scale_BKS and v_scale_BKS go together (an int8 "
                         "cache has both)")
    if k_scale_BKS is not None:
        for name, x in (("k_scale_BKS", k_scale_BKS), ("v_scale_BKS", v_scale_BKS)):
            if tuple(x.shape) != (b, kh, s):
                raise ValueError(f"decode_attention: {name} shape {tuple(x.shape)} != {(b, kh, s)}")
        if k_BKES.dtype != jnp.int8 or v_BKSE.dtype != jnp.int8:
            raise TypeError(f"decode_attention: scales given for a {k_BKES.dtype} / "
                            f"{v_BKSE.dtype} cache (int8 expected)")
    elif k_BKES.dtype == jnp.int8:
        raise ValueError("decode_attention: an int8 cache needs k_scale_BKS and v_scale_BKS")
    if tuple(jnp.shape(length_B)) != (b,):
        raise ValueError(f"decode_attention: length_B shape {tuple(jnp.shape(length_B))} != {(b,)}")
    if not jnp.issubdtype(jnp.result_type(length_B), jnp.integer):
        raise TypeError(f"decode_attention: length_B must be integer, got "
                        f"{jnp.result_type(length_B)}")
    length_B = jnp.clip(jnp.asarray(length_B, jnp.int32), 0, s)
    impl = resolve_impl(impl, q_BKGE)
    scales = {} if k_scale_BKS is None else dict(k_scale_BKS=k_scale_BKS.astype(jnp.float32),
                                                 v_scale_BKS=v_scale_BKS.astype(jnp.float32))
    if impl == "xla":
        return decode_attention_xla(q_BKGE, k_BKES, v_BKSE, length_B, **scales)
    return decode_attention_ragged(q_BKGE, k_BKES, v_BKSE, length_B, block_b=block_b,
                                   block_s=block_s, interpret=interpret, **scales)


# ---------------------------------------------------------------- XLA reference


def decode_attention_xla(q_BKGE, k_BKES, v_BKSE, length_B, k_scale_BKS=None, v_scale_BKS=None):
    """The reference: masked softmax over the whole cache (float32 [B, K, G, S] scores); an int8
    cache's scales folded into the scores and the probabilities."""
    dt = q_BKGE.dtype
    e, s = q_BKGE.shape[-1], k_BKES.shape[-1]
    scores_BKGS = jnp.einsum("bkge,bkes->bkgs", q_BKGE, k_BKES.astype(dt),
                             preferred_element_type=jnp.float32)
    if k_scale_BKS is not None:
        scores_BKGS = scores_BKGS * k_scale_BKS[:, :, None, :]
    scores_BKGS = scores_BKGS / math.sqrt(e)
    live_BS = jnp.arange(s)[None, :] < length_B[:, None]
    scores_BKGS = jnp.where(live_BS[:, None, None, :], scores_BKGS, MASK_VALUE)
    probs_BKGS = jax.nn.softmax(scores_BKGS, axis=-1)
    if v_scale_BKS is not None:
        probs_BKGS = probs_BKGS * v_scale_BKS[:, :, None, :]
    out_BKGE = jnp.einsum("bkgs,bkse->bkge", probs_BKGS.astype(dt), v_BKSE.astype(dt))
    return jnp.where((length_B > 0)[:, None, None, None], out_BKGE, jnp.zeros((), dt))


# ---------------------------------------------------------------- ragged Pallas kernel


def block_sizes(b: int, kh: int, e: int, s: int, itemsize: int,
                scale_itemsize: int = 0) -> tuple[int, int]:
    """(Bb, Sb) for a local cache of B slots, K heads, head dim E, length S, `itemsize` bytes per
    cached element and `scale_itemsize` per position and head (an int8 cache's scales; see
    module doc)."""
    if s % LANES:
        bs = s
    else:
        bs = max(m * LANES for m in range(1, min(BLOCK_S, s) // LANES + 1) if s % (m * LANES) == 0)
    per_slot = kh * bs * (e * itemsize + scale_itemsize)
    # At least two slot blocks: the "parallel" grid axis is what a megacore chip (v4, v5p)
    # splits between its two TensorCores.
    most = max(b // 2, 1)
    bb = max(d for d in range(1, most + 1)
             if b % d == 0 and (d == 1 or d * per_slot <= BLOCK_BYTES))
    return bb, bs


def live_blocks(length_B, block_b: int, block_s: int):
    """int32 [B / Bb]: per slot block, the number of cache blocks holding a live position."""
    longest = jnp.max(jnp.asarray(length_B, jnp.int32).reshape(-1, block_b), axis=1)
    return (longest + block_s - 1) // block_s


def kv_block(j, live):
    """The cache block that grid step j of a slot block with `live` live blocks reads: j itself,
    clamped to the last live block (block 0 when none is live), so steps past it repeat the
    previous index and the pipeline fetches nothing new."""
    return jnp.maximum(jnp.minimum(j, live - 1), 0)


def kv_block_indices(length_B, block_b: int, block_s: int, s: int) -> list[tuple[int, int]]:
    """The (slot block, cache block) pairs the kernel's K/V index_map returns, in grid order
    (pure Python; what the tests check the clamp with)."""
    live = [int(x) for x in live_blocks(length_B, block_b, block_s)]
    return [(i, int(kv_block(j, live[i]))) for i in range(len(live)) for j in range(s // block_s)]


def _precision(dtype):
    """Explicit, so that a global `jax_default_matmul_precision=highest` (the tests') does not ask
    Mosaic for an fp32 contraction of 16-bit operands, which it rejects."""
    return jax.lax.Precision.HIGHEST if dtype == jnp.float32 else jax.lax.Precision.DEFAULT


def _kernel(len_ref, live_ref, q_ref, k_ref, v_ref, *refs, block_b: int, block_s: int,
            scale: float, quantized: bool):
    """refs: (k_scale, v_scale,)? then out, m, l, acc. With an int8 cache the int8 blocks are
    converted to q's dtype in VMEM and the scales ([1, Sb] per slot and head) multiply the scores
    and the probabilities."""
    from jax.experimental import pallas as pl

    if quantized:
        ks_ref, vs_ref, o_ref, m_ref, l_ref, acc_ref = refs
    else:
        o_ref, m_ref, l_ref, acc_ref = refs
    i, j = pl.program_id(0), pl.program_id(1)
    kh = q_ref.shape[1]
    start = j * block_s

    @pl.when(j == 0)
    def _init():
        m_ref[...] = jnp.full(m_ref.shape, MASK_VALUE, jnp.float32)
        l_ref[...] = jnp.zeros(l_ref.shape, jnp.float32)
        acc_ref[...] = jnp.zeros(acc_ref.shape, jnp.float32)

    @pl.when(j < live_ref[i])
    def _block():
        def slot(r, carry):
            length = len_ref[i * block_b + r]

            @pl.when(start < length)
            def _slot():
                for h in range(kh):
                    q_GE = q_ref[r, h]
                    k_ES = k_ref[r, h]
                    if quantized:
                        k_ES = k_ES.astype(q_GE.dtype)
                    s_GS = jax.lax.dot_general(q_GE, k_ES, (((1,), (0,)), ((), ())),
                                               precision=_precision(q_GE.dtype),
                                               preferred_element_type=jnp.float32)
                    if quantized:
                        s_GS = s_GS * ks_ref[r, pl.ds(h, 1), :]
                    s_GS = s_GS * scale
                    pos = start + jax.lax.broadcasted_iota(jnp.int32, s_GS.shape, 1)
                    s_GS = jnp.where(pos < length, s_GS, MASK_VALUE)
                    m_prev = m_ref[r, h]
                    m_new = jnp.maximum(m_prev, jnp.max(s_GS, axis=1, keepdims=True))
                    alpha = jnp.exp(m_prev - m_new)
                    p_GS = jnp.exp(s_GS - m_new)
                    v_SE = v_ref[r, h]
                    pw_GS = p_GS
                    if quantized:
                        v_SE = v_SE.astype(q_GE.dtype)
                        pw_GS = p_GS * vs_ref[r, pl.ds(h, 1), :]
                    pv_GE = jax.lax.dot_general(pw_GS.astype(v_SE.dtype), v_SE,
                                                (((1,), (0,)), ((), ())),
                                                precision=_precision(v_SE.dtype),
                                                preferred_element_type=jnp.float32)
                    l_ref[r, h] = alpha * l_ref[r, h] + jnp.sum(p_GS, axis=1, keepdims=True)
                    acc_ref[r, h] = alpha * acc_ref[r, h] + pv_GE
                    m_ref[r, h] = m_new

            return carry

        jax.lax.fori_loop(0, block_b, slot, 0)

    @pl.when(j == pl.num_programs(1) - 1)
    def _finish():
        total = l_ref[...]
        out = acc_ref[...] / jnp.where(total > 0, total, 1.0)
        o_ref[...] = jnp.where(total > 0, out, 0.0).astype(o_ref.dtype)


def _ragged_local(q_BKGE, k_BKES, v_BKSE, length_B, *scales, block_b, block_s, interpret):
    """The kernel on one device's slots and heads (`scales`: an int8 cache's k / v scales)."""
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    b, kh, g, e = q_BKGE.shape
    s = k_BKES.shape[3]
    quantized = bool(scales)
    auto_bb, auto_bs = block_sizes(b, kh, e, s, jnp.dtype(k_BKES.dtype).itemsize,
                                   2 * KV_SCALE_BYTES if quantized else 0)
    bb = auto_bb if block_b is None else block_b
    bs = auto_bs if block_s is None else block_s
    if b % bb or s % bs or (bs != s and bs % LANES):
        raise ValueError(f"decode_attention: block_b={bb} must divide the local slots {b} and "
                         f"block_s={bs} the cache length {s} (a multiple of {LANES} or all of it)")
    dt = q_BKGE.dtype
    # A 16-bit cache sets the matmul dtype; an int8 one is converted to q's dtype in VMEM.
    q = q_BKGE if quantized else q_BKGE.astype(k_BKES.dtype)
    live = live_blocks(length_B, bb, bs)

    def q_map(i, j, len_ref, live_ref):
        return i, 0, 0, 0

    def k_map(i, j, len_ref, live_ref):
        return i, 0, 0, kv_block(j, live_ref[i])

    def v_map(i, j, len_ref, live_ref):
        return i, 0, kv_block(j, live_ref[i]), 0

    def scale_map(i, j, len_ref, live_ref):
        return i, 0, kv_block(j, live_ref[i])

    in_specs = [pl.BlockSpec((bb, kh, g, e), q_map), pl.BlockSpec((bb, kh, e, bs), k_map),
                pl.BlockSpec((bb, kh, bs, e), v_map)]
    if quantized:
        in_specs += [pl.BlockSpec((bb, kh, bs), scale_map)] * 2
    grid_spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=2,
        grid=(b // bb, s // bs),
        in_specs=in_specs,
        out_specs=pl.BlockSpec((bb, kh, g, e), q_map),
        scratch_shapes=[pltpu.VMEM((bb, kh, g, 1), jnp.float32),
                        pltpu.VMEM((bb, kh, g, 1), jnp.float32),
                        pltpu.VMEM((bb, kh, g, e), jnp.float32)])
    kernel = functools.partial(_kernel, block_b=bb, block_s=bs, scale=1.0 / math.sqrt(e),
                               quantized=quantized)
    return pl.pallas_call(
        kernel, grid_spec=grid_spec, out_shape=jax.ShapeDtypeStruct((b, kh, g, e), dt),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary")),
        interpret=interpret, name=KERNEL_NAME,
    )(length_B, live, q, k_BKES, v_BKSE, *scales)


def decode_attention_ragged(q_BKGE, k_BKES, v_BKSE, length_B, *, k_scale_BKS=None,
                            v_scale_BKS=None, block_b: int | None = None,
                            block_s: int | None = None, interpret: bool | None = None):
    """The Pallas kernel; interpret mode off TPU unless told otherwise. Under a mesh: inside
    `shard_map`, slots over the data axes, kv heads over `tensor` (block_b then counts local
    slots); an int8 cache's scales [B, K, S] split the same way."""
    from tseeds_jax.model.activations import ambient_mesh

    if interpret is None:
        interpret = kernel_target.detect(q_BKGE).platform != "tpu"
    length_B = jnp.asarray(length_B, jnp.int32)
    local = functools.partial(_ragged_local, block_b=block_b, block_s=block_s,
                              interpret=interpret)
    scales = () if k_scale_BKS is None else (k_scale_BKS, v_scale_BKS)
    mesh = ambient_mesh()
    if mesh is None:
        return local(q_BKGE, k_BKES, v_BKSE, length_B, *scales)
    batch, heads = _mesh_split(mesh, q_BKGE.shape[0], q_BKGE.shape[1])
    bspec = batch if batch else None
    spec = P(bspec, heads, None, None)
    scale_specs = (P(bspec, heads, None),) * len(scales)
    return jax.shard_map(local, mesh=mesh, in_specs=(spec, spec, spec, P(bspec)) + scale_specs,
                         out_specs=spec, check_vma=False)(q_BKGE, k_BKES, v_BKSE, length_B,
                                                          *scales)
