"""Memory and speed of the fused log-prob / entropy implementations, as ratios to `naive`.

Shape letters: N tokens, D model width, V vocabulary.

For each (N, D, V) and implementation this compiles forward+backward (value and gradients w.r.t.
hidden and unembed through both outputs) and reports XLA's memory_analysis (temp, argument and
output bytes; peak_memory is not reliable on CPU so it is not used), and, for shapes not marked
compile-only, the median wall time of >= 5 runs after a warm-up. Pallas on CPU only runs in
interpret mode (~1 ms per tile), so there it is compiled but never timed.

    python benchmarks/bench_logprob_entropy.py                       # full run, rewrites docs
    python benchmarks/bench_logprob_entropy.py --shapes small --no-write   # quick look
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import sys
import time

import docsection
import jax
import jax.numpy as jnp
import numpy as np
from tseeds_jax.kernels import (
    logprob_entropy_chunked,
    logprob_entropy_naive,
    logprob_entropy_pallas,
)

SHAPES = {  # name: (N, D, V, compile_only)
    "small": (2048, 512, 32768, False),
    "mid": (4096, 1024, 65536, False),
    "large": (8192, 3584, 152064, True),
}
IMPLS = {
    "naive": logprob_entropy_naive,
    "chunked": logprob_entropy_chunked,
    "pallas": logprob_entropy_pallas,
}
SECTION = "logprob_entropy"
DOC = docsection.DOC


def fwd_bwd(fn, temperature=1.0):
    """jit of (loss, (d hidden, d unembed)) with loss = logp . a + entropy . b."""

    def loss(h, w, t, a, b):
        logp, ent = fn(h, w, t, temperature=temperature)
        return logp @ a + ent @ b

    return jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))


def abstract_args(n, d, v, dtype):
    s = jax.ShapeDtypeStruct
    return (s((n, d), dtype), s((d, v), dtype), s((n,), jnp.int32), s((n,), jnp.float32),
            s((n,), jnp.float32))


def concrete_args(n, d, v, dtype, seed=0):
    rng = np.random.default_rng(seed)
    h = jnp.asarray(rng.normal(size=(n, d)), dtype)
    w = jnp.asarray(rng.normal(size=(d, v)) * (3.0 / np.sqrt(d)), dtype)
    t = jnp.asarray(rng.integers(0, v, n), jnp.int32)
    a = jnp.asarray(rng.normal(size=n), jnp.float32)
    b = jnp.asarray(rng.normal(size=n), jnp.float32)
    return h, w, t, a, b


def time_it(compiled, args, runs):
    jax.block_until_ready(compiled(*args))  # warm-up
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        jax.block_until_ready(compiled(*args))
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def measure(shape_names, impl_names, dtype, runs, allow_pallas_run):
    rows = []
    on_cpu = jax.default_backend() == "cpu"
    for sname in shape_names:
        n, d, v, compile_only = SHAPES[sname]
        args = None
        for iname in impl_names:
            f = fwd_bwd(IMPLS[iname])
            t0 = time.perf_counter()
            compiled = f.lower(*abstract_args(n, d, v, dtype)).compile()
            ma = compiled.memory_analysis()
            row = dict(shape=(n, d, v), impl=iname, temp=ma.temp_size_in_bytes,
                       arg=ma.argument_size_in_bytes, out=ma.output_size_in_bytes,
                       compile_s=time.perf_counter() - t0, time=None, note="")
            if compile_only:
                row["note"] = "compile only"
            elif iname == "pallas" and on_cpu and not allow_pallas_run:
                row["note"] = "CPU interpret mode: compiled, not timed"
            else:
                if args is None:
                    args = concrete_args(n, d, v, dtype)
                row["time"] = time_it(compiled, args, runs)
                del compiled
            rows.append(row)
            print(fmt_row(row, None), flush=True)
    return rows


def mib(x):
    return f"{x / 2**20:,.1f}"


COLUMNS = ["(N, D, V)", "impl", "temp MiB", "temp / naive", "args MiB", "outputs MiB",
           "fwd+bwd s (median)", "time / naive", "note"]


def cells(row, base):
    n, d, v = row["shape"]
    temp_ratio = time_ratio = "-"
    if base is not None and base["temp"]:
        temp_ratio = f"{row['temp'] / base['temp']:.3f}"
    if base is not None and row["time"] is not None and base["time"]:
        time_ratio = f"{row['time'] / base['time']:.2f}"
    t = "-" if row["time"] is None else f"{row['time']:.3f}"
    return [f"({n}, {d}, {v})", row["impl"], mib(row["temp"]), temp_ratio, mib(row["arg"]),
            mib(row["out"]), t, time_ratio, row["note"]]


def fmt_row(row, base):
    return "| " + " | ".join(cells(row, base)) + " |"


def table_rows(rows):
    out = []
    for r in rows:
        base = next((b for b in rows if b["shape"] == r["shape"] and b["impl"] == "naive"), None)
        out.append(cells(r, base))
    return out


def table(rows):
    return "\n".join(["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
                     + ["| " + " | ".join(c) + " |" for c in table_rows(rows)])


def record(rows, command, dtype):
    """The run as a result record (kind "measured": XLA:CPU memory analysis and timings)."""
    from tseeds_jax import results_record

    return results_record.make(
        "logprob_entropy_cpu", f"fused log-prob + entropy forward + backward, {dtype}: XLA "
        "memory analysis and median times of naive / chunked / pallas (CPU)", "measured", command,
        backend=jax.default_backend(), table={"columns": COLUMNS, "rows": table_rows(rows)})


def write_section(body: str, path: str = DOC, rec: dict | None = None):
    """Rewrites only this script's section of docs/benchmarks.md (others own the rest) and
    writes its result record."""
    docsection.write_section(SECTION, body, path, record=rec)


def section(rows, command, dtype, runs, rec):
    date = datetime.date.today().isoformat()
    dev = jax.devices()[0]
    return f"""## Fused log-prob + entropy (`tseeds_jax.kernels.logprob_entropy`)

