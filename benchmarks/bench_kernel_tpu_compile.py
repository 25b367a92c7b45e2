"""Fused log-prob / entropy compiled by XLA's TPU compiler for v4, v5e, v5p and v6e (compile only).

Shape letters: N tokens per device, D model width, V vocabulary.

For every generation and shape, naive / chunked XLA / Pallas forward+backward (bf16 inputs,
float32 statistics) is lowered with `jax.ShapeDtypeStruct`s on one compile-only TPU device
(`jax.experimental.topologies`, libtpu from requirements-tpu.txt), compiled, and its
`memory_analysis()` read: temp, argument and output bytes, and the compile time. Nothing runs on a
TPU; this machine has none. `cost_analysis()` is not shown: it does not count FLOPs inside Pallas
calls.

Bound (issue 14): temp <= 5% of naive's temp (same generation, same shape) + D * V * 4 bytes (one
float32 copy of d unembed). The acceptance is for v5p at (8192, 3584, 152064) and (2048, 512,
32768); the table applies the same bound everywhere.

Shapes: the per-device tokens of one micro-batch of the paper configs (paper.py: one sequence per
device of the batch axes per micro-step, so N = max_response_len), their model's D and V, plus the
two acceptance shapes:

    python benchmarks/bench_kernel_tpu_compile.py            # all (about 20 minutes on 2 cores)
    python benchmarks/bench_kernel_tpu_compile.py --gens v5p --shapes accept-small --no-write
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import sys
import time

os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")  # libtpu's lock file: one process only

import docsection  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

DOC = docsection.DOC
SECTION = "kernel_tpu_compile"
MiB = 2**20

TOPOLOGIES = {"v4": "v4:2x2x1", "v5e": "v5e:2x2", "v5p": "v5p:2x2x1", "v6e": "v6e:2x2"}
# name: (N, D, V, where it comes from)
SHAPES = {
    "qwen25-math-7b": (3072, 3584, 152064,
                       "configs/qwen25_math_7b_dapo17k.py: 1 x 3072 response tokens"),
    "r1-distill-1p5b": (8192, 1536, 151936,
                        "configs/r1_distill_qwen_1p5b_openr1.py: 1 x 8192 response tokens"),
    "qwen3-4b": (16384, 2560, 151936,
                 "configs/qwen3_4b_thinking_code.py: 1 x 16384 response tokens"),
    "accept-small": (2048, 512, 32768, "issue 14 acceptance"),
    "accept-7b": (8192, 3584, 152064, "issue 14 acceptance"),
}
IMPLS = ("naive", "chunked", "pallas")


def compile_one(impl: str, gen: str, n: int, d: int, v: int, device):
    from jax.sharding import SingleDeviceSharding

    from tseeds_jax import kernels

    fn = {"naive": kernels.logprob_entropy_naive, "chunked": kernels.logprob_entropy_chunked,
          "pallas": kernels.logprob_entropy_pallas}[impl]
    sh = SingleDeviceSharding(device)
    s = lambda shape, dt: jax.ShapeDtypeStruct(shape, dt, sharding=sh)
    args = (s((n, d), jnp.bfloat16), s((d, v), jnp.bfloat16), s((n,), jnp.int32),
            s((n,), jnp.float32), s((n,), jnp.float32))

    def loss(h, w, t, g_lp, g_ent):
        logp, ent = fn(h, w, t)
        return logp @ g_lp + ent @ g_ent

    t0 = time.perf_counter()
    with kernels.compile_target("tpu", gen):
        compiled = jax.jit(jax.grad(loss, argnums=(0, 1))).lower(*args).compile()
    secs = time.perf_counter() - t0
    mem = compiled.memory_analysis()
    row = dict(temp=mem.temp_size_in_bytes, argument=mem.argument_size_in_bytes,
               output=mem.output_size_in_bytes, compile_s=secs)
    vmem = kernels.tpu_blocks.mosaic_vmem_used(compiled.as_text())
    if vmem:
        row["vmem_used"] = max(vmem)
    return row


def run(gens, shapes, impls):
    from jax.experimental import topologies

    from tseeds_jax import kernels

    rows = []
    for gen in gens:
        device = topologies.get_topology_desc(platform="tpu",
                                              topology_name=TOPOLOGIES[gen]).devices[0]
        for shape in shapes:
            n, d, v, _ = SHAPES[shape]
            naive_temp = None
            for impl in impls:
                row = dict(gen=gen, shape=shape, n=n, d=d, v=v, impl=impl)
                if impl == "pallas":
                    cfg = kernels.block_config("tpu", gen, n, d, v, jnp.bfloat16)
                    row["blocks"] = f"{cfg.block_n}x{cfg.block_v}"
                    row["vmem_limit"] = kernels.vmem_limit_bytes(gen)
                try:
                    row.update(compile_one(impl, gen, n, d, v, device))
                except Exception as e:  # a failed compile is a result: report it, go on
                    row["error"] = re.sub(r"\s+", " ", f"{type(e).__name__}: {e}")[:300]
                if impl == "naive" and "temp" in row:
                    naive_temp = row["temp"]
                if naive_temp is not None:
                    row["bound"] = 0.05 * naive_temp + d * v * 4
                print(json.dumps(row), flush=True)
                rows.append(row)
    return rows


def _mib(x):
    return f"{x / MiB:,.1f}"


def table(rows) -> str:
    out = ["| gen | shape (N, D, V) | impl | blocks | kernel VMEM MiB | temp MiB | argument MiB "
           "| output MiB | compile s | bound MiB | temp <= bound |",
           "|---|---|---|---|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        shape = f"{r['shape']} ({r['n']}, {r['d']}, {r['v']})"
        if "error" in r:
            out.append(f"| {r['gen']} | {shape} | {r['impl']} | {r.get('blocks', '')} | "
                       f"FAILED: {r['error']} | | | | | | |")
            continue
        bound = r.get("bound") if r["impl"] != "naive" else None  # the baseline itself
        ok = "" if bound is None else ("pass" if r["temp"] <= bound else "FAIL")
        vmem = f"{_mib(r['vmem_used'])} / {_mib(r['vmem_limit'])}" if "vmem_used" in r else ""
        out.append(f"| {r['gen']} | {shape} | {r['impl']} | {r.get('blocks', '')} | {vmem} | "
                   f"{_mib(r['temp'])} | {_mib(r['argument'])} | {_mib(r['output'])} | "
                   f"{r['compile_s']:.1f} | {'' if bound is None else _mib(bound)} | {ok} |")
    return "\n".join(out)


def section(rows, command) -> str:
    import libtpu

    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    shapes = "\n".join(f"- `{k}` (N, D, V) = {v[:3]}: {v[3]}" for k, v in SHAPES.items()
                       if any(r["shape"] == k for r in rows))
    pallas = [r for r in rows if r["impl"] == "pallas"]
    bad = [f"{r['gen']} {r['shape']}" for r in pallas
           if "error" in r or r["temp"] > r.get("bound", float("inf"))]
    accept = [f"{r['shape']}: {_mib(r['temp'])} MiB vs bound {_mib(r['bound'])} MiB "
              f"(naive {_mib((r['bound'] - r['d'] * r['v'] * 4) / 0.05)} MiB)"
              for r in pallas if r["gen"] == "v5p" and r["shape"].startswith("accept")
              and "bound" in r and "temp" in r]
    summary = (f"Pallas compiled and within the bound in {len(pallas) - len(bad)} of {len(pallas)}"
               f" cases{': not ' + ', '.join(bad) if bad else ''}. Acceptance (v5p): "
               + "; ".join(accept) + ".")
    return f"""## Fused log-prob + entropy compiled for TPU (compile only)

