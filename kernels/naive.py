"""Naive reference: materialises the full [N, V] logits; gradients by autodiff.

Shape letters: N tokens, D model width, V vocabulary.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ._common import nan_if_out_of_range


def logprob_entropy_naive(hidden_ND, unembed_DV, targets_N, *, temperature: float = 1.0):
    """(logp_N, entropy_N), float32, of softmax(hidden @ unembed / temperature).

    Inputs of any float dtype; the matmul accumulates in float32. Not validated (see `api`).
    """
    logits_NV = jnp.dot(hidden_ND, unembed_DV, preferred_element_type=jnp.float32)
    logits_NV = logits_NV.astype(jnp.float32) / temperature
    logp_NV = jax.nn.log_softmax(logits_NV, axis=-1)
    tgt = jnp.clip(targets_N, 0, unembed_DV.shape[1] - 1)
    logp_N = jnp.take_along_axis(logp_NV, tgt[:, None].astype(jnp.int32), axis=-1)[:, 0]
    entropy_N = -jnp.sum(jnp.exp(logp_NV) * logp_NV, axis=-1)
    return nan_if_out_of_range(logp_N, targets_N, unembed_DV.shape[1]), entropy_N
