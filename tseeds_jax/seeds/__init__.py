"""Thinking Seeds: truncation rules, the seed cache and seed construction at refresh time."""

from tseeds_jax.seeds import truncation
from tseeds_jax.seeds.cache import SeedBatch, SeedCache
from tseeds_jax.seeds.refresh import make_seed_batch, sample_rngs
from tseeds_jax.seeds.truncation import EntropyTruncation, RatioTruncation

__all__ = ["EntropyTruncation", "RatioTruncation", "SeedBatch", "SeedCache", "make_seed_batch",
           "sample_rngs", "truncation"]
