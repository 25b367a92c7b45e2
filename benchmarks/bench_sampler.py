"""Sampler throughput and time-to-first-token: our KV-cache engine vs a no-cache recompute
baseline vs HF transformers `generate` (torch CPU) on the same weights, side by side.

    python benchmarks/bench_sampler.py                 # all models, batch 1/32/128; docs updated
    python benchmarks/bench_sampler.py --models qwen2-4L-256 --batches 1 32 --no-docs

Greedy, float32, random prompts of 16 tokens, 64 new tokens (no stop tokens), one warm-up call
per shape (compilation excluded). tokens/s = batch * new tokens / wall time of one call.
TTFT = wall time of a call with max_new_tokens=1 (prompt prefill + first token).
The recompute baseline (full forward over a fixed padded buffer each step, jitted as one
fori_loop) generates only `--recompute-new` tokens, which flatters it (shorter sequences).
"""

from __future__ import annotations

import argparse
import datetime
import functools
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from tseeds_jax.model import ModelConfig, init_model
from tseeds_jax.sampling import generate

MODELS = {
    # the model's default config (a tiny test model)
    "default": ModelConfig(),
    # the acceptance shape: Qwen2, vocab 4096, hidden 256, 4 layers, 8 heads, 4 KV heads
    "qwen2-4L-256": ModelConfig(vocab_size=4096, hidden_size=256, intermediate_size=1024,
                                num_hidden_layers=4, num_attention_heads=8,
                                num_key_value_heads=4),
    # ~48M parameters
    "qwen2-50M": ModelConfig(vocab_size=16384, hidden_size=512, intermediate_size=1536,
                             num_hidden_layers=10, num_attention_heads=8, num_key_value_heads=4),
}
DOCS = Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"


def _timed(fn, repeats=1):
    best = float("inf")
    out = None
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


# ---- ours ----
def ours_runner(model, prompts):
    """run(n) -> tokens of greedy generation with n new tokens (compiled for n = 1 and `new`
    by the first calls)."""
    def run(n):
        return [r.tokens for r in generate(model, prompts, max_new_tokens=n, temperature=0.0)]

    return run


# ---- no-cache recompute baseline ----
@functools.partial(jax.jit, static_argnums=(0, 3))
def _recompute(graphdef, params, tokens_BL, prompt_len):
    model = nnx.merge(graphdef, params)
    steps = tokens_BL.shape[1] - prompt_len

    def body(i, toks):
        logits = model(toks)  # causal: padding after the current position is never seen
        nxt = jnp.argmax(logits[:, prompt_len + i - 1], axis=-1).astype(toks.dtype)
        return toks.at[:, prompt_len + i].set(nxt)

    return jax.lax.fori_loop(0, steps, body, tokens_BL)


def bench_recompute(model, prompts, new, repeats):
    graphdef, params = nnx.split(model)
    p = np.asarray(prompts, np.int32)

    def run(n):
        buf = np.zeros((p.shape[0], p.shape[1] + n), np.int32)
        buf[:, :p.shape[1]] = p
        return np.asarray(_recompute(graphdef, params, buf, p.shape[1]))

    run(1)
    t, out = _timed(lambda: run(new), repeats)  # includes compiling the longer buffer
    t2, out = _timed(lambda: run(new), repeats)
    ttft, _ = _timed(lambda: run(1), repeats)
    return len(prompts) * new / min(t, t2), ttft, out[:, p.shape[1]:].tolist()


# ---- HF transformers ----
def hf_model_for(model, tmp):
    import torch  # noqa: PLC0415
    import transformers  # noqa: PLC0415

    from tseeds_jax.hf import save_pretrained  # noqa: PLC0415

    save_pretrained(model, tmp)
    hf = transformers.AutoModelForCausalLM.from_pretrained(tmp, dtype=torch.float32)
    return hf.eval()


