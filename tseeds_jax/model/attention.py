"""Causal self-attention of full sequences: one entry point, implementations per platform.

Letters: B batch, T tokens, H query heads, K kv heads, G = H // K, E head dim, C query chunk.

`causal_attention(q, k, v, valid_BT, impl=...)` is what the learner update, the statistics pass
and the sampler's prefill run (the decode step keeps its cache path in `layers`). Implementations:

* "xla": the reference: float32 scores [B, K, G, T, T], masked softmax. Exactly today's numerics,
  and what every other implementation is tested against.
* "chunked": the same in XLA, one C-row query chunk at a time under `jax.checkpoint`, so that
  neither pass holds more than a [B, K, G, C, T] score block (CPU at large T).
* "splash": JAX's Pallas TPU splash attention (flash attention with block-sparse causal masks),
  forward and backward, never materialising [T, T]; padded positions get segment id 0 and real
  ones 1, so a real query never sees a padded key. On CPU it runs in Pallas interpret mode (tests
  only: ~1 ms per grid step). Under a mesh it runs inside `shard_map`, batch over the data axes
  and kv heads over `tensor` (XLA cannot partition a Mosaic call).
* "cudnn": `jax.nn.dot_product_attention(implementation="cudnn")` (GPU). cuDNN's padding mask
  is "the first n tokens", so each row is rotated to put its real tokens first (they must be
  contiguous: `[pad.. prompt | response ..pad]`, the learner's layout) and rotated back.
* "auto": splash on TPU, cudnn on GPU (16-bit inputs; float32 falls back as on CPU), on CPU xla up
  to `CHUNKED_MIN_T` tokens and chunked above.

Packed rows (rl/learn/layout.py, `learner.layout = "packed"`) hold several sequences: pass
`segment_ids_BT` (int32, 0 at padding, 1, 2, ... per sequence) instead of `valid_BT`; a query
then sees the earlier keys of its own segment only. "xla", "chunked" and "splash" take segment
ids; "cudnn" refuses them (its mask is a prefix length per row, which cannot express segments).

Outputs at padded query positions are finite but unspecified (they differ between
implementations); every caller ignores them, and no real query attends to a padded key, so
the real positions and all gradients agree.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

from tseeds_jax.kernels import sharded
from tseeds_jax.kernels import target as kernel_target

IMPLS = ("auto", "xla", "chunked", "splash", "cudnn")
# Above this many tokens "auto" on CPU chunks the queries: an f32 [T, T] score block per
# (row, head) is 64 MiB at T = 4096.
CHUNKED_MIN_T = 2048
CHUNK = 512
# Finite, so that a query row whose keys are all masked (a left-pad position) gives a uniform
# softmax instead of NaN; such rows are ignored by every caller.
MASK_VALUE = -0.7 * float(np.finfo(np.float32).max)

# Splash block sizes per TPU generation (query rows / key columns per tile, forward and both
# backward kernels). MaxText's defaults (512 everywhere) for the generations with >= 64 MiB VMEM;
# v4 (16 MiB per core) gets 256. A per-tile working set is a few [block_q, block_kv] float32
# arrays plus [block, E] operands: 512 x 512 x 4 B = 1 MiB per score tile.
SPLASH_BLOCKS = {"v4": 256, "v5e": 512, "v5p": 512, "v6e": 512}
SPLASH_FALLBACK_BLOCK = 256
LANES = 128


def resolve_impl(impl: str, t: int, *arrays) -> str:
    """The implementation "auto" stands for on the kernels' target (see `kernels.target`)."""
    if not isinstance(impl, str) or impl not in IMPLS:
        raise ValueError(f"attention_impl must be one of {IMPLS}, got {impl!r}")
    if impl != "auto":
        return impl
    platform = kernel_target.detect(*arrays).platform
    if platform == "tpu":
        return "splash"
    if platform == "gpu" and arrays and jnp.dtype(arrays[0].dtype).itemsize == 2:
        return "cudnn"  # cuDNN's flash attention takes 16-bit inputs only
    return "chunked" if t > CHUNKED_MIN_T else "xla"


