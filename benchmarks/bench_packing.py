"""Packed vs padded learner rows (issue 53): CPU time of the update plus one statistics pass
(the old log-prob recompute; the refresh's behavior pass and the reference pass run the same
program), both layouts side by side in one run, as ratios.

    python benchmarks/bench_packing.py                 # both length distributions, writes the
                                                       # `packing` section of docs/benchmarks.md
    python benchmarks/bench_packing.py --no-write --reps 1 --rows 8   # a quick look

Length distributions:
  demo       the demo's task (benchmarks' stand-in for its rollouts): prompts and worked
             solutions of 4-5 one-digit terms (compact chain sums, one token per character, +EOS),
             P = 12, R = 48, the demo's model (2 layers x 128).
  longtail   responses lognormal with median 0.3 R and sigma 1 (capped at R = 1024), prompts
             uniform in 10-30% of P = 256; a small model (2 layers x 64, 4 heads).

Each layout is compiled once (a warm-up call, not timed), then the two layouts alternate for
`--reps` rounds (the machine's load hits both alike); the median of each is reported. The
update includes the host-side packing (`Learner.pack_batch`), the statistics pass its packing.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import jax
import numpy as np
from flax import nnx

from tseeds_jax.data.compact_arith import compact_prompt, worked_solution
from tseeds_jax.model import ModelConfig, init_model
from tseeds_jax.rl.config import LossConfig, OptimConfig
from tseeds_jax.rl.learn.batch import LearnerBatch
from tseeds_jax.rl.learn.layout import RowLayout, pad_fraction, padded_rows
from tseeds_jax.rl.learn.learner import Learner
from tseeds_jax.rl.learn.row_pass import RowStats
from tseeds_jax.rl.run.hosts import Hosts

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import docsection  # noqa: E402
from docsection import write_section  # noqa: E402


def demo_lengths(rng, n):
    """(prompt, response) lengths of the demo's task: 4-5 one-digit terms, char tokens + EOS."""
    out = []
    for _ in range(n):
        terms = [int(rng.integers(1, 10))] + [int(rng.integers(1, 10)) * int(rng.choice([-1, 1]))
                                              for _ in range(int(rng.integers(3, 5)))]
        out.append((len(compact_prompt(terms)), min(48, len(worked_solution(terms)) + 1)))
    return out, 12, 48, dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                             num_key_value_heads=4, vocab_size=32)


def longtail_lengths(rng, n, r_cap=1024, p_cap=256):
    """Lognormal responses (median 0.3 R, sigma 1, capped), prompts 10-30% of their cap."""
    resp = np.minimum(r_cap, np.maximum(1, np.round(0.3 * r_cap * rng.lognormal(0, 1, n))))
    prompt = np.round(rng.uniform(0.1, 0.3, n) * p_cap)
    return ([(int(p), int(r)) for p, r in zip(prompt, resp)], p_cap, r_cap,
            dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, vocab_size=256))


def make_batch(rng, lengths, p, r, vocab):
    pairs = [(rng.integers(1, vocab, a).tolist(), rng.integers(1, vocab, b).tolist())
             for a, b in lengths]
    tokens, attn = padded_rows(pairs, p, r)
    n = len(pairs)
    resp = np.zeros((n, r), np.float32)
    for i, (_, b) in enumerate(lengths):
        resp[i, :b] = 1
    z = np.zeros((n, r), np.float32)
    return LearnerBatch(tokens_BT=tokens, attn_mask_BT=attn, resp_mask_BR=resp, seed_mask_BR=z,
                        behavior_logp_BR=z, sampler_logp_BR=z,
                        old_logp_BR=rng.normal(-3, 0.5, (n, r)).astype(np.float32),
                        ref_logp_BR=z, advantages_B=rng.normal(0, 1, n).astype(np.float32))