def hf_runners(hf, prompts, default_threads):
    """{threads: run(n) -> new tokens}: HF greedy generate with 1 thread and with torch's
    default; both are timed in every round and HF is credited with the better (on a busy
    2-core machine one thread is sometimes faster: fair to HF)."""
    import torch  # noqa: PLC0415

    ids = torch.tensor(prompts, dtype=torch.long)
    mask = torch.ones_like(ids)

    def make(threads):
        def run(n):
            torch.set_num_threads(threads)
            with torch.inference_mode():
                out = hf.generate(ids, attention_mask=mask, max_new_tokens=n, min_new_tokens=n,
                                  do_sample=False, pad_token_id=0)
            return out[:, ids.shape[1]:].tolist()

        return run

    return {t: make(t) for t in sorted({1, default_threads})}


def interleaved(runners, new, rounds):
    """Best wall time of `run(new)` and of `run(1)` (TTFT) per runner, timed in alternation
    (A, B, A, B, ...) so that a drift in machine speed hits every runner alike. Each turn starts
    with one untimed call: timed right after the other runner, a call pays for waking its
    thread pool and refilling caches (measured up to 10x the steady-state TTFT). Returns
    {name: [best seconds for `new` tokens, best TTFT seconds, tokens]}."""
    for run in runners.values():
        run(new), run(1)  # compile / warm up
    best = {k: [float("inf"), float("inf"), None] for k in runners}
    for _ in range(rounds):
        for k, run in runners.items():
            run(new)  # untimed: brings this runner's threads and caches back to steady state
            t, out = _timed(functools.partial(run, new))
            ttft, _ = _timed(functools.partial(run, 1))
            b = best[k]
            b[0], b[1], b[2] = min(b[0], t), min(b[1], ttft), out
    return best


def _match(a, b):
    """Fraction of rows whose greedy tokens agree on the common prefix length."""
    ok = [x[:len(y)] == y[:len(x)] for x, y in zip(a, b)]
    return sum(ok) / len(ok)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    p.add_argument("--batches", nargs="+", type=int, default=[1, 32, 128])
    p.add_argument("--prompt-len", type=int, default=16)
    p.add_argument("--new", type=int, default=64)
    p.add_argument("--recompute-new", type=int, default=16)
    p.add_argument("--recompute-max-work", type=float, default=2e9,
                   help="skip the recompute baseline when params x batch exceeds this")
    p.add_argument("--repeats", type=int, default=5,
                   help="interleaved rounds (ours, HF, ours, HF, ...); best of each is kept")
    p.add_argument("--no-hf", action="store_true")
    p.add_argument("--no-docs", action="store_true")
    args = p.parse_args(argv)
    rows = []
    load0 = os.getloadavg()[0]
    torch_threads = None
    if not args.no_hf:
        import torch  # noqa: PLC0415

        torch_threads = torch.get_num_threads()  # the default, before any runner changes it
    for name in args.models:
        cfg = MODELS[name]
        model = init_model(cfg, seed=0)
        hf = None
        if not args.no_hf:
            tmp = tempfile.mkdtemp(prefix="bench_sampler_")
            hf = hf_model_for(model, tmp)
        for b in args.batches:
            rng = np.random.default_rng(b)
            prompts = rng.integers(0, cfg.vocab_size, size=(b, args.prompt_len)).tolist()
            runners = {"ours": ours_runner(model, prompts)}
            if hf is not None:
                runners.update({("hf", t): run
                                for t, run in hf_runners(hf, prompts, torch_threads).items()})
            rounds = args.repeats if b < 128 or hf is None else max(1, args.repeats // 2)
            best = interleaved(runners, args.new, rounds)
            n_tok = b * args.new
            ours = best["ours"]
            row = dict(model=name, params=cfg.num_params, batch=b, ours=(n_tok / ours[0], ours[1]))
            if cfg.num_params * b <= args.recompute_max_work:
                rec = bench_recompute(model, prompts, args.recompute_new, 1)
                row.update(rec=rec[:2], rec_match=_match(ours[2], rec[2]))
            if hf is not None:
                threads, h = min(((k[1], v) for k, v in best.items() if k != "ours"),
                                 key=lambda kv: kv[1][0])
                row.update(hf=(n_tok / h[0], h[1]), hf_match=_match(ours[2], h[2]),
                           hf_threads=threads)
            rows.append(row)
            print(_fmt_row(row), flush=True)
    table = _table(rows)
    print(table)
    if not args.no_docs:
        _write_docs(rows, args, (load0, os.getloadavg()[0]), torch_threads)
    return 0


def _fmt_row(r):
    s = f"{r['model']} b={r['batch']}: ours {r['ours'][0]:.0f} tok/s ttft {r['ours'][1]*1e3:.1f} ms"
    if "rec" in r:
        s += f" | recompute {r['rec'][0]:.0f} tok/s"
    if "hf" in r:
        s += f" | HF {r['hf'][0]:.0f} tok/s ttft {r['hf'][1]*1e3:.1f} ms | " \
             f"ours/HF {r['ours'][0] / r['hf'][0]:.2f}x | greedy match HF {r['hf_match']:.2f}"
    return s


COLUMNS = ["model (params)", "batch", "ours tok/s", "HF tok/s (threads)", "ours/HF",
           "recompute tok/s", "ours/recompute", "TTFT ours ms", "TTFT HF ms", "TTFT recompute ms",
           "greedy = HF"]


def _table(rows):
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(cells) + " |" for cells in _cells(rows)]
    return "\n".join(lines)


