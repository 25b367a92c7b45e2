"""tseeds_jax: Thinking Seeds RL post-training of LLMs in JAX/Flax.

Subpackages are imported lazily by their users; importing `tseeds_jax` itself is cheap.
"""

__version__ = "0.1.0"
