"""Fused log-prob / entropy kernels (imported as tseeds_jax.kernels)."""