def causal_attention(q_BTHE, k_BTKE, v_BTKE, valid_BT=None, *, impl: str = "auto",
                     segment_ids_BT=None):
    """Causal self-attention over T tokens with GQA.

    q_BTHE [B, T, H, E], k_BTKE / v_BTKE [B, T, K, E] (RoPE already applied), one compute dtype.
    valid_BT: bool [B, T], False at padded positions (None: all real); keys at padded positions
    are invisible. segment_ids_BT: int [B, T] (packed rows; exclusive with valid_BT): a query
    sees the keys of its own segment only, segment 0 being padding. Returns [B, T, H, E] in q's
    dtype; softmax statistics in float32, scale 1 / sqrt(E).
    """
    if q_BTHE.ndim != 4 or k_BTKE.ndim != 4 or k_BTKE.shape != v_BTKE.shape:
        raise ValueError(f"causal_attention: q [B,T,H,E], k/v [B,T,K,E] expected, got "
                         f"{q_BTHE.shape}, {k_BTKE.shape}, {v_BTKE.shape}")
    b, t, h, e = q_BTHE.shape
    if k_BTKE.shape[:2] != (b, t) or k_BTKE.shape[3] != e or h % k_BTKE.shape[2]:
        raise ValueError(f"causal_attention: k/v {k_BTKE.shape} do not match q {q_BTHE.shape}")
    if valid_BT is not None and tuple(valid_BT.shape) != (b, t):
        raise ValueError(f"causal_attention: valid_BT shape {tuple(valid_BT.shape)} != {(b, t)}")
    impl = resolve_impl(impl, t, q_BTHE)
    if segment_ids_BT is not None:
        if valid_BT is not None:
            raise ValueError("causal_attention: pass valid_BT or segment_ids_BT, not both")
        if tuple(segment_ids_BT.shape) != (b, t):
            raise ValueError(f"causal_attention: segment_ids_BT shape "
                             f"{tuple(segment_ids_BT.shape)} != {(b, t)}")
        if impl == "cudnn":
            raise ValueError("model.attention_impl='cudnn' cannot mask packed sequences (its "
                             "padding mask is one prefix length per row): with "
                             "learner.layout='packed' use attention_impl 'xla' or 'chunked' "
                             "on GPU, or learner.layout='padded'")
        seg_fn = {"xla": attention_xla, "chunked": attention_chunked,
                  "splash": attention_splash}[impl]
        return seg_fn(q_BTHE, k_BTKE, v_BTKE, None, segment_ids_BT=segment_ids_BT)
    fn = {"xla": attention_xla, "chunked": attention_chunked, "splash": attention_splash,
          "cudnn": attention_cudnn}[impl]
    return fn(q_BTHE, k_BTKE, v_BTKE, valid_BT)


# ---------------------------------------------------------------- XLA reference and chunked


def _scores_softmax_out(q_BCKGE, k_BTKE, v_BTKE, mask_BCT):
    dt = q_BCKGE.dtype
    e = q_BCKGE.shape[-1]
    scores = jnp.einsum("bckge,bske->bkgcs", q_BCKGE, k_BTKE, preferred_element_type=jnp.float32)
    scores = scores / math.sqrt(e)
    scores = jnp.where(mask_BCT[:, None, None], scores, MASK_VALUE)
    probs = jax.nn.softmax(scores, axis=-1).astype(dt)
    return jnp.einsum("bkgcs,bske->bckge", probs, v_BTKE)


def _mask(valid_BT, q_idx, t, segment_ids_BT=None):
    causal = q_idx[:, None] >= jnp.arange(t)[None, :]
    if segment_ids_BT is not None:
        # Same segment only; a pad query (segment 0) sees the pad keys before it, never none.
        seg_q = jnp.take(segment_ids_BT, jnp.minimum(q_idx, t - 1), axis=1)
        return causal[None] & (seg_q[:, :, None] == segment_ids_BT[:, None, :])
    if valid_BT is None:
        return causal[None]
    return causal[None] & valid_BT.astype(bool)[:, None, :]


