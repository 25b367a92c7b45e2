"""Model configuration: a frozen dataclass that maps 1:1 from/to HF `config.json` fields.

Supported families (decoder-only, RMSNorm + SwiGLU + RoPE, GQA):
  qwen2  (Qwen2 / Qwen2.5): q/k/v bias, no o bias, tied or untied embeddings
  qwen3  (Qwen3): q/k RMSNorm over the head dim, no bias by default
  llama  (Llama 3 / 3.1 / 3.2): optional attention/MLP bias, `rope_scaling` type llama3
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

SUPPORTED_MODEL_TYPES = ("qwen2", "qwen3", "llama")
SUPPORTED_ROPE_TYPES = ("default", "llama3", "linear")
_DTYPES = ("float32", "bfloat16", "float16")
# Kept equal to `tseeds_jax.model.attention.IMPLS` (tests/test_attention.py checks).
ATTENTION_IMPLS = ("auto", "xla", "chunked", "splash", "cudnn")
# Kept equal to `tseeds_jax.model.decode_attention.IMPLS` (tests/test_decode_attention.py checks).
DECODE_ATTENTION_IMPLS = ("auto", "xla", "ragged")
# Kept equal to `tseeds_jax.model.decode_attention.KV_CACHE_DTYPES` (tests/test_kv_int8.py checks).
KV_CACHE_DTYPES = ("auto", "int8")
# Kept equal to `tseeds_jax.model.decode_attention.KV_SCALE_BYTES` (tests/test_kv_int8.py checks):
# an int8 cache's float32 scale per slot, kv head and position.
KV_SCALE_BYTES = 4
_DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


class ConfigError(ValueError):
    """A config value that the model cannot honour; the message names the field and value."""


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Architecture (HF field names) plus how to run it (param/compute dtype, remat).

    Fields after `max_position_embeddings` are HF metadata kept for round-tripping; the last
    six (`param_dtype`, `dtype`, `remat`, `attention_impl`, `decode_attention_impl`,
    `kv_cache_dtype`) are ours and never written to config.json.
    """

    model_type: str = "qwen2"
    vocab_size: int = 256
    hidden_size: int = 64
    intermediate_size: int = 128
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int | None = None  # None: hidden_size // num_attention_heads
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    # HF rope_scaling dict, e.g. {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
    # "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}; stored as a sorted tuple
    # of items so that the dataclass stays hashable (it is a static jit argument).
    rope_scaling: tuple[tuple[str, Any], ...] | None = None
    tie_word_embeddings: bool = False
    attention_bias: bool | None = None  # None: the family default (qwen2 True, others False)
    mlp_bias: bool = False
    qk_norm: bool | None = None  # None: the family default (qwen3 True, others False)
    max_position_embeddings: int = 4096
    hidden_act: str = "silu"
    bos_token_id: int | None = None
    eos_token_id: int | tuple[int, ...] | None = None
    pad_token_id: int | None = None
    torch_dtype: str | None = None
    # ---- ours (not HF) ----
    param_dtype: str = "float32"
    dtype: str = "float32"  # compute dtype of activations; logits and softmax stay float32
    remat: bool = False  # rematerialise each decoder layer in the backward pass
    # Full-sequence attention (learner, statistics, prefill): "auto" | "xla" | "chunked" |
    # "splash" | "cudnn"; see `tseeds_jax.model.attention`.
    attention_impl: str = "auto"
    # The sampler's decode step over the KV cache: "auto" | "xla" | "ragged"; see
    # `tseeds_jax.model.decode_attention`.
    decode_attention_impl: str = "auto"
    # The sampler's KV cache: "auto" (the compute dtype `dtype`) | "int8" (symmetric int8 with a
    # float32 scale per slot, kv head and position; see `tseeds_jax.model.decode_attention`).
    kv_cache_dtype: str = "auto"

    def __post_init__(self):
        def bad(field, value, why):
            raise ConfigError(f"ModelConfig.{field}={value!r}: {why}")

        if self.model_type not in SUPPORTED_MODEL_TYPES:
            bad("model_type", self.model_type, f"unsupported; supported: {SUPPORTED_MODEL_TYPES}")
        for name in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                     "num_attention_heads", "num_key_value_heads", "max_position_embeddings"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
                bad(name, v, "must be a positive integer")
        if self.num_attention_heads % self.num_key_value_heads:
            bad("num_key_value_heads", self.num_key_value_heads,
                f"must divide num_attention_heads={self.num_attention_heads}")
        if self.head_dim is None and self.hidden_size % self.num_attention_heads:
            bad("hidden_size", self.hidden_size,
                f"not divisible by num_attention_heads={self.num_attention_heads} and no head_dim")
        if self.head_dim is not None and (self.head_dim <= 0 or self.head_dim % 2):
            bad("head_dim", self.head_dim, "must be a positive even integer (RoPE splits it in half)")
        if self.hidden_act not in ("silu", "swish"):
            bad("hidden_act", self.hidden_act, "only silu (SwiGLU) is supported")
        for name in ("param_dtype", "dtype"):
            if getattr(self, name) not in _DTYPES:
                bad(name, getattr(self, name), f"expected one of {_DTYPES}")
        if self.attention_impl not in ATTENTION_IMPLS:
            bad("attention_impl", self.attention_impl, f"expected one of {ATTENTION_IMPLS}")
        if self.decode_attention_impl not in DECODE_ATTENTION_IMPLS:
            bad("decode_attention_impl", self.decode_attention_impl,
                f"expected one of {DECODE_ATTENTION_IMPLS}")
        if self.kv_cache_dtype not in KV_CACHE_DTYPES:
            bad("kv_cache_dtype", self.kv_cache_dtype, f"expected one of {KV_CACHE_DTYPES}")
        if self.rope_theta <= 0:
            bad("rope_theta", self.rope_theta, "must be positive")
        rope = self.rope_scaling_dict
        if rope is not None:
            kind = rope.get("rope_type", rope.get("type", "default"))
            if kind not in SUPPORTED_ROPE_TYPES:
                bad("rope_scaling", rope, f"rope_type {kind!r} unsupported; supported: "
                    f"{SUPPORTED_ROPE_TYPES}")
            if kind == "llama3":
                for key in ("factor", "low_freq_factor", "high_freq_factor",
                            "original_max_position_embeddings"):
                    if key not in rope:
                        bad("rope_scaling", rope, f"llama3 rope scaling needs {key!r}")
            if kind == "linear" and "factor" not in rope:
                bad("rope_scaling", rope, "linear rope scaling needs 'factor'")

    # ---- derived ----
    @property
    def head_size(self) -> int:
        return self.head_dim if self.head_dim is not None else self.hidden_size // self.num_attention_heads

    @property
    def use_qkv_bias(self) -> bool:
        if self.attention_bias is not None:
            return self.attention_bias
        return self.model_type == "qwen2"

    @property
    def use_o_bias(self) -> bool:
        # Qwen2 puts bias on q/k/v only; Llama's attention_bias covers o_proj as well.
        return self.model_type == "llama" and bool(self.attention_bias)

    @property
    def use_qk_norm(self) -> bool:
        return self.qk_norm if self.qk_norm is not None else self.model_type == "qwen3"

    @property
    def rope_scaling_dict(self) -> dict[str, Any] | None:
        return None if self.rope_scaling is None else dict(self.rope_scaling)

    @property
    def num_params(self) -> int:
        d, f, v, e = self.hidden_size, self.intermediate_size, self.vocab_size, self.head_size
        h, k = self.num_attention_heads, self.num_key_value_heads
        attn = d * e * (h + 2 * k) + h * e * d
        if self.use_qkv_bias:
            attn += e * (h + 2 * k)
        if self.use_o_bias:
            attn += d
        if self.use_qk_norm:
            attn += 2 * e
        mlp = 3 * d * f + (2 * f + d if self.mlp_bias else 0)
        per_layer = attn + mlp + 2 * d
        return v * d * (1 if self.tie_word_embeddings else 2) + self.num_hidden_layers * per_layer + d

    @property
    def kv_element_bytes(self) -> tuple[int, int]:
        """(bytes per cached key / value element, scale bytes per position and kv head): the
        compute dtype and no scales, or int8 and a float32 scale (`kv_cache_dtype`)."""
        if self.kv_cache_dtype == "int8":
            return 1, KV_SCALE_BYTES
        return _DTYPE_BYTES[self.dtype], 0

    @property
    def kv_bytes_per_token(self) -> int:
        """Bytes of one cached position over all layers and KV heads: keys + values (+ an int8
        cache's scales)."""
        item, scale = self.kv_element_bytes
        return 2 * self.num_hidden_layers * self.num_key_value_heads * (self.head_size * item
                                                                        + scale)

    def replace(self, **changes) -> ModelConfig:
        return dataclasses.replace(self, **changes)

    # ---- HF mapping ----
    @classmethod
    def from_hf_dict(cls, hf: dict[str, Any], *, source: str = "config.json", **overrides) -> ModelConfig:
        """Builds a config from HF `config.json` contents; unknown HF fields are ignored."""
        if "model_type" not in hf:
            raise ConfigError(f"{source}: missing field 'model_type'")
        if hf["model_type"] not in SUPPORTED_MODEL_TYPES:
            raise ConfigError(f"{source}: model_type={hf['model_type']!r} is unsupported; "
                              f"supported: {SUPPORTED_MODEL_TYPES}")
        if hf.get("use_sliding_window"):
            raise ConfigError(f"{source}: use_sliding_window=True is unsupported")
        kwargs: dict[str, Any] = {}
        names = {f.name for f in dataclasses.fields(cls)} - {"param_dtype", "dtype", "remat",
                                                          "attention_impl",
                                                          "decode_attention_impl",
                                                          "kv_cache_dtype"}
        for name in names:
            if name in hf and hf[name] is not None:
                kwargs[name] = hf[name]
        # transformers >= 5 nests rope settings under `rope_parameters`.
        rope = hf.get("rope_scaling") or None
        params = hf.get("rope_parameters") or None
        if params:
            if "rope_theta" in params:
                kwargs["rope_theta"] = params["rope_theta"]
            kind = params.get("rope_type", "default")
            if kind != "default":
                rope = {k: v for k, v in params.items() if k != "rope_theta"}
        if rope is not None:
            rope = dict(rope)
            if "type" in rope and "rope_type" not in rope:
                rope["rope_type"] = rope.pop("type")
            kwargs["rope_scaling"] = None if rope.get("rope_type") == "default" else _freeze(rope)
        else:
            kwargs.pop("rope_scaling", None)
        if isinstance(kwargs.get("eos_token_id"), list):
            kwargs["eos_token_id"] = tuple(kwargs["eos_token_id"])
        if hf.get("torch_dtype") is None and hf.get("dtype") is not None:
            kwargs["torch_dtype"] = str(hf["dtype"])
        required = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                    "num_attention_heads")
        for name in required:
            if name not in kwargs:
                raise ConfigError(f"{source}: missing field {name!r}")
        kwargs.setdefault("num_key_value_heads", kwargs["num_attention_heads"])
        kwargs.update(overrides)
        try:
            return cls(**kwargs)
        except ConfigError as e:
            raise ConfigError(f"{source}: {e}") from None
        except TypeError as e:
            raise ConfigError(f"{source}: {e}") from None

    @classmethod
    def from_hf_file(cls, path, **overrides) -> ModelConfig:
        try:
            with open(path) as f:
                hf = json.load(f)
        except FileNotFoundError:
            raise FileNotFoundError(f"{path}: config.json not found") from None
        except json.JSONDecodeError as e:
            raise ConfigError(f"{path}: not valid JSON ({e})") from None
        return cls.from_hf_dict(hf, source=str(path), **overrides)

    def to_hf_dict(self) -> dict[str, Any]:
        """The HF `config.json` fields (architectures included) for this architecture."""
        arch = {"qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM",
                "llama": "LlamaForCausalLM"}[self.model_type]
        out: dict[str, Any] = {
            "architectures": [arch],
            "model_type": self.model_type,
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_hidden_layers,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "head_dim": self.head_size,
            "rms_norm_eps": self.rms_norm_eps,
            "rope_theta": self.rope_theta,
            "rope_scaling": self.rope_scaling_dict,
            "tie_word_embeddings": self.tie_word_embeddings,
            "max_position_embeddings": self.max_position_embeddings,
            "hidden_act": self.hidden_act,
            "torch_dtype": self.torch_dtype or self.param_dtype,
        }
        if self.model_type == "llama":
            out["attention_bias"] = bool(self.attention_bias)
            out["mlp_bias"] = self.mlp_bias
        elif self.model_type == "qwen3":
            out["attention_bias"] = bool(self.attention_bias)
        else:
            out["use_sliding_window"] = False
        for name in ("bos_token_id", "eos_token_id", "pad_token_id"):
            value = getattr(self, name)
            if value is not None:
                out[name] = list(value) if isinstance(value, tuple) else value
        return out


def _freeze(d: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in d.items()))
