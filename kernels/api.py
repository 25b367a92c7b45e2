"""Public entry point: fused LM-head log-prob and entropy, dispatching to an implementation.

Shape letters: N flattened tokens, D model width, V vocabulary.
"""

from __future__ import annotations

import tseeds_jax.kernels.sharded as sharded
import tseeds_jax.kernels.target as target

from ._common import validate
from .chunked import logprob_entropy_chunked
from .naive import logprob_entropy_naive
from .pallas_kernel import logprob_entropy_pallas

IMPLS = ("auto", "pallas", "chunked", "naive")


def default_impl(*arrays) -> str:
    """Pallas on TPU/GPU; chunked XLA elsewhere (Pallas only interprets on CPU, ~1 ms per tile).

    The platform is the kernels' target (`target.detect(*arrays)`): a `compile_target` context,
    the mesh of the arrays' shardings, else the default backend.
    """
    return "pallas" if target.detect(*arrays).platform in ("tpu", "gpu") else "chunked"


def logprob_entropy(hidden_ND, unembed_DV, targets_N, *, temperature: float = 1.0,
                    impl: str = "auto"):
    """Per-token log-prob of the target and entropy of softmax(hidden @ unembed / temperature).

    Args:
      hidden_ND: [N, D] final hidden states, any float dtype (bf16 is accumulated in float32).
      unembed_DV: [D, V] LM-head / unembedding matrix, any float dtype.
      targets_N: [N] integer token ids in [0, V). Checked when concrete; under jit an
        out-of-range id cannot be detected and yields logp = NaN for that token (entropy is still
        returned, and gradients of other tokens are unaffected).
      temperature: Python number > 0 (static); divides the logits before the softmax.
      impl: "auto" | "pallas" | "chunked" | "naive".

    Returns:
      (logp_N, entropy_N), float32 [N] each. Differentiable w.r.t. hidden_ND and unembed_DV
      through both outputs; gradients come back in the input dtypes.
    """
    if not isinstance(impl, str) or impl not in IMPLS:
        raise ValueError(f"impl must be one of {IMPLS}, got {impl!r}")
    temp = validate(hidden_ND, unembed_DV, targets_N, temperature)
    if impl == "auto":
        impl = default_impl(hidden_ND, unembed_DV, targets_N)
    fn = {"pallas": logprob_entropy_pallas, "chunked": logprob_entropy_chunked,
          "naive": logprob_entropy_naive}[impl]
    if impl == "pallas":
        # XLA partitions the XLA implementations itself, but not a Pallas call (sharded.py).
        return sharded.over_tokens(lambda h, w, t: fn(h, w, t, temperature=temp), hidden_ND,
                                   unembed_DV, targets_N)
    return fn(hidden_ND, unembed_DV, targets_N, temperature=temp)