def measure(name, lengths, p, r, arch, micro, reps, seed=0, row_len=0):
    rng = np.random.default_rng(seed)
    batch = make_batch(rng, lengths, p, r, arch["vocab_size"])
    cfg = ModelConfig(model_type="qwen2", intermediate_size=4 * arch["hidden_size"], **arch)
    graphdef, params = nnx.split(init_model(cfg, seed=0))
    ocfg = OptimConfig(lr=1e-4, micro_batch_size=micro, old_logp="recompute")
    runs = {}
    for kind in ("padded", "packed"):
        learner = Learner(graphdef, params, LossConfig(name="dapo"), ocfg,
                          variant="state+action", old_logp_mode="recompute",
                          kernel_impl="chunked", layout=RowLayout(kind, p, r, 0, row_len))
        stats = RowStats(learner, hosts=Hosts(0, 1), micro_batch_size=micro, prompt_width=p,
                         response_width=r, pad_id=0)
        runs[kind] = (learner, stats)
    copy = lambda: jax.tree_util.tree_map(lambda x: x.copy(), params)  # noqa: E731

    def one(kind):
        learner, stats = runs[kind]
        state = learner.init_state(copy())
        jax.block_until_ready(state)
        t0 = time.perf_counter()
        stats.logp_entropy(params, batch.tokens_BT, batch.attn_mask_BT, r)
        t1 = time.perf_counter()
        st, m = learner.update(state, batch)
        jax.block_until_ready((st.params, m))
        return t1 - t0, time.perf_counter() - t1

    for kind in runs:  # compile both (not timed)
        one(kind)
    times = {k: [] for k in runs}
    for _ in range(reps):
        for kind in runs:
            times[kind].append(one(kind))
    med = {k: np.median(np.array(v), axis=0) for k, v in times.items()}
    packed = runs["packed"][0].pack_batch(batch)
    real = float(1 - pad_fraction(batch.attn_mask_BT))
    real_packed = float(1 - pad_fraction(packed.attn_mask_BT))
    return dict(name=name, n=len(lengths), p=p, r=r, micro=micro,
                rows=(batch.tokens_BT.shape[0], packed.tokens_BT.shape[0]),
                real=(real, real_packed), stats=(med["padded"][0], med["packed"][0]),
                update=(med["padded"][1], med["packed"][1]))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--rows", type=int, default=32, help="sequences per batch (long-tailed)")
    ap.add_argument("--demo-rows", type=int, default=128, help="sequences per batch (demo)")
    ap.add_argument("--micro", type=int, default=8, help="optim.micro_batch_size")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    rng = np.random.default_rng(1)
    results = []
    lengths, p, r, arch = demo_lengths(rng, args.demo_rows)
    results.append(measure("demo (P 12, R 48, 2 x 128)", lengths, p, r, arch,
                           min(args.micro * 4, args.demo_rows), args.reps))
    results.append(measure("demo, packed rows of 2 (P + R)", lengths, p, r, arch,
                           min(args.micro * 4, args.demo_rows), args.reps, row_len=2 * (p + r)))
    lengths, p, r, arch = longtail_lengths(rng, args.rows)
    results.append(measure("long-tailed (P 256, R 1024, 2 x 64)", lengths, p, r, arch,
                           args.micro, args.reps))
    cmd = "python benchmarks/bench_packing.py " + " ".join(argv if argv is not None
                                                           else sys.argv[1:])
    rows = []
    for res in results:
        (sp, sk), (up, uk) = res["stats"], res["update"]
        rows.append(
            f"| {res['name']} | {res['n']} | {res['micro']} | {res['rows'][0]} -> "
            f"{res['rows'][1]} | {100 * res['real'][0]:.0f}% -> {100 * res['real'][1]:.0f}% | "
            f"{sp:.3f} / {sk:.3f} | {up:.3f} / {uk:.3f} | {(sp + up) / (sk + uk):.2f}x |")
    load = os.getloadavg()[0]
    body = "\n".join([
        "## Packed learner rows (issue 53)",
        "",
        f"`{cmd.strip()}` — CPU ({os.cpu_count()} cores, load {load:.1f} at the end), jax "
        f"{jax.__version__}. Loss DAPO, old log-probs recomputed (one statistics pass), one "
        f"update per batch; medians of {args.reps} alternating rounds after one compile each. "
        "Rows: padded rows -> packed rows (of length P + R unless said); real tokens: the "
        "share of non-pad positions.",
        "",
        "| lengths | sequences | micro-batch | rows | real tokens | statistics s (padded / "
        "packed) | update s (padded / packed) | update + statistics, padded / packed |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
        *rows,
    ])
    print(body)
    if args.no_write:
        return 0
    body, records = docsection.record_tables(
        body, [("packing_cpu", "CPU time of the learner update plus one statistics pass, "
                "packed vs padded rows, on the demo's and a long-tailed length distribution")],
        "measured", cmd.strip(), backend=jax.default_backend())
    write_section("packing", body, records=records)
    return 0


if __name__ == "__main__":
    sys.exit(main())