Command (`{date}`, jax {jax.__version__}, libtpu {getattr(libtpu, '__version__', '?')}, on the
2-core CPU machine; compile-only devices of the topologies {', '.join(TOPOLOGIES.values())}):

<!-- doc-test: manual -->
```bash
{command}
```

Forward+backward, bf16 hidden and unembedding, one device. temp / argument / output are the TPU
compiler's `memory_analysis()` per device; bound = 5% of naive's temp + D x V x 4 bytes (issue 14);
blocks = the Pallas (block_n x block_v) chosen for the generation (`kernels.block_config`);
kernel VMEM = the largest VMEM that Mosaic reports using for one of the three Pallas calls (forward,
d hidden, d unembed), against the `vmem_limit_bytes` they are compiled with.
Compile seconds are on this shared 2-core machine. temp counts HBM only: on v6e the compiler
places small temporaries in VMEM (`S(1)` in the HLO) and on v4 in CMEM (`S(3)`), so a temp can
read 0 there.
Shapes (per-device tokens of one micro-batch, one sequence per device of the batch axes):

{shapes}

{summary}

{table(rows)}
"""


def _libtpu_version() -> str:
    from importlib import metadata

    for dist in ("libtpu", "libtpu-nightly"):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return "unknown"


def write_section(body: str, path: str = DOC, cmd: str = "python benchmarks/bench_kernel_tpu_compile.py"):
    """Rewrites only this script's section of docs/benchmarks.md (others own the rest); its table
    goes into the result record docs/results/kernel_tpu_compile.json (kind "compile-only bound")."""
    import jax

    body, records = docsection.record_tables(
        body, [("kernel_tpu_compile", "fused log-prob + entropy forward + backward compiled for "
                "one TPU device per generation (compile-only devices): memory analysis per "
                "device, Pallas blocks and VMEM, against issue 14's bound")],
        "compile-only bound", cmd, backend=f"tpu (compile-only, jax {jax.__version__}, libtpu "
                                         f"{_libtpu_version()})")
    docsection.write_section(SECTION, body, path, records=records)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--gens", default=",".join(TOPOLOGIES), help="comma list of " +
                   ", ".join(TOPOLOGIES))
    p.add_argument("--shapes", default=",".join(SHAPES), help="comma list of " +
                   ", ".join(SHAPES))
    p.add_argument("--impls", default=",".join(IMPLS))
    p.add_argument("--no-write", action="store_true", help="print only; leave docs alone")
    p.add_argument("--render", metavar="LOG",
                   help="no compiling: rewrite the section from the JSON lines an earlier run "
                        "printed to LOG (its command is taken from the other flags)")
    a = p.parse_args(argv)
    for flag, given, known in (("--gens", a.gens, TOPOLOGIES), ("--shapes", a.shapes, SHAPES),
                               ("--impls", a.impls, IMPLS)):
        bad = [x for x in given.split(",") if x not in known]
        if bad:
            print(f"{flag}: unknown {bad}; known: {list(known)}", file=sys.stderr)
            return 2
    try:
        import libtpu  # noqa: F401
    except ImportError:
        print("libtpu is not installed (pip install -r requirements-tpu.txt)", file=sys.stderr)
        return 2
    if a.render:
        with open(a.render) as f:
            rows = [json.loads(line) for line in f if line.startswith("{")]
    else:
        rows = run(a.gens.split(","), a.shapes.split(","), a.impls.split(","))
    print(table(rows))
    if not a.no_write:
        cmd = "python benchmarks/bench_kernel_tpu_compile.py" + "".join(
            f" {f} {v}" for f, v, d in (("--gens", a.gens, ",".join(TOPOLOGIES)),
                                        ("--shapes", a.shapes, ",".join(SHAPES)),
                                        ("--impls", a.impls, ",".join(IMPLS))) if v != d)
        write_section(section(rows, cmd), cmd=cmd)
    return 0


if __name__ == "__main__":
    sys.exit(main())
