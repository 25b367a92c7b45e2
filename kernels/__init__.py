"""Fused log-prob / entropy kernels (imported as tseeds_jax.kernels).

`logprob_entropy` is the public entry point; the individual implementations (naive reference,
chunked XLA, Pallas) are exported for tests and benchmarks.
"""

from .api import IMPLS, default_impl, logprob_entropy
from .chunked import logprob_entropy_chunked
from .naive import logprob_entropy_naive
from .pallas_kernel import BLOCK_TABLE, BlockConfig, block_config, logprob_entropy_pallas
from .target import Target, compile_target
from .tpu_blocks import TPU_GENERATIONS, choose_blocks, vmem_limit_bytes

__all__ = [
    "BLOCK_TABLE",
    "IMPLS",
    "TPU_GENERATIONS",
    "BlockConfig",
    "Target",
    "block_config",
    "choose_blocks",
    "compile_target",
    "default_impl",
    "logprob_entropy",
    "logprob_entropy_chunked",
    "logprob_entropy_naive",
    "logprob_entropy_pallas",
    "vmem_limit_bytes",
]