def attention_xla(q_BTHE, k_BTKE, v_BTKE, valid_BT=None, *, segment_ids_BT=None):
    """The reference: whole float32 [B, K, G, T, T] scores."""
    b, t, h, e = q_BTHE.shape
    kh = k_BTKE.shape[2]
    q = q_BTHE.reshape(b, t, kh, h // kh, e)
    mask = jnp.broadcast_to(_mask(valid_BT, jnp.arange(t), t, segment_ids_BT), (b, t, t))
    return _scores_softmax_out(q, k_BTKE, v_BTKE, mask).reshape(b, t, h, e)


def attention_chunked(q_BTHE, k_BTKE, v_BTKE, valid_BT=None, chunk: int = CHUNK, *,
                      segment_ids_BT=None):
    """The reference one query chunk at a time; each chunk recomputed in the backward pass."""
    b, t, h, e = q_BTHE.shape
    kh = k_BTKE.shape[2]
    c = min(chunk, t)
    n = -(-t // c)
    q = jnp.pad(q_BTHE, ((0, 0), (0, n * c - t), (0, 0), (0, 0)))
    q_NBCKGE = jnp.moveaxis(q.reshape(b, n, c, kh, h // kh, e), 1, 0)

    @jax.checkpoint
    def one(args):
        i, q_BCKGE = args
        mask = _mask(valid_BT, i * c + jnp.arange(c), t, segment_ids_BT)
        mask = jnp.broadcast_to(mask, (b, c, t))
        return _scores_softmax_out(q_BCKGE, k_BTKE, v_BTKE, mask)

    out = jax.lax.map(one, (jnp.arange(n), q_NBCKGE))
    return jnp.moveaxis(out, 0, 1).reshape(b, n * c, h, e)[:, :t]


# ---------------------------------------------------------------- cuDNN (GPU)


def _rotation(valid_BT, t):
    """Per-row index maps that move a row's (contiguous) real tokens to the front and back."""
    valid = valid_BT.astype(bool)
    first_B = jnp.argmax(valid, axis=-1)  # left-pad count
    # An all-padding row (ignored by callers) keeps one visible key: no empty softmax.
    length_B = jnp.maximum(valid.sum(-1), 1).astype(jnp.int32)
    idx = jnp.arange(t)[None, :]
    to_front = (idx + first_B[:, None]) % t
    back = (idx - first_B[:, None]) % t
    return to_front, back, length_B


def attention_cudnn(q_BTHE, k_BTKE, v_BTKE, valid_BT=None, implementation: str = "cudnn"):
    """cuDNN flash attention; `implementation="xla"` runs the same rotation logic through
    `jax.nn.dot_product_attention`'s XLA path (how CPU tests check it)."""
    scale = 1.0 / math.sqrt(q_BTHE.shape[-1])
    if valid_BT is None:
        return jax.nn.dot_product_attention(q_BTHE, k_BTKE, v_BTKE, scale=scale, is_causal=True,
                                            implementation=implementation)
    t = q_BTHE.shape[1]
    to_front, back, length_B = _rotation(valid_BT, t)
    take = jax.vmap(lambda x, i: x[i])
    out = jax.nn.dot_product_attention(
        take(q_BTHE, to_front), take(k_BTKE, to_front), take(v_BTKE, to_front), scale=scale,
        is_causal=True, query_seq_lengths=length_B, key_value_seq_lengths=length_B,
        implementation=implementation)
    return take(out, back)


# ---------------------------------------------------------------- splash (TPU)


def splash_block(generation: str | None, t: int) -> int:
    """Splash tile size for T tokens on `generation`: the generation's block, or T rounded up
    to a lane multiple when shorter."""
    block = SPLASH_BLOCKS.get(generation, SPLASH_FALLBACK_BLOCK)
    return min(block, -(-t // LANES) * LANES)


@functools.lru_cache(maxsize=64)
def _splash_kernel(t: int, g: int, block: int, interpret: bool):
    from jax.experimental.pallas.ops.tpu import splash_attention as sa

    sizes = sa.BlockSizes(block_q=block, block_kv=block, block_kv_compute=block,
                          block_q_dkv=block, block_kv_dkv=block, block_kv_dkv_compute=block,
                          block_q_dq=block, block_kv_dq=block)
    mask = sa.MultiHeadMask([sa.CausalMask((t, t)) for _ in range(g)])
    # Concrete mask tables even when first built inside a trace: the kernel is cached across
    # traces (one per layer and program otherwise re-processes the [T/block]^2 block mask).
    with jax.ensure_compile_time_eval():
        return sa.make_splash_mqa_single_device(mask, block_sizes=sizes, interpret=interpret)


def _splash_local(q_BTHE, k_BTKE, v_BTKE, seg_BT, *, block: int, interpret: bool):
    """Splash on one device's shard: vmapped over rows and kv heads, MQA over each group."""
    from jax.experimental.pallas.ops.tpu import splash_attention as sa

    b, t, h, e = q_BTHE.shape
    kh = k_BTKE.shape[2]
    g = h // kh
    tp = -(-t // block) * block
    if tp != t:
        # Padding at the end is invisible to every real query (causal); its rows are dropped.
        pad = ((0, 0), (0, tp - t), (0, 0), (0, 0))
        q_BTHE, k_BTKE, v_BTKE = jnp.pad(q_BTHE, pad), jnp.pad(k_BTKE, pad), jnp.pad(v_BTKE, pad)
        seg_BT = jnp.pad(seg_BT, ((0, 0), (0, tp - t)))
    kernel = _splash_kernel(tp, g, block, interpret)
    q = q_BTHE * jnp.asarray(1.0 / math.sqrt(e), q_BTHE.dtype)
    q_BKGTE = q.reshape(b, tp, kh, g, e).transpose(0, 2, 3, 1, 4)
    k_BKTE = k_BTKE.transpose(0, 2, 1, 3)
    v_BKTE = v_BTKE.transpose(0, 2, 1, 3)

    def row(q_KGTE, k_KTE, v_KTE, seg_T):
        ids = sa.SegmentIds(q=seg_T, kv=seg_T)
        return jax.vmap(lambda qq, kk, vv: kernel(qq, kk, vv, ids))(q_KGTE, k_KTE, v_KTE)

    out_BKGTE = jax.vmap(row)(q_BKGTE, k_BKTE, v_BKTE, seg_BT)
    return out_BKGTE.transpose(0, 3, 1, 2, 4).reshape(b, tp, h, e)[:, :t]


def _mesh_split(mesh, b: int, kh: int):
    """(batch mesh axes, head mesh axis or None) for the splash shard_map: the batch over the
    data axes that divide B (the rules table's `batch`), kv heads over `tensor` when it divides K."""
    heads = ("tensor" if "tensor" not in sharded.held_axes() and mesh.shape.get("tensor", 1) > 1
             and kh % mesh.shape["tensor"] == 0 else None)
    return sharded.batch_axes(mesh, b), heads


def attention_splash(q_BTHE, k_BTKE, v_BTKE, valid_BT=None, *, interpret: bool | None = None,
                     block: int | None = None, segment_ids_BT=None):
    """Splash attention (TPU Pallas); interpret mode off TPU unless told otherwise. `block`:
    the tile size (default `splash_block` of the target's generation). segment_ids_BT: packed
    rows' segments (splash's own SegmentIds: the causal mask ANDed with equal ids)."""
    from tseeds_jax.model.activations import ambient_mesh

    b, t, h, e = q_BTHE.shape
    tgt = kernel_target.detect(q_BTHE)
    if interpret is None:
        interpret = tgt.platform != "tpu"
    if block is None:
        block = splash_block(tgt.generation, t)
    elif not isinstance(block, int) or block <= 0 or block % 8:
        raise ValueError(f"attention_splash: block must be a positive multiple of 8, got {block!r}")
    if segment_ids_BT is not None:
        seg_BT = jnp.asarray(segment_ids_BT).astype(jnp.int32)
    else:
        seg_BT = (jnp.ones((b, t), jnp.int32) if valid_BT is None
                  else valid_BT.astype(jnp.int32))
    local = functools.partial(_splash_local, block=block, interpret=interpret)
    mesh = ambient_mesh()
    if mesh is None:
        return local(q_BTHE, k_BTKE, v_BTKE, seg_BT)
    batch, heads = _mesh_split(mesh, b, k_BTKE.shape[2])
    bspec = batch if batch else None
    qkv = P(bspec, None, heads, None)
    return jax.shard_map(local, mesh=mesh, in_specs=(qkv, qkv, qkv, P(bspec, None)),
                         out_specs=qkv, check_vma=False)(q_BTHE, k_BTKE, v_BTKE, seg_BT)
