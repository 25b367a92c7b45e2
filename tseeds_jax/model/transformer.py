"""The decoder-only transformer (Qwen2/2.5, Qwen3, Llama 3) in Flax NNX, with an explicit KV cache.

Letters: B batch, T new tokens, S cache length, D model width, V vocab, L layers, K kv heads,
E head dim.

Two ways to run it:
* full sequences (learner, HF parity): `model(tokens_BT, positions_BT, attn_mask_BT)` -> logits,
  or `model.hidden(...)` -> final-normed hidden states that the fused log-prob kernel consumes
  together with `model.unembed_DV()`, so training never materialises [tokens, vocab] logits;
* with a `KVCache` (sampler): `model.hidden(tokens_BT, cache=cache, lengths_B=n)` writes the new
  keys/values of each row at that row's `cache.end_B` and advances it by `lengths_B`.
  Rows are right-padded: entries past a row's end are never visible to its queries and are
  overwritten by later writes.
"""

from __future__ import annotations

import flax.struct
import jax
import jax.numpy as jnp
from flax import nnx

import tseeds_jax.model.activations as activations
from tseeds_jax.model.activations import constrain
from tseeds_jax.model.config import ModelConfig
from tseeds_jax.model.decode_attention import cache_dtype
from tseeds_jax.model.layers import (
    CACHE_K_AXES,
    CACHE_SCALE_AXES,
    CACHE_V_AXES,
    MLP,
    Attention,
    RMSNorm,
    rope_inv_freq,
    rope_tables,
)


@flax.struct.dataclass
class KVCache:
    """Per-layer keys [B, K, E, S] and values [B, K, S, E], and each row's filled length `end_B`.

    Keys are stored transposed so that both attention products of a decode step are plain
    batched matmuls over (B, K) with no transpose of the cache: q [B,K,G,E] @ k [B,K,E,S] and
    p [B,K,G,S] @ v [B,K,S,E] (measured 1.8x faster per layer than a [B, S, K, E] cache on
    XLA:CPU, whose batched matmul otherwise re-packs the whole cache every step).

    An 8-bit cache (`cfg.kv_cache_dtype == "int8"`) holds int8 k / v and, per layer, float32
    scales k_scale / v_scale [B, K, S] (one per slot, kv head and position, over the head dim;
    `decode_attention.quantize`); they are None for a cache in the compute dtype.
    """

    k: tuple[jax.Array, ...]
    v: tuple[jax.Array, ...]
    end_B: jax.Array
    k_scale: tuple[jax.Array, ...] | None = None
    v_scale: tuple[jax.Array, ...] | None = None

    # Logical axis names of each layer's k / v array and of the scales (see
    # `sharding.LOGICAL_RULES`): slots over the data axes, kv heads over tensor, like k / v.
    k_axes = CACHE_K_AXES
    v_axes = CACHE_V_AXES
    scale_axes = CACHE_SCALE_AXES

    @classmethod
    def init(cls, cfg: ModelConfig, batch: int, max_len: int, dtype=None) -> KVCache:
        """An empty cache; `dtype` overrides the compute dtype of an unquantized cache (an int8
        cache, `cfg.kv_cache_dtype == "int8"`, ignores it)."""
        quantized = cfg.kv_cache_dtype == "int8"
        dtype = cache_dtype(cfg.kv_cache_dtype, dtype or cfg.dtype)
        kh, e, n = cfg.num_key_value_heads, cfg.head_size, cfg.num_hidden_layers
        scales = None
        if quantized:
            scales = tuple(jnp.zeros((batch, kh, max_len), jnp.float32) for _ in range(n))
        return cls(k=tuple(jnp.zeros((batch, kh, e, max_len), dtype) for _ in range(n)),
                   v=tuple(jnp.zeros((batch, kh, max_len, e), dtype) for _ in range(n)),
                   end_B=jnp.zeros((batch,), jnp.int32), k_scale=scales,
                   v_scale=None if scales is None else tuple(jnp.zeros_like(x) for x in scales))

    @property
    def max_len(self) -> int:
        return self.k[0].shape[-1]

    @property
    def quantized(self) -> bool:
        return self.k_scale is not None

    def layer(self, i: int):
        """Layer i's (keys, values) as the attention layer takes them: arrays, or (int8 array,
        scales) pairs for an int8 cache."""
        if self.quantized:
            return (self.k[i], self.k_scale[i]), (self.v[i], self.v_scale[i])
        return self.k[i], self.v[i]

    @classmethod
    def map_layers(cls, kv, fn) -> dict:
        """`fn(logical axes, shape)` for every per-layer array of `kv` (a KVCache, or anything
        holding k / v / k_scale / v_scale the same way, e.g. the sampler's Prefix), as
        `replace()` keywords: k and v, and an int8 cache's scales."""
        out = dict(k=tuple(fn(cls.k_axes, x.shape) for x in kv.k),
                   v=tuple(fn(cls.v_axes, x.shape) for x in kv.v))
        if kv.k_scale is not None:
            out.update(k_scale=tuple(fn(cls.scale_axes, x.shape) for x in kv.k_scale),
                       v_scale=tuple(fn(cls.scale_axes, x.shape) for x in kv.v_scale))
        return out

    @classmethod
    def from_layers(cls, new_kv, end_B) -> KVCache:
        """The cache from the layers' (keys, values) as `layer` gives them."""
        ks, vs = [kv[0] for kv in new_kv], [kv[1] for kv in new_kv]
        if ks and isinstance(ks[0], tuple):
            return cls(k=tuple(k for k, _ in ks), v=tuple(v for v, _ in vs), end_B=end_B,
                       k_scale=tuple(s for _, s in ks), v_scale=tuple(s for _, s in vs))
        return cls(k=tuple(ks), v=tuple(vs), end_B=end_B)


