"""Building blocks of the decoder: RMSNorm, rotary embeddings, GQA attention, SwiGLU MLP.

Full-sequence attention (no cache, or an empty one) goes through `attention.causal_attention`,
the decode step through `decode_attention.decode_attention`; a prefill into a filled cache keeps
its own einsums here.

Letters: B batch, T new tokens, S key/cache length, D model width, H query heads, K kv heads,
G = H // K query heads per kv head, E head dim, F MLP width.

Every parameter carries its logical axis names as the `axes` metadata of its `nnx.Param`; the
sharding rules table (`tseeds_jax.model.sharding`) maps them to mesh axes.

LoRA: each projection's output goes through `lora_layer.adapted`, which adds the module's
adapter term when `lora.apply_lora` gave it one and returns the output untouched otherwise.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from flax import nnx

from tseeds_jax.model.activations import constrain
from tseeds_jax.model.attention import MASK_VALUE as _MASK_VALUE
from tseeds_jax.model.attention import causal_attention
from tseeds_jax.model.config import ModelConfig
from tseeds_jax.model.decode_attention import decode_attention, quantize
from tseeds_jax.model.lora_layer import adapted

# Logical layouts of attention activations and of the KV cache (`KVCache.k_axes` / `v_axes`).
_Q_AXES = ("batch", "length", "activation_heads", "head_dim")
_KV_AXES = ("batch", "length", "activation_kv_heads", "head_dim")
CACHE_K_AXES = ("cache_batch", "cache_kv_heads", "cache_head_dim", "cache_length")
CACHE_V_AXES = ("cache_batch", "cache_kv_heads", "cache_length", "cache_head_dim")
# An int8 cache's scales [B, K, S] (`KVCache.scale_axes`).
CACHE_SCALE_AXES = ("cache_batch", "cache_kv_heads", "cache_length")


def _param(rngs: nnx.Rngs, init, shape, dtype, axes) -> nnx.Param:
    return nnx.Param(init(rngs.params(), shape, dtype), axes=axes)


def _normal(std: float):
    return jax.nn.initializers.normal(stddev=std)


class RMSNorm(nnx.Module):
    def __init__(self, dim: int, eps: float, *, param_dtype, axes=("norm",), rngs: nnx.Rngs):
        del rngs
        self.eps = eps
        self.scale = nnx.Param(jnp.ones((dim,), param_dtype), axes=axes)

    def __call__(self, x):
        # HF computes the statistics in float32 and casts back before the scale.
        x32 = x.astype(jnp.float32)
        var = jnp.mean(jnp.square(x32), axis=-1, keepdims=True)
        y = (x32 * jax.lax.rsqrt(var + self.eps)).astype(x.dtype)
        return y * self.scale.value.astype(x.dtype)


def rope_inv_freq(cfg: ModelConfig):
    """Per-frequency inverse wavelengths [E/2] (float32), with llama3/linear scaling applied."""
    e = cfg.head_size
    inv = 1.0 / (cfg.rope_theta ** (jnp.arange(0, e, 2, dtype=jnp.float32) / e))
    rope = cfg.rope_scaling_dict
    if rope is None:
        return inv
    kind = rope.get("rope_type", rope.get("type", "default"))
    if kind == "linear":
        return inv / rope["factor"]
    if kind == "llama3":
        factor = rope["factor"]
        low, high = rope["low_freq_factor"], rope["high_freq_factor"]
        old_len = rope["original_max_position_embeddings"]
        low_wavelen, high_wavelen = old_len / low, old_len / high
        wavelen = 2 * math.pi / inv
        scaled = jnp.where(wavelen > low_wavelen, inv / factor, inv)
        smooth = (old_len / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
        return jnp.where(medium, smoothed, scaled)
    return inv


def rope_tables(positions_BT, inv_freq, max_position: int | None = None):
    """(cos, sin) [B, T, E/2] in float32 for RoPE at `positions_BT`, computed once per forward
    and shared by every layer. With `max_position` (all positions known to be below it: the
    sampler's cache length) they are looked up in a [max_position, E/2] table, which is
    loop-invariant in the decode loop: XLA otherwise fuses cos/sin into every layer's rotation
    and evaluates them once per head (measured ~35 us per layer per step at batch 32)."""
    if max_position is not None:
        angles_PF = jnp.arange(max_position, dtype=jnp.float32)[:, None] * inv_freq
        idx_BT = jnp.clip(positions_BT, 0, max_position - 1)
        return jnp.cos(angles_PF)[idx_BT], jnp.sin(angles_PF)[idx_BT]
    angles_BTF = positions_BT.astype(jnp.float32)[..., None] * inv_freq
    return jnp.cos(angles_BTF), jnp.sin(angles_BTF)


def apply_rope(x_BTHE, rope):
    """HF split-half convention: rotate (x1, x2) halves of the head dim by `rope` = (cos, sin)
    from `rope_tables`; float32 arithmetic."""
    cos, sin = rope[0][:, :, None, :], rope[1][:, :, None, :]
    x1, x2 = jnp.split(x_BTHE.astype(jnp.float32), 2, axis=-1)
    out = jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
    return out.astype(x_BTHE.dtype)


def _project(x_BTD, w_DHE):
    """x @ w as one 2-D matmul over the flattened heads: written as a 3-D einsum, XLA:CPU
    transposed a whole weight matrix inside the sampler's decode loop every step."""
    b, t, d = x_BTD.shape
    _, h, e = w_DHE.shape
    return (x_BTD.reshape(b * t, d) @ w_DHE.reshape(d, h * e)).reshape(b, t, h, e)


def _with_scales(kv):
    """(array, scales or None) of a layer's keys or values as `Attention._write` returns them:
    an (int8, scales) pair for an int8 cache, the array alone otherwise."""
    return kv if isinstance(kv, tuple) else (kv, None)


class Attention(nnx.Module):
    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
        d, h, k, e = cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_size
        pd = jnp.dtype(cfg.param_dtype)
        self.cfg = cfg
        init = _normal(0.02)
        self.q = _param(rngs, init, (d, h, e), pd, ("embed", "q_heads", "head_dim"))
        self.k = _param(rngs, init, (d, k, e), pd, ("embed", "kv_heads", "head_dim"))
        self.v = _param(rngs, init, (d, k, e), pd, ("embed", "kv_heads", "head_dim"))
        self.o = _param(rngs, init, (h, e, d), pd, ("q_heads", "head_dim", "embed"))
        if cfg.use_qkv_bias:
            zeros = jax.nn.initializers.zeros
            self.q_bias = _param(rngs, zeros, (h, e), pd, ("q_heads", "head_dim"))
            self.k_bias = _param(rngs, zeros, (k, e), pd, ("kv_heads", "head_dim"))
            self.v_bias = _param(rngs, zeros, (k, e), pd, ("kv_heads", "head_dim"))
        if cfg.use_o_bias:
            self.o_bias = _param(rngs, jax.nn.initializers.zeros, (d,), pd, ("embed",))
        if cfg.use_qk_norm:
            self.q_norm = RMSNorm(e, cfg.rms_norm_eps, param_dtype=pd, axes=("head_dim",), rngs=rngs)
            self.k_norm = RMSNorm(e, cfg.rms_norm_eps, param_dtype=pd, axes=("head_dim",), rngs=rngs)

    def __call__(self, x_BTD, rope, mask, cache_kv=None, write_B=None):
        """`rope`: (cos, sin) from `rope_tables`. Returns (out_BTD, (k_BSKE, v_BSKE) or None).

        Without a cache the keys are this call's tokens (S == T) and `mask` is valid_BT (bool
        [B, T], False at padding), packed rows' segment ids (int [B, T]) or None: causal
        attention through `attention.causal_attention` (`cfg.attention_impl`). With `cache_kv`
        the new keys and values are written into the cache rows at offsets `write_B`; `mask`
        None then says the cache held nothing before this call (a prompt prefill, S == T):
        attention is causal over the new tokens, by the same entry point. Otherwise attention
        runs over the whole cache (S = cache length) and `mask` is mask_BTS, which entries each
        query may see.
        """
        cfg, dt = self.cfg, x_BTD.dtype
        q = constrain(adapted(self, "q", _project(x_BTD, self.q.value.astype(dt)), x_BTD),
                      *_Q_AXES)
        k = constrain(adapted(self, "k", _project(x_BTD, self.k.value.astype(dt)), x_BTD),
                      *_KV_AXES)
        v = constrain(adapted(self, "v", _project(x_BTD, self.v.value.astype(dt)), x_BTD),
                      *_KV_AXES)
        if cfg.use_qkv_bias:
            q = q + self.q_bias.value.astype(dt)
            k = k + self.k_bias.value.astype(dt)
            v = v + self.v_bias.value.astype(dt)
        if cfg.use_qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        q = apply_rope(q, rope)
        k = apply_rope(k, rope)
        if cache_kv is not None and mask is None:
            new_kv = self._write(*cache_kv, k, v, write_B)
            return self._out(causal_attention(q, k, v, None, impl=cfg.attention_impl)), new_kv
        if cache_kv is not None and q.shape[1] == 1:
            return self._decode_one(q, k, v, mask, cache_kv, write_B)
        if cache_kv is not None:
            return self._prefill(q, k, v, mask, cache_kv, write_B)
        if mask is not None and jnp.issubdtype(mask.dtype, jnp.integer):  # packed rows' segments
            return self._out(causal_attention(q, k, v, None, impl=cfg.attention_impl,
                                              segment_ids_BT=mask)), None
        return self._out(causal_attention(q, k, v, mask, impl=cfg.attention_impl)), None

    def _out(self, out_BTHE):
        out_BTHE = constrain(out_BTHE, *_Q_AXES)
        dt = out_BTHE.dtype
        b, t, h, e = out_BTHE.shape
        o_FD = self.o.value.astype(dt).reshape(h * e, -1)
        out_NF = out_BTHE.reshape(b * t, h * e)
        out = adapted(self, "o", out_NF @ o_FD, out_NF).reshape(b, t, -1)
        if self.cfg.use_o_bias:
            out = out + self.o_bias.value.astype(dt)
        return out

    @staticmethod
    def _write(ck, cv, k_BTKE, v_BTKE, write_B):
        """The T new keys/values of each row written at that row's offset (cache layout: see
        `KVCache`). `ck` / `cv`: the cache's k_BKES / v_BKSE arrays, or for an int8 cache
        (int8 array, float32 scales [B, K, S]) pairs: the new rows are quantized over the head
        dim here (`decode_attention.quantize`) and returned as pairs too."""
        put_k = jax.vmap(lambda c, x, i: jax.lax.dynamic_update_slice_in_dim(c, x, i, axis=2))
        # values [K, S, E] and scales [K, S] per row: both written along axis 1
        put_v = put_s = jax.vmap(
            lambda c, x, i: jax.lax.dynamic_update_slice_in_dim(c, x, i, axis=1))
        if isinstance(ck, tuple):
            (ck_BKES, cks_BKS), (cv_BKSE, cvs_BKS) = ck, cv
            kq_BTKE, ks_BTK = quantize(k_BTKE, axis=3)
            vq_BTKE, vs_BTK = quantize(v_BTKE, axis=3)
            k_BKES = put_k(ck_BKES, jnp.transpose(kq_BTKE, (0, 2, 3, 1)), write_B)
            v_BKSE = put_v(cv_BKSE, jnp.transpose(vq_BTKE, (0, 2, 1, 3)), write_B)
            ks_BKS = put_s(cks_BKS, jnp.transpose(ks_BTK, (0, 2, 1)).astype(cks_BKS.dtype),
                           write_B)
            vs_BKS = put_s(cvs_BKS, jnp.transpose(vs_BTK, (0, 2, 1)).astype(cvs_BKS.dtype),
                           write_B)
            return ((constrain(k_BKES, *CACHE_K_AXES), constrain(ks_BKS, *CACHE_SCALE_AXES)),
                    (constrain(v_BKSE, *CACHE_V_AXES), constrain(vs_BKS, *CACHE_SCALE_AXES)))
        k_BKES = put_k(ck, jnp.transpose(k_BTKE, (0, 2, 3, 1)).astype(ck.dtype), write_B)
        v_BKSE = put_v(cv, jnp.transpose(v_BTKE, (0, 2, 1, 3)).astype(cv.dtype), write_B)
        return constrain(k_BKES, *CACHE_K_AXES), constrain(v_BKSE, *CACHE_V_AXES)

    def _prefill(self, q_BTHE, k_BTKE, v_BTKE, mask_BTS, cache_kv, write_B):
        """T new tokens per row attending over the whole cache (prompt prefill). An int8
        cache's scales are folded into the scores and the probabilities (no dequantized copy of
        the cache)."""
        new_k, new_v = self._write(*cache_kv, k_BTKE, v_BTKE, write_B)
        (k_BKES, ks_BKS), (v_BKSE, vs_BKS) = _with_scales(new_k), _with_scales(new_v)
        b, t, h, e = q_BTHE.shape
        kh = k_BKES.shape[1]
        dt = q_BTHE.dtype
        q = q_BTHE.reshape(b, t, kh, h // kh, e)
        scores = jnp.einsum("btkge,bkes->bkgts", q, k_BKES.astype(dt),
                            preferred_element_type=jnp.float32)
        if ks_BKS is not None:
            scores = scores * ks_BKS[:, :, None, None, :]
        scores = jnp.where(mask_BTS[:, None, None], scores / math.sqrt(e), _MASK_VALUE)
        probs = jax.nn.softmax(scores, axis=-1)
        if vs_BKS is not None:
            probs = probs * vs_BKS[:, :, None, None, :]
        out = jnp.einsum("bkgts,bkse->btkge", probs.astype(dt), v_BKSE.astype(dt))
        return self._out(out.reshape(b, t, h, e)), (new_k, new_v)

    def _decode_one(self, q_B1HE, k_B1KE, v_B1KE, mask_B1S, cache_kv, write_B):
        """One new token per row: the sampler's hot loop. Row b sees cache positions
        [0, write_B[b]] (what `mask_B1S` says; unused here) through
        `decode_attention.decode_attention` (`cfg.decode_attention_impl`), which takes an int8
        cache's scales beside it."""
        del mask_B1S
        new_k, new_v = self._write(*cache_kv, k_B1KE, v_B1KE, write_B)
        (k_BKES, ks_BKS), (v_BKSE, vs_BKS) = _with_scales(new_k), _with_scales(new_v)
        b, _, h, e = q_B1HE.shape
        kh = k_BKES.shape[1]
        q_BKGE = q_B1HE.reshape(b, kh, h // kh, e)
        out_BKGE = decode_attention(q_BKGE, k_BKES, v_BKSE, write_B + 1,
                                    impl=self.cfg.decode_attention_impl, k_scale_BKS=ks_BKS,
                                    v_scale_BKS=vs_BKS)
        return self._out(out_BKGE.reshape(b, 1, h, e)), (new_k, new_v)


class MLP(nnx.Module):
    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
        d, f = cfg.hidden_size, cfg.intermediate_size
        pd = jnp.dtype(cfg.param_dtype)
        init = _normal(0.02)
        self.bias = cfg.mlp_bias
        self.gate = _param(rngs, init, (d, f), pd, ("embed", "mlp"))
        self.up = _param(rngs, init, (d, f), pd, ("embed", "mlp"))
        self.down = _param(rngs, init, (f, d), pd, ("mlp", "embed"))
        if cfg.mlp_bias:
            zeros = jax.nn.initializers.zeros
            self.gate_bias = _param(rngs, zeros, (f,), pd, ("mlp",))
            self.up_bias = _param(rngs, zeros, (f,), pd, ("mlp",))
            self.down_bias = _param(rngs, zeros, (d,), pd, ("embed",))

    def __call__(self, x_BTD, *, stacked: bool = True):
        """stacked=False: gate and up as two matmuls and no [D, 2, F] copy of the weights (the
        sampler's small cached calls; see `DecoderLayer`)."""
        dt = x_BTD.dtype
        b, t, d = x_BTD.shape
        if stacked:
            # One [D, 2, F] matmul instead of two: XLA:CPU otherwise fuses the SiLU backward into
            # a transposing copy per layer (measured ~40% of this block's forward+backward).
            # Stacked on a new axis, not concatenated along F, so a tensor-sharded F stays local
            # to each shard.
            w_D2F = jnp.stack([self.gate.value, self.up.value], axis=1).astype(dt)
            gu_BT2F = constrain(jnp.einsum("btd,dcf->btcf", x_BTD, w_D2F),
                                "batch", "length", None, "activation_mlp")
            g, u = gu_BT2F[..., 0, :], gu_BT2F[..., 1, :]
            g, u = adapted(self, "gate", g, x_BTD), adapted(self, "up", u, x_BTD)
        else:
            x2 = x_BTD.reshape(b * t, d)
            g = constrain(adapted(self, "gate", x2 @ self.gate.value.astype(dt), x2),
                          "batch", "activation_mlp")
            u = constrain(adapted(self, "up", x2 @ self.up.value.astype(dt), x2),
                          "batch", "activation_mlp")
        if self.bias:
            g, u = g + self.gate_bias.value.astype(dt), u + self.up_bias.value.astype(dt)
        h = jax.nn.silu(g) * u
        y = adapted(self, "down", h @ self.down.value.astype(dt), h)
        if self.bias:
            y = y + self.down_bias.value.astype(dt)
        return y.reshape(b, t, -1)
