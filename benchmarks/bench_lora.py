"""The sampler's decode step with LoRA adapters merged into its weights vs applied as low-rank
terms, side by side in one run (CPU), plus what each costs at a weight sync.

    python benchmarks/bench_lora.py                       # all shapes; docs updated
    python benchmarks/bench_lora.py --models tiny --slots 8 --no-write

Letters: B decode slots, S cache length, R rank.

Each variant is `tseeds_jax.model.lora.decode_variant(model, mode)`: "merged" is a plain model
with W + scale * A @ B (the decode step of a model without LoRA), "lowrank" the adapted model,
whose every projection adds scale * (x @ A) @ B. One jitted `fori_loop` of `--steps` one-token
decode steps (greedy feed) over a KV cache of B slots prefilled with `--prompt-len` tokens;
tokens/s = B x steps / wall time, best of `--repeats` rounds in which the two variants are timed
in alternation (one untimed call each first); the ratio is the median of the rounds' ratios, and
XLA:CPU's cost analysis of both compiled loops (flops, bytes accessed) is printed beside it. At a
sync, "merged" rewrites every adapted weight (the jitted `lora.merge_params`, timed the same
way) and moves those bytes; "lowrank" moves the adapters only. Float32 throughout.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from tseeds_jax.model import KVCache, ModelConfig, init_model, lora

MODELS = {
    # configs/tiny_*'s default architecture (`TrainModelConfig.arch`), vocabulary 256
    "tiny": ModelConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True),
    # benchmarks/bench_sampler.py's shapes
    "qwen2-4L-256": ModelConfig(vocab_size=4096, hidden_size=256, intermediate_size=1024,
                                num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=4),
    "qwen2-50M": ModelConfig(vocab_size=16384, hidden_size=512, intermediate_size=1536,
                             num_hidden_layers=10, num_attention_heads=8, num_key_value_heads=4),
}
COLUMNS = ["model (params)", "slots B", "rank", "merged tok/s", "low-rank tok/s",
           "low-rank / merged (median of rounds)", "XLA flops low-rank / merged",
           "XLA bytes low-rank / merged", "merge per sync ms", "sync bytes merged",
           "sync bytes low-rank"]


def adapted_model(cfg: ModelConfig, rank: int, seed: int = 0):
    """A random model with every projection adapted (default targets), B random (not zero)."""
    model = lora.apply_lora(init_model(cfg, seed), lora.LoraConfig(rank=rank, alpha=2.0 * rank),
                            seed=seed)
    rng = np.random.default_rng(seed)
    lora.load_adapters(model, jax.tree.map(lambda x: jnp.asarray(rng.normal(0, 0.02, x.shape),
                                                                 x.dtype),
                                           lora.adapter_params(model)))
    return model


def decode_loop(model, slots: int, prompt_len: int, steps: int):
    """run() -> last tokens [B, 1] after `steps` greedy decode steps from a prefilled cache; the
    variant's decode step is the only thing timed."""
    graphdef, params = nnx.split(model)
    cfg = model.cfg
    prompt_BP = jnp.asarray(np.random.default_rng(1).integers(0, cfg.vocab_size,
                                                              (slots, prompt_len)), jnp.int32)

    @jax.jit
    def prefill(params):
        m = nnx.merge(graphdef, params)
        logits, cache = m.decode(prompt_BP, KVCache.init(cfg, slots, prompt_len + steps + 1))
        return cache, jnp.argmax(logits[:, -1], -1).astype(jnp.int32)[:, None]

    @jax.jit
    def loop(params, cache, tok_B1):
        m = nnx.merge(graphdef, params)

        def body(_, carry):
            cache, tok = carry
            logits, cache = m.decode(tok, cache)
            return cache, jnp.argmax(logits[:, -1], -1).astype(jnp.int32)[:, None]

        return jax.lax.fori_loop(0, steps, body, (cache, tok_B1))[1]

    cache, tok = jax.block_until_ready(prefill(params))
    cost = loop.lower(params, cache, tok).compile().cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost
    run = lambda: jax.block_until_ready(loop(params, cache, tok))  # noqa: E731
    return run, {k: float(cost.get(k, 0.0)) for k in ("flops", "bytes accessed")}


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def bench_one(cfg, slots, rank, args):
    model = adapted_model(cfg, rank)
    built = {mode: decode_loop(lora.decode_variant(model, mode), slots, args.prompt_len, args.steps)
             for mode in lora.DECODE_MODES}
    runs = {mode: b[0] for mode, b in built.items()}
    cost = {mode: b[1] for mode, b in built.items()}
    lcfg = lora.lora_config_of(model)
    base, adapters = lora.base_params(model), lora.adapter_params(model)
    merge = jax.jit(lora.merge_params, static_argnums=2)
    sync = lambda: jax.block_until_ready(merge(base, adapters, lcfg))  # noqa: E731
    for fn in (*runs.values(), sync):
        fn()  # compile and warm
    best = {mode: float("inf") for mode in (*runs, "sync")}
    ratios = []
    for _ in range(args.repeats):
        took = {}
        for mode, fn in (*runs.items(), ("sync", sync)):
            fn()
            took[mode] = _timed(fn)
            best[mode] = min(best[mode], took[mode])
        ratios.append(took["merged"] / took["lowrank"])
    adapted = {lora.TARGETS[t][1] for t in lcfg.targets}
    merged_bytes = sum(x.nbytes for path, x in nnx.to_flat_state(nnx.state(model, lora.FROZEN))
                       if path[0] == "layers" and path[3] in adapted)
    adapter_bytes = sum(x.nbytes for x in jax.tree.leaves(adapters))
    n_params = sum(x.size for x in jax.tree.leaves(base))
    tps = {mode: slots * args.steps / best[mode] for mode in runs}
    return dict(params=n_params, merged=tps["merged"], lowrank=tps["lowrank"],
                ratio=float(np.median(ratios)),
                flops=cost["lowrank"]["flops"] / cost["merged"]["flops"],
                bytes=cost["lowrank"]["bytes accessed"] / cost["merged"]["bytes accessed"],
                sync_ms=best["sync"] * 1e3, merged_bytes=merged_bytes, adapter_bytes=adapter_bytes)


