"""The one table between HF tensor names/layouts and our parameter paths/layouts.

Letters: V vocab, D model width, H query heads, K kv heads, E head dim, F MLP width.

HF linear weights are stored [out, in] (torch convention); ours are [in, out] with the head
dimensions split out, e.g. q_proj.weight [H*E, D] <-> attn.q [D, H, E]. Both directions are a
transpose plus a reshape, so a round trip is bitwise exact.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from tseeds_jax.model.config import ModelConfig

# Buffers that some older checkpoints carry and that we recompute from the config.
IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)


@dataclasses.dataclass(frozen=True)
class TensorSpec:
    """One HF tensor and the parameter it becomes.

    path: keys into the nested parameter dict (`nnx.to_pure_dict` layout), e.g. ("layers", 0,
    "attn", "q"). transpose: HF stores the transpose of our (flattened) matrix.
    """

    hf_name: str
    path: tuple[str | int, ...]
    hf_shape: tuple[int, ...]
    shape: tuple[int, ...]
    transpose: bool

    def to_ours(self, x: np.ndarray) -> np.ndarray:
        """HF layout -> our layout (a view when possible; values untouched)."""
        return (x.T if self.transpose else x).reshape(self.shape)

    def to_hf(self, y: np.ndarray) -> np.ndarray:
        """Our layout -> contiguous HF layout (values untouched)."""
        if self.transpose:
            return np.ascontiguousarray(y.reshape(self.hf_shape[::-1]).T)
        return np.ascontiguousarray(y.reshape(self.hf_shape))


def tensor_specs(cfg: ModelConfig) -> list[TensorSpec]:
    """Every HF tensor of the architecture `cfg`, in the order HF checkpoints usually list them."""
    v, d, f = cfg.vocab_size, cfg.hidden_size, cfg.intermediate_size
    h, k, e = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_size
    specs = [TensorSpec("model.embed_tokens.weight", ("embed",), (v, d), (v, d), False)]
    for i in range(cfg.num_hidden_layers):
        p, a, m = f"model.layers.{i}.", ("layers", i, "attn"), ("layers", i, "mlp")

        def add(name, path, hf_shape, shape, transpose, p=p):
            specs.append(TensorSpec(p + name, path, hf_shape, shape, transpose))

        add("input_layernorm.weight", ("layers", i, "attn_norm", "scale"), (d,), (d,), False)
        add("self_attn.q_proj.weight", a + ("q",), (h * e, d), (d, h, e), True)
        add("self_attn.k_proj.weight", a + ("k",), (k * e, d), (d, k, e), True)
        add("self_attn.v_proj.weight", a + ("v",), (k * e, d), (d, k, e), True)
        add("self_attn.o_proj.weight", a + ("o",), (d, h * e), (h, e, d), True)
        if cfg.use_qkv_bias:
            add("self_attn.q_proj.bias", a + ("q_bias",), (h * e,), (h, e), False)
            add("self_attn.k_proj.bias", a + ("k_bias",), (k * e,), (k, e), False)
            add("self_attn.v_proj.bias", a + ("v_bias",), (k * e,), (k, e), False)
        if cfg.use_o_bias:
            add("self_attn.o_proj.bias", a + ("o_bias",), (d,), (d,), False)
        if cfg.use_qk_norm:
            add("self_attn.q_norm.weight", a + ("q_norm", "scale"), (e,), (e,), False)
            add("self_attn.k_norm.weight", a + ("k_norm", "scale"), (e,), (e,), False)
        add("post_attention_layernorm.weight", ("layers", i, "mlp_norm", "scale"), (d,), (d,), False)
        add("mlp.gate_proj.weight", m + ("gate",), (f, d), (d, f), True)
        add("mlp.up_proj.weight", m + ("up",), (f, d), (d, f), True)
        add("mlp.down_proj.weight", m + ("down",), (d, f), (f, d), True)
        if cfg.mlp_bias:
            add("mlp.gate_proj.bias", m + ("gate_bias",), (f,), (f,), False)
            add("mlp.up_proj.bias", m + ("up_bias",), (f,), (f,), False)
            add("mlp.down_proj.bias", m + ("down_bias",), (d,), (d,), False)
    specs.append(TensorSpec("model.norm.weight", ("final_norm", "scale"), (d,), (d,), False))
    if not cfg.tie_word_embeddings:
        specs.append(TensorSpec("lm_head.weight", ("lm_head",), (v, d), (d, v), True))
    return specs


def config_summary(cfg: ModelConfig) -> str:
    """The config fields that decide tensor names and shapes (for error messages)."""
    return (f"model_type={cfg.model_type}, vocab_size={cfg.vocab_size}, "
            f"hidden_size={cfg.hidden_size}, intermediate_size={cfg.intermediate_size}, "
            f"num_hidden_layers={cfg.num_hidden_layers}, "
            f"num_attention_heads={cfg.num_attention_heads}, "
            f"num_key_value_heads={cfg.num_key_value_heads}, head_dim={cfg.head_size}, "
            f"tie_word_embeddings={cfg.tie_word_embeddings}, attention_bias={cfg.use_qkv_bias}, "
            f"mlp_bias={cfg.mlp_bias}, qk_norm={cfg.use_qk_norm}")


def get_path(tree, path):
    for key in path:
        tree = tree[key]
    return tree


def set_path(tree: dict, path, value) -> None:
    for key in path[:-1]:
        tree = tree.setdefault(key, {})
    tree[path[-1]] = value