def _record(rows, cmd, load):
    """The run as a result record (kind "measured"): the table, and per model and batch the
    tokens/s of ours and HF and their ratio (measured in alternating rounds, so the ratio
    survives a shared machine better than the absolute numbers; the load is in the record)."""
    from tseeds_jax import results_record

    values = {"load_avg_1min_start": {"value": round(load[0], 2), "unit": "load"},
              "load_avg_1min_end": {"value": round(load[1], 2), "unit": "load"}}
    for r in rows:
        key = f"{r['model']}_b{r['batch']}"
        values[f"{key}_ours"] = {"value": int(round(r["ours"][0])), "unit": "tokens/s"}
        if "hf" in r:
            values[f"{key}_hf"] = {"value": int(round(r["hf"][0])), "unit": "tokens/s"}
            values[f"{key}_ratio"] = {"value": round(r["ours"][0] / r["hf"][0], 2),
                                      "unit": "x HF generate"}
    # The README's speeds before the 2026-12-03 re-measurement (issue 36): never printed again.
    stale = {k: v for k, v in STALE.items() if k in values}
    return results_record.make(
        "sampler_speed", "greedy sampling tokens/s, ours vs HF generate vs recompute (CPU)",
        "measured", cmd, backend="cpu", values=values,
        table={"columns": COLUMNS, "rows": _cells(rows)}, stale=stale)


STALE = {"qwen2-4L-256_b1_ours": ["~1,000 tokens/s"], "qwen2-4L-256_b32_ours": ["~7,000-7,700"]}


def _cells(rows):
    out = []
    for r in rows:
        hf, rec = r.get("hf"), r.get("rec")
        cells = [f"{r['model']} ({r['params'] / 1e6:.1f}M)", str(r["batch"]), f"{r['ours'][0]:.0f}",
                 f"{hf[0]:.0f} ({r['hf_threads']})" if hf else "-",
                 f"**{r['ours'][0] / hf[0]:.2f}x**" if hf else "-",
                 f"{rec[0]:.0f}" if rec else "skipped",
                 f"{r['ours'][0] / rec[0]:.1f}x" if rec else "-",
                 f"{r['ours'][1] * 1e3:.1f}", f"{hf[1] * 1e3:.1f}" if hf else "-",
                 f"{rec[1] * 1e3:.1f}" if rec else "-",
                 f"{r['hf_match']:.0%}" if hf else "-"]
        out.append(cells)
    return out