Forward + backward (loss = logp·a + entropy·b, gradients w.r.t. hidden and unembed), {dtype},
measured {date} on `{dev.platform}` ({dev.device_kind}, {os.cpu_count()} CPU cores visible; the
machine was shared with other jobs, so absolute times are noisy, ratios were measured side by side).
Memory is XLA's compiled `memory_analysis()`: temp = scratch buffers beyond arguments and outputs.
Times: median of {runs} runs after one warm-up; the largest shape is compiled only.

Command: `{command}`

{docsection.table_block(rec)}

Notes:
- `naive` materialises the [N, V] logits (and autodiff keeps several [N, V] buffers); `chunked`
  scans 2048-column vocabulary blocks inside 2048-token blocks with an online log-sum-exp and
  recomputes each logits tile once in the backward.
- `pallas` on CPU runs only in interpret mode (~1 ms per tile), so it is compiled (its memory
  numbers describe the interpreter's lowering, not a TPU/GPU kernel) but not timed.
- GPU numbers are pending: run `benchmarks/gpu_logprob_entropy.sh` on a machine with an NVIDIA GPU
  (checks the Pallas kernel against float64 references and times pallas / chunked / naive at
  (8192, 3584, 152064)). TPU numbers are pending as well.
"""


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shapes", default="small,mid,large",
                   help=f"comma list of {sorted(SHAPES)} (default: all)")
    p.add_argument("--impls", default="naive,chunked,pallas",
                   help=f"comma list of {list(IMPLS)}; naive is always added (ratios)")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    p.add_argument("--runs", type=int, default=5, help="timed runs per cell (>= 5 for the docs)")
    p.add_argument("--time-pallas-on-cpu", action="store_true",
                   help="also time Pallas in interpret mode (very slow; off by default)")
    p.add_argument("--no-write", action="store_true", help="print only, leave docs alone")
    a = p.parse_args(argv)
    shapes = [s for s in a.shapes.split(",") if s]
    impls = [i for i in a.impls.split(",") if i]
    for s in shapes:
        if s not in SHAPES:
            p.error(f"--shapes: unknown shape {s!r}; choose from {sorted(SHAPES)}")
    for i in impls:
        if i not in IMPLS:
            p.error(f"--impls: unknown impl {i!r}; choose from {list(IMPLS)}")
    if "naive" not in impls:
        impls = ["naive"] + impls
    if a.runs < 1:
        p.error(f"--runs must be >= 1, got {a.runs}")
    rows = measure(shapes, impls, jnp.dtype(a.dtype), a.runs, a.time_pallas_on_cpu)
    print(table(rows))
    if not a.no_write:
        command = "python benchmarks/bench_logprob_entropy.py " + " ".join(
            argv if argv is not None else sys.argv[1:])
        rec = record(rows, command.strip(), a.dtype)
        write_section(section(rows, command.strip(), a.dtype, a.runs, rec), rec=rec)
        print(f"wrote section {SECTION!r} of {os.path.normpath(DOC)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