_STACKED_MLP_MIN_ROWS = 256


class DecoderLayer(nnx.Module):
    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
        pd = jnp.dtype(cfg.param_dtype)
        self.attn_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, param_dtype=pd, rngs=rngs)
        self.attn = Attention(cfg, rngs=rngs)
        self.mlp_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, param_dtype=pd, rngs=rngs)
        self.mlp = MLP(cfg, rngs=rngs)

    def __call__(self, x_BTD, rope, mask, cache_kv=None, write_B=None):
        attn, new_kv = self.attn(self.attn_norm(x_BTD), rope, mask, cache_kv, write_B)
        x_BTD = x_BTD + attn
        # The sampler's small cached calls (decode steps, short prefills) run gate and up as two
        # matmuls: measured faster on XLA:CPU below ~256 rows than one stacked [D, 2, F] matmul
        # plus the per-call stacking copy; training and large prefills keep the stacked form.
        rows = x_BTD.shape[0] * x_BTD.shape[1]
        stacked = cache_kv is None or rows >= _STACKED_MLP_MIN_ROWS
        x_BTD = x_BTD + self.mlp(self.mlp_norm(x_BTD), stacked=stacked)
        return _pin_residual(x_BTD), new_kv


def _pin_residual(x_BTD):
    """The residual stream split over the batch axes -- except in a decode step (T = 1), where
    XLA's own choice keeps it split along D and moves a few tokens' activations instead of
    gathering every layer's weights (measured: docs/scale.md)."""
    if x_BTD.shape[1] == 1:
        return x_BTD
    return constrain(x_BTD, "batch", "length", "activation_embed")


def _run_layer(layer, *args):
    return layer(*args)


_run_layer_remat = nnx.remat(_run_layer)


def _run_layer_checkpoint(layer, *args):
    """Remat of a LoRA-adapted layer: `jax.checkpoint` of a pure function of the layer's state
    (fresh Variables inside, nothing written back; an adapted layer mutates nothing).
    `nnx.remat` writes the Variables back from inside the checkpoint, which raises
    TraceContextError when only part of the state is differentiated (adapters through
    `jax.grad`, the frozen base from outside)."""
    graphdef, state = nnx.split(layer)
    return jax.checkpoint(lambda st, *a: _run_layer(nnx.merge(graphdef, st), *a))(state, *args)


