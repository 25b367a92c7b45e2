"""Block sizes of the TPU Pallas kernels, per TPU generation and problem shape.

Shape letters: N tokens, D model width, V vocabulary; Bn / Bv token / vocab block sizes.

Per-TensorCore figures, all from JAX's own chip table (`jax.experimental.pallas.tpu.
get_tpu_info_for_chip(ChipVersion, 1)` in jax 0.10.2, jax/_src/tpu_info.py; tests/test_kernels_tpu.py
checks this copy against it):

| generation | VMEM    | bf16 peak     | HBM bandwidth | ridge (FLOP/byte) |
|------------|---------|---------------|---------------|-------------------|
| v4         | 16 MiB  | 137.5 TFLOP/s | 615 GB/s      | 224               |
| v5e        | 128 MiB | 197 TFLOP/s   | 820 GB/s      | 240               |
| v5p        | 64 MiB  | 229.5 TFLOP/s | 1230 GB/s     | 187               |
| v6e        | 128 MiB | 920 TFLOP/s   | 1640 GB/s     | 561               |

Why these blocks: the forward and d-hidden kernels keep a [Bn, D] hidden tile resident and stream
[D, Bv] unembedding tiles, so each unembedding byte (bf16) feeds Bn multiply-adds (2*Bn FLOP per 2
bytes = Bn FLOP/byte); the d-unembed kernel streams hidden tiles against a resident unembedding tile
(Bv FLOP/byte). Bn and Bv therefore start at the generation's ridge point rounded up to a power of two
(compute-bound), and are halved (the larger first, never below 128) until the estimated VMEM of the
largest of the three kernels fits `VMEM_BUDGET_FRACTION` of the core's VMEM. The estimate counts
the double-buffered input/output blocks, the float32 accumulator, transposed operand copies and the
float32 [Bn, Bv] tile temporaries; checked against the VMEM Mosaic reports using once compiled
(`mosaic_vmem_used`; at (8192, 3584, 152064) on v5p: estimate 18.8 MiB, Mosaic 17.5 MiB). The
budget leaves the rest for Mosaic's own scratch. The kernels are compiled with
`vmem_limit_bytes` = `VMEM_LIMIT_FRACTION` of VMEM; benchmarks/bench_kernel_tpu_compile.py compiles
every generation at the paper shapes with these choices (docs/benchmarks.md).
"""

from __future__ import annotations

import dataclasses
import json
import re

import numpy as np

from ._common import cdiv


@dataclasses.dataclass(frozen=True)
class TpuGeneration:
    vmem_bytes: int  # per TensorCore
    bf16_flops: float  # per TensorCore, FLOP/s
    hbm_bytes_per_s: float  # per TensorCore

    @property
    def ridge(self) -> float:
        return self.bf16_flops / self.hbm_bytes_per_s


MiB = 2**20
TPU_GENERATIONS = {
    "v4": TpuGeneration(16 * MiB, 137.5e12, 615e9),
    "v5e": TpuGeneration(128 * MiB, 197e12, 820e9),
    "v5p": TpuGeneration(64 * MiB, 229.5e12, 1230e9),
    "v6e": TpuGeneration(128 * MiB, 920e12, 1640e9),
}
# An unknown generation gets the blocks of the one with the least VMEM: they fit everywhere.
FALLBACK_GENERATION = "v4"
VMEM_BUDGET_FRACTION = 0.6
VMEM_LIMIT_FRACTION = 0.75
MIN_BLOCK, MAX_BLOCK = 128, 1024
LANES = 128


def vmem_limit_bytes(generation: str | None) -> int:
    gen = TPU_GENERATIONS[generation if generation in TPU_GENERATIONS else FALLBACK_GENERATION]
    return int(gen.vmem_bytes * VMEM_LIMIT_FRACTION)


def vmem_estimate(bn: int, bv: int, d: int, itemsize: int = 2) -> int:
    """Bytes of VMEM of the largest of the three TPU kernels (forward, d hidden, d unembed)."""
    tile_f32 = bn * bv * 4
    h_in, w_in = 2 * bn * d * itemsize, 2 * d * bv * itemsize  # double-buffered input blocks
    stats = 2 * 8 * bn * 4
    fwd = h_in + w_in + stats + 4 * tile_f32
    # d hidden: f32 accumulator, double-buffered output block, a transposed copy of the
    # unembedding tile (the matmul contracts its minor axis) and one masked copy (ragged V).
    dh = (h_in + w_in + stats + bn * d * 4 + 2 * bn * d * itemsize + 2 * d * bv * itemsize
          + 5 * tile_f32)
    # d unembed: likewise, with a transposed copy of the hidden tile.
    dw = (h_in + w_in + stats + d * bv * 4 + 2 * d * bv * itemsize + bn * d * itemsize
          + 5 * tile_f32)
    return max(fwd, dh, dw)


def _pow2_at_least(x: float) -> int:
    return int(2 ** int(np.ceil(np.log2(max(x, 1.0)))))


def token_block_cap(n: int) -> int:
    """Largest useful Bn for N tokens: a lane multiple, or N itself (rounded to 8) when N < 128."""
    return cdiv(n, 8) * 8 if n < LANES else cdiv(n, LANES) * LANES


def choose_blocks(generation: str | None, n: int, d: int, v: int, itemsize: int = 2):
    """(block_n, block_v) for the TPU kernels of one (N, D, V) problem on `generation`.

    generation: 'v4' | 'v5e' | 'v5p' | 'v6e' or None (unknown: FALLBACK_GENERATION's blocks).
    itemsize: bytes per element of the matmul inputs (2 for bfloat16, 4 for float32).
    """
    gen = TPU_GENERATIONS[generation if generation in TPU_GENERATIONS else FALLBACK_GENERATION]
    start = min(MAX_BLOCK, max(MIN_BLOCK, _pow2_at_least(gen.ridge)))
    bn = min(start, token_block_cap(n))
    bv = min(start, cdiv(v, LANES) * LANES)
    budget = VMEM_BUDGET_FRACTION * gen.vmem_bytes
    while vmem_estimate(bn, bv, d, itemsize) > budget:
        if bv >= bn and bv > MIN_BLOCK:
            bv = max(MIN_BLOCK, bv // 2 // LANES * LANES)
        elif bn > MIN_BLOCK:
            bn = max(MIN_BLOCK, bn // 2 // LANES * LANES)
        else:
            break  # smallest blocks: a very wide D; the compiler's VMEM check has the last word
    return bn, bv


_CUSTOM_CALL_CONFIG = re.compile(r'custom_call_target="tpu_custom_call".*?backend_config=(\{.*\})')


def mosaic_vmem_used(hlo_text: str) -> list[int]:
    """VMEM bytes Mosaic reports using for each Pallas call of a compiled TPU program (its
    `used_scoped_memory_configs`, memory space 1), read from `compiled.as_text()`."""
    used = []
    for line in hlo_text.splitlines():
        m = _CUSTOM_CALL_CONFIG.search(line)
        if not m:
            continue
        try:
            cfg = json.loads(m.group(1))
        except json.JSONDecodeError:
            continue
        sizes = [int(c["size"]) for c in cfg.get("used_scoped_memory_configs", [])
                 if str(c.get("memory_space")) == "1"]
        if sizes:
            used.append(max(sizes))
    return used
