"""Flax NNX decoder-only transformer for the Qwen2/2.5, Qwen3 and Llama 3 families."""

from tseeds_jax.model.config import ConfigError, ModelConfig
from tseeds_jax.model.transformer import KVCache, Transformer, init_model

__all__ = ["ConfigError", "KVCache", "ModelConfig", "Transformer", "init_model"]