class Transformer(nnx.Module):
    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
        self.cfg = cfg
        pd = jnp.dtype(cfg.param_dtype)
        init = jax.nn.initializers.normal(stddev=0.02)
        self.embed = nnx.Param(init(rngs.params(), (cfg.vocab_size, cfg.hidden_size), pd),
                               axes=("vocab", "embed"))
        self.layers = nnx.List([DecoderLayer(cfg, rngs=rngs) for _ in range(cfg.num_hidden_layers)])
        self.final_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, param_dtype=pd, rngs=rngs)
        if not cfg.tie_word_embeddings:
            self.lm_head = nnx.Param(init(rngs.params(), (cfg.hidden_size, cfg.vocab_size), pd),
                                     axes=("embed", "vocab"))

    def unembed_DV(self) -> jax.Array:
        """The output projection [D, V] (the transposed embedding when tied)."""
        if self.cfg.tie_word_embeddings:
            return self.embed.value.T
        return self.lm_head.value

    def hidden(self, tokens_BT, positions_BT=None, attn_mask_BT=None, *, cache: KVCache | None = None,
               lengths_B=None, empty_cache: bool = False, segment_ids_BT=None):
        """Final-normed hidden states [B, T, D] (compute dtype) and the updated cache (or None).

        positions_BT: RoPE positions; default 0..T-1 per row, or (without a cache) the running count
          of valid tokens when `attn_mask_BT` marks left padding, or (with a cache) `end_B + t`.
        attn_mask_BT: 1 for real tokens, 0 for padding (no-cache mode only).
        lengths_B: with a cache, how many of the T tokens of each row are real (default T).
        empty_cache: the cache holds nothing yet and is exactly T long (a prompt prefill): the
          new tokens are written at 0 and attend causally among themselves through
          `attention.causal_attention` (splash on TPU) instead of over the cache.
        segment_ids_BT: packed rows (rl/learn/layout.py; no cache, no attn_mask_BT): int [B, T],
          0 at padding, one id per sequence; attention stays within a segment and the caller
          gives `positions_BT` (restarting at each segment).
        """
        if segment_ids_BT is not None and (cache is not None or attn_mask_BT is not None
                                            or positions_BT is None):
            raise ValueError("segment_ids_BT (packed rows) needs positions_BT and takes no "
                             "attn_mask_BT or cache")
        # Activation layouts follow the mesh the inputs carry (see `activations`).
        with activations.scope(tokens_BT, self.embed.value):
            return self._hidden(tokens_BT, positions_BT, attn_mask_BT, cache, lengths_B,
                                bool(empty_cache), segment_ids_BT)

    def _hidden(self, tokens_BT, positions_BT, attn_mask_BT, cache, lengths_B, empty_cache,
                segment_ids_BT=None):
        cfg = self.cfg
        tokens_BT = jnp.asarray(tokens_BT)
        if tokens_BT.ndim != 2 or not jnp.issubdtype(tokens_BT.dtype, jnp.integer):
            raise ValueError(f"tokens_BT must be an integer array [B, T], got {tokens_BT.dtype}"
                             f"{tuple(tokens_BT.shape)}")
        b, t = tokens_BT.shape
        dt = jnp.dtype(cfg.dtype)
        if cache is None:
            # Causal attention over the call's tokens; `mask` is which of them are real.
            idx = jnp.arange(t)
            if segment_ids_BT is not None:  # the layers read integer masks as segment ids
                mask = jnp.asarray(segment_ids_BT).astype(jnp.int32)
                default_pos = None
            elif attn_mask_BT is None:
                mask = None
                default_pos = jnp.broadcast_to(idx, (b, t))
            else:
                mask = jnp.asarray(attn_mask_BT).astype(bool)
                default_pos = jnp.maximum(jnp.cumsum(mask, axis=-1) - 1, 0)
            write_B = None
        elif empty_cache:
            if attn_mask_BT is not None:
                raise ValueError("attn_mask_BT is not used with a KV cache: rows are right-padded "
                                 "and `lengths_B` gives each row's real length")
            if cache.max_len != t:
                raise ValueError(f"empty_cache=True needs a cache of exactly the T={t} new tokens, "
                                 f"got cache length {cache.max_len}")
            # Right-padded rows: a real query never reaches a padded key under the causal mask.
            mask = None
            write_B = jnp.zeros((b,), jnp.int32)
            default_pos = jnp.broadcast_to(jnp.arange(t), (b, t))
        else:
            if attn_mask_BT is not None:
                raise ValueError("attn_mask_BT is not used with a KV cache: rows are right-padded "
                                 "and `lengths_B` gives each row's real length")
            write_B = cache.end_B
            q_abs_BT = write_B[:, None] + jnp.arange(t)[None, :]
            mask = jnp.arange(cache.max_len)[None, None, :] <= q_abs_BT[:, :, None]
            default_pos = q_abs_BT
        # Default cached positions stay below the cache length: a table lookup (see rope_tables).
        table_len = cache.max_len if cache is not None and positions_BT is None else None
        positions_BT = default_pos if positions_BT is None else jnp.asarray(positions_BT)
        rope = rope_tables(positions_BT, rope_inv_freq(cfg), table_len)
        x_BTD = _pin_residual(self.embed.value[tokens_BT].astype(dt))
        # Remat only where there is a backward pass: on the cached (sampling) paths nnx.remat's
        # trace cannot read the layer's Params inside the sampler's while loop
        # (TraceContextError), and nothing would be saved there anyway.
        run = _run_layer
        if cfg.remat and cache is None:
            # A model without adapters keeps nnx.remat (its programs exactly as before LoRA).
            lora = getattr(self, "lora_config", None) is not None
            run = _run_layer_checkpoint if lora else _run_layer_remat
        new_kvs = []
        for i, layer in enumerate(self.layers):
            kv = None if cache is None else cache.layer(i)
            x_BTD, new_kv = run(layer, x_BTD, rope, mask, kv, write_B)
            if new_kv is not None:
                new_kvs.append(new_kv)
        h_BTD = self.final_norm(x_BTD)
        if cache is None:
            return h_BTD, None
        lengths_B = jnp.full((b,), t, jnp.int32) if lengths_B is None else jnp.asarray(lengths_B)
        return h_BTD, KVCache.from_layers(new_kvs, cache.end_B + lengths_B)

    def logits(self, hidden_BTD) -> jax.Array:
        """float32 logits [B, T, V]; only for sampling and tests (training uses the fused kernel)."""
        with activations.scope(hidden_BTD, self.embed.value):
            logits_BTV = jnp.einsum("btd,dv->btv", hidden_BTD.astype(jnp.float32),
                                    self.unembed_DV().astype(jnp.float32))
            return constrain(logits_BTV, "batch", "length", "activation_vocab")

    def __call__(self, tokens_BT, positions_BT=None, attn_mask_BT=None) -> jax.Array:
        """logits [B, T, V] (float32) of full sequences, no cache."""
        h_BTD, _ = self.hidden(tokens_BT, positions_BT, attn_mask_BT)
        return self.logits(h_BTD)

    def decode(self, tokens_BT, cache: KVCache, positions_BT=None, lengths_B=None):
        """(logits [B, T, V] float32, updated cache) for tokens appended to the cache."""
        h_BTD, cache = self.hidden(tokens_BT, positions_BT, cache=cache, lengths_B=lengths_B)
        return self.logits(h_BTD), cache


def init_model(cfg: ModelConfig, seed: int = 0) -> Transformer:
    """A randomly initialised model on the default device (see `sharding` for sharded init)."""
    return Transformer(cfg, rngs=nnx.Rngs(params=seed))
