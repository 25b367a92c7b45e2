"""Test helper: the naive reference of kernels/topk.py (moved out of the package; tests only)."""

import jax
import jax.numpy as jnp
from jax import lax


def topk_logprobs_naive(hidden_ND, unembed_DV, k: int, *, temperature: float = 1.0):
    """Full [N, V] log-softmax of hidden_ND @ unembed_DV / temperature, then `lax.top_k`:
    (ids [N, K] int32, log-probs [N, K] float32). Tiny inputs only."""
    if k < 1 or k > unembed_DV.shape[1] or temperature <= 0:
        raise ValueError(f"topk_logprobs_naive: k={k}, temperature={temperature}: expected "
                         f"1 <= k <= V={unembed_DV.shape[1]} and temperature > 0")
    z = jnp.dot(hidden_ND, unembed_DV, preferred_element_type=jnp.float32) / temperature
    lp = jax.nn.log_softmax(z.astype(jnp.float32), axis=-1)
    top, ids = lax.top_k(lp, k)
    return ids.astype(jnp.int32), top