def _write_docs(rows, args, load, threads):
    cmd = "python benchmarks/bench_sampler.py" + (" " + " ".join(sys.argv[1:]) if sys.argv[1:]
                                                  else "")
    import torch  # noqa: PLC0415
    import transformers  # noqa: PLC0415

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import docsection  # noqa: PLC0415

    record = _record(rows, cmd, load)
    table = docsection.table_block(record)
    body = f"""## Sampler (`tseeds_jax.sampling.generate`) vs no-cache recompute vs HF `generate`

Command: `{cmd}` — {datetime.date.today().isoformat()}, {os.cpu_count()} CPU cores visible
(ratios were measured side by side in one process; see the load average below),
Python {platform.python_version()}, jax {jax.__version__}, torch {torch.__version__}
(default {threads} threads), transformers {transformers.__version__}.

Greedy, float32, prompts of {args.prompt_len} random tokens, {args.new} new tokens, no stop
tokens; same weights in all three (copied to HF with `tseeds_jax.hf.save_pretrained`).
tokens/s = batch x new tokens / wall time of one warm call, best of {args.repeats} rounds in
which ours and HF are timed in alternation (HF at batch 128: {max(1, args.repeats // 2)} rounds),
so a drift in machine speed hits both alike (each turn starts with one untimed call, so both
are timed in steady state, as in a training loop). HF is timed with 1 thread and with torch's
default in every round and credited with the better (shown). TTFT = a warm call with
max_new_tokens=1, timed in the same rounds.
The recompute baseline (full forward per step, jitted)
generates {args.recompute_new} tokens only (shorter sequences flatter it) and is skipped where
params x batch > {args.recompute_max_work:.0e}. "greedy = HF": share of rows whose tokens
equal HF's. tunix's vanilla sampler was not measured: `google-tunix` 0.1.7 installs beside the
project only with `--no-deps`, and its package import then needs google-metrax, qwix and more
(not installable here without replacing the pinned JAX stack).

{table}

Ours: one jitted `while_loop` runs decode steps for all slots until a slot finishes (then the
host refills it), so there is no per-token host round-trip; prefill is one batched call per
length bucket. HF decodes token by token from Python. Load average (1 min) at start / end of
this run: {docsection.fig(record, "load_avg_1min_start")} / {docsection.fig(record, "load_avg_1min_end")}.

Where the time goes: jax.profiler traces of the decode loop were taken on 2026-11-30, before
later sampler changes, and their figures were not recorded, so only what they showed is kept
here. At batch 32 the step is the matmuls (output head, gate + up, down, q/k/v/o: XLA:CPU's
YNNPACK kernels with the weights streamed from L3 every step), then attention over the cache,
the cache writes and the greedy pick. At batch 1 the matrix-vector products dominate: XLA:CPU
runs each on one core (Eigen adds a second thread only for large matrices), so streaming the
weights a token needs bounds the speed before any other work of the step; no formulation tried
(independent column-block matmuls, batched matmuls over column blocks, the YNN / XNN / Eigen /
scheduler flags) made XLA use both cores. bfloat16 sampler weights would halve the traffic but
change the numerics this benchmark fixes. Changes kept on the way (each measured faster in an
interleaved A/B at the time; the figures were not recorded): keys cached [B, K, E, S] and values
[B, K, S, E] (decode attention as two batched matmuls, no transposed copy of the cache), greedy
argmax as max + first index, the chosen token's log-prob without a [B, V] log-softmax, 2-D
projections, RoPE cos/sin looked up once per step, gate and up as two matmuls in decode steps and
short prefills, no model call for a request's last emission, a module's graph split once per
structure. Tried and dropped: one fused q/k/v matmul, unique-index scatters or a single-index
ring-buffer write for the KV cache, attending over the new key separately from the cache.
"""
    docsection.write_section("sampler", body, str(DOCS), record=record)


if __name__ == "__main__":
    sys.exit(main())
