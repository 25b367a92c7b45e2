"""Thinking Seeds: truncation rules, seed selectors, the seed cache and seed construction."""

from tseeds_jax.seeds import selection, truncation
from tseeds_jax.seeds.cache import SeedBatch, SeedCache
from tseeds_jax.seeds.refresh import make_seed_batch, make_selected_seed_batch, sample_rngs
from tseeds_jax.seeds.tracker import SuccessTracker
from tseeds_jax.seeds.truncation import EntropyTruncation, RatioTruncation

__all__ = ["EntropyTruncation", "RatioTruncation", "SeedBatch", "SeedCache", "SuccessTracker",
           "make_seed_batch", "make_selected_seed_batch", "sample_rngs", "selection",
           "truncation"]