def _mb(n: int) -> str:
    return f"{n / 1e6:.2f} MB"


def _record(rows, cmd, load):
    from tseeds_jax import results_record

    cells = [[f"{r['model']} ({r['params'] / 1e6:.1f}M)", str(r["slots"]), str(r["rank"]),
              f"{r['merged']:.0f}", f"{r['lowrank']:.0f}", f"{r['ratio']:.2f}x",
              f"{r['flops']:.3f}x", f"{r['bytes']:.3f}x", f"{r['sync_ms']:.2f}",
              _mb(r["merged_bytes"]), _mb(r["adapter_bytes"])]
             for r in rows]
    values = {"load_avg_1min_start": {"value": round(load[0], 2), "unit": "load"},
              "load_avg_1min_end": {"value": round(load[1], 2), "unit": "load"}}
    for r in rows:
        values[f"{r['model']}_b{r['slots']}_r{r['rank']}_lowrank_vs_merged"] = {
            "value": round(r["ratio"], 2), "unit": "x (median of rounds)"}
    return results_record.make(
        "lora_decode", "decode-step tokens/s with LoRA adapters merged into the weights vs "
        "applied as low-rank terms, and the cost of a weight sync (CPU)", "measured", cmd,
        backend="cpu (XLA:CPU, one device)", values=values,
        table={"columns": COLUMNS, "rows": cells})


def _write_docs(record, args, cmd):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import docsection  # noqa: PLC0415

    body = f"""## LoRA decode: adapters merged into the weights vs low-rank terms

Command: `{cmd}` — {datetime.date.today().isoformat()}, {os.cpu_count()} CPU cores visible
(shared with other jobs; load average below), Python {platform.python_version()},
jax {jax.__version__}.

Every projection (q, k, v, o, gate, up, down) adapted, alpha = 2 x rank, float32. One jitted
loop of {args.steps} greedy one-token decode steps over a KV cache prefilled with
{args.prompt_len} tokens per slot; tokens/s = slots x steps / wall time, best of
{args.repeats} rounds timing the two variants in alternation; the ratio is the median of the
rounds' ratios (each round's two timings share the machine's load, which the best-of figures
do not). The XLA columns are XLA:CPU's own cost analysis of the two compiled loops (flops and
bytes accessed; a property of the programs, not of the machine's load). "merged": the adapters folded
into the weights (`lora.decode_variant(model, "merged")`, the plain model's decode step);
"low-rank": the adapted model, each projection adding scale x (x @ A) @ B. A weight sync costs
"merged" one `lora.merge_params` (timed, jitted) and the adapted weights' bytes it writes (the
trainer moves the adapters only and merges where the sampler runs); "low-rank" the adapter bytes
only. The compiled TPU programs decided between the two: "merged" (docs/lora.md, "Which decode
step").

{docsection.table_block(record)}

Load average (1 min) at start / end of this run: {docsection.fig(record, "load_avg_1min_start")}
/ {docsection.fig(record, "load_avg_1min_end")}.

Reading: at rank 16 the low-rank terms add a few percent to the flops and bytes of a decode step
of the 6M and 48M shapes (more for the tiny model, whose projections are barely larger than the
adapters), while a merged sync moves every adapted weight and pays a merge each time. On this
shared 2-core machine the wall-clock ratios move by tens of percent between runs of the same
command, so they do not decide between the two decode variants; the compiled TPU programs did
(docs/lora.md).
"""
    docsection.write_section("lora", body, record=record)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    ap.add_argument("--slots", nargs="+", type=int, default=[8, 64])
    ap.add_argument("--ranks", nargs="+", type=int, default=[16])
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--prompt-len", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--no-write", action="store_true", help="print only")
    args = ap.parse_args(argv)
    cmd = "python benchmarks/bench_lora.py" + (" " + " ".join(sys.argv[1:]) if sys.argv[1:] else "")
    load0 = os.getloadavg()[0]
    rows = []
    for name in args.models:
        for slots in args.slots:
            for rank in args.ranks:
                r = dict(model=name, slots=slots, rank=rank,
                         **bench_one(MODELS[name], slots, rank, args))
                rows.append(r)
                print(f"{name:14s} B={slots:3d} r={rank:3d}: merged {r['merged']:8.0f} tok/s, "
                      f"low-rank {r['lowrank']:8.0f} tok/s (median {r['ratio']:.2f}x; XLA flops "
                      f"{r['flops']:.3f}x, bytes {r['bytes']:.3f}x); "
                      f"merge {r['sync_ms']:.2f} ms, sync {_mb(r['merged_bytes'])} vs "
                      f"{_mb(r['adapter_bytes'])}", flush=True)
    record = _record(rows, cmd, (load0, os.getloadavg()[0]))
    if not args.no_write:
        _write_docs(record, args, cmd)
    return 0


if __name__ == "__main__":
    sys.exit(main())
