"""GPU check of the Pallas (Triton) fused log-prob / entropy kernel.

Called by gpu_logprob_entropy.sh.

Shape letters: N tokens, D model width, V vocabulary.

1. Numerics: Pallas forward and VJP against a float64 numpy reference (random logits, temperature
   0.7, extreme logits, bf16), norm-wise relative error, tolerance 1e-5 (f32) / 1e-2 (bf16).
   f32 matmuls run at precision "highest" here (no TF32), as in the CPU tests.
2. Speed: forward+backward median wall time of pallas / chunked / naive at (8192, 3584, 152064),
   as ratios to naive, plus compiled temp memory. Prints markdown tables.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from bench_logprob_entropy import abstract_args, concrete_args, fwd_bwd  # noqa: E402
from tseeds_jax.kernels import (  # noqa: E402
    logprob_entropy_chunked,
    logprob_entropy_naive,
    logprob_entropy_pallas,
)


def reference(h, w, tgt, temperature, g_lp, g_ent):
    h, w = np.asarray(h, np.float64), np.asarray(w, np.float64)
    g_lp, g_ent = np.asarray(g_lp, np.float64), np.asarray(g_ent, np.float64)
    z = h @ w / temperature
    zmax = z.max(axis=1, keepdims=True)
    logp_all = z - (zmax + np.log(np.exp(z - zmax).sum(axis=1, keepdims=True)))
    p = np.exp(logp_all)
    rows = np.arange(z.shape[0])
    ent = -(p * logp_all).sum(axis=1)
    onehot = np.zeros_like(z)
    onehot[rows, tgt] = 1.0
    dz = (g_lp[:, None] * (onehot - p) - g_ent[:, None] * p * (logp_all + ent[:, None]))
    dz /= temperature
    return logp_all[rows, tgt], ent, dz @ w.T, h.T @ dz


def rel_err(x, ref):
    x = np.asarray(jnp.asarray(x, jnp.float32), np.float64)
    if not np.all(np.isfinite(x)):
        return float("inf")
    return float(np.linalg.norm(x - ref) / np.linalg.norm(ref))


def cases(n, d, v):
    rng = np.random.default_rng(0)
    g = lambda: (jnp.asarray(rng.normal(size=n), jnp.float32),
                 jnp.asarray(rng.normal(size=n), jnp.float32))
    tgt = jnp.asarray(rng.integers(0, v, n), jnp.int32)
    h = rng.normal(size=(n, d))
    w = rng.normal(size=(d, v)) * (3.0 / np.sqrt(d))
    yield "f32 random, T=1", jnp.float32, h, w, tgt, 1.0, g(), 1e-5
    yield "f32 random, T=0.7", jnp.float32, h, w, tgt, 0.7, g(), 1e-5
    # Exactly representable logits spanning ~+-3e3 plus a +1024 offset on half of the rows.
    hi = rng.integers(-4, 5, size=(n, d)) * 2.0 ** rng.choice([-6, -4, 0, 2, 4], size=(n, 1))
    wi = rng.integers(-8, 9, size=(d, v)).astype(np.float64)
    hi[:, 0] = np.where(rng.random(n) < 0.5, 64.0, 0.0)
    wi[0, :] = 16.0
    yield "f32 extreme logits, T=0.5", jnp.float32, hi, wi, tgt, 0.5, g(), 1e-5
    yield "bf16 random, T=0.8", jnp.bfloat16, h, w, tgt, 0.8, g(), 1e-2


def check(n, d, v, strategy):
    fn = functools.partial(logprob_entropy_pallas, strategy=strategy)
    lines = ["| case | logp | entropy | d hidden | d unembed | tol | ok |",
             "|---|---|---|---|---|---|---|"]
    all_ok = True
    with jax.default_matmul_precision("highest"):
        for name, dtype, h, w, tgt, temp, (g_lp, g_ent), tol in cases(n, d, v):
            hj, wj = jnp.asarray(h, dtype), jnp.asarray(w, dtype)
            f = jax.jit(functools.partial(fn, targets_N=tgt, temperature=temp))
            out, vjp = jax.vjp(f, hj, wj)
            got = (*out, *vjp((g_lp, g_ent)))
            want = reference(np.asarray(hj.astype(jnp.float32)), np.asarray(wj.astype(jnp.float32)),
                             np.asarray(tgt), temp, g_lp, g_ent)
            errs = [rel_err(x, r) for x, r in zip(got, want)]
            ok = max(errs) <= tol
            all_ok &= ok
            lines.append(f"| {name} | " + " | ".join(f"{e:.2e}" for e in errs)
                         + f" | {tol:g} | {'PASS' if ok else 'FAIL'} |")
    return "\n".join(lines), all_ok


def bench(n, d, v, dtype, runs, impls):
    rows, base = [], None
    args = concrete_args(n, d, v, dtype)
    for name in impls:
        fn = {"naive": logprob_entropy_naive, "chunked": logprob_entropy_chunked,
              "pallas": logprob_entropy_pallas}[name]
        t0 = time.perf_counter()
        compiled = fwd_bwd(fn).lower(*abstract_args(n, d, v, dtype)).compile()
        compile_s = time.perf_counter() - t0
        temp = compiled.memory_analysis().temp_size_in_bytes
        jax.block_until_ready(compiled(*args))
        ts = []
        for _ in range(runs):
            t0 = time.perf_counter()
            jax.block_until_ready(compiled(*args))
            ts.append(time.perf_counter() - t0)
        med = statistics.median(ts)
        base = base or (med, temp)
        rows.append(f"| {name} | {temp / 2**20:,.0f} | {temp / base[1]:.3f} | {compile_s:.1f} | "
                    f"{med * 1e3:.1f} | {med / base[0]:.2f} |")
        del compiled
    head = ["| impl | temp MiB | temp / naive | compile s | fwd+bwd ms (median) | time / naive |",
            "|---|---|---|---|---|---|"]
    return "\n".join(head + rows)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--check-shape", default="300,256,5000", help="N,D,V of the numerics check")
    p.add_argument("--shape", default="8192,3584,152064", help="N,D,V of the timing")
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--strategy", default=None, choices=[None, "atomic", "sequential"],
                   help="Pallas backward strategy (default: BLOCK_TABLE for the backend)")
    p.add_argument("--skip-check", action="store_true")
    p.add_argument("--skip-bench", action="store_true")
    a = p.parse_args(argv)
    dev = jax.devices()[0]
    print(f"device: {dev.platform} {dev.device_kind}; jax {jax.__version__}")
    if dev.platform != "gpu":
        print("warning: no GPU visible to JAX; Pallas will run in interpret mode", file=sys.stderr)
    ok = True
    if not a.skip_check:
        n, d, v = (int(x) for x in a.check_shape.split(","))
        text, ok = check(n, d, v, a.strategy)
        print(f"\n### Pallas numerics vs float64, (N, D, V) = ({n}, {d}, {v})\n\n{text}\n")
    if not a.skip_bench:
        n, d, v = (int(x) for x in a.shape.split(","))
        text = bench(n, d, v, jnp.dtype(a.dtype), a.runs, ["naive", "chunked", "pallas"])
        print(f"\n### Forward+backward, (N, D, V) = ({n}, {d}, {v}), {a.dtype}, "
              f"{dev.device_kind}\n\n{text}\n")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
