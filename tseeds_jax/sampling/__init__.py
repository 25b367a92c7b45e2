"""Sampling: strategies, the jitted KV-cache sampler core, the offline rollout driver and a
JetStream Engine (`tseeds_jax.sampling.engine`, imported on demand: it needs jetstream)."""

from tseeds_jax.sampling.driver import GenerationResult, cast_params, generate, split_model
from tseeds_jax.sampling.strategies import Greedy, Temperature, TopK, TopP, make_strategy

__all__ = ["GenerationResult", "Greedy", "Temperature", "TopK", "TopP", "cast_params", "generate",
           "make_strategy", "split_model"]
