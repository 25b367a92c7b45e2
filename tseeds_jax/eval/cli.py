"""`tseeds eval RUN_DIR [options]`: avg@n and unbiased pass@k of a checkpoint on held-out problems,
optionally relay inference from an earlier checkpoint (paper, Section 3.1).

  tseeds eval runs/demo/runs/dapo/seed0 --n 16 --problems 256
  tseeds eval runs/demo/runs/dapo/seed0 --relay-early runs/demo/base --relay-ratio 0.5

RUN_DIR is a training run folder (RUN_DIR/ckpt/<step>, written by `tseeds train` or the demo).
Held-out problems: for compact chain sums, the prompt-hash evaluation split (never trained on);
otherwise the first problems of the run's source drawn with a separate generator seed.
"""

from __future__ import annotations

import argparse
import json
import sys


def _parse_run(spec: str) -> tuple[str, int | None]:
    """'DIR' or 'DIR@STEP'."""
    if "@" in spec:
        path, _, step = spec.rpartition("@")
        try:
            return path, int(step)
        except ValueError:
            raise ValueError(f"{spec!r}: expected DIR or DIR@STEP with an integer step") from None
    return spec, None


def _load(spec: str):
    from tseeds_jax.rl.run.source import RunSourceError
    from tseeds_jax.rl.setup import load_run

    path, step = _parse_run(spec)
    try:
        return load_run(path, step)
    except RunSourceError as e:  # a missing or changed base / tokenizer: the message says which
        raise ValueError(f"checkpoint {spec!r}: {e}") from None
    except FileNotFoundError as e:
        raise ValueError(f"checkpoint {spec!r} not found: {e}") from None
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"checkpoint {spec!r} is incompatible or corrupt: {e}") from None


def _problems(cfg, tok, count: int):
    import dataclasses

    from tseeds_jax.eval.evaluate import Problem
    from tseeds_jax.eval.problems import EVAL_SPLIT_SEED, held_out_problems
    from tseeds_jax.rl.setup import build_source

    source = build_source(dataclasses.replace(cfg, seed=EVAL_SPLIT_SEED))
    max_len = cfg.data.max_prompt_len
    if cfg.data.source == "compact:chain_sum":
        return held_out_problems(source, tok.encode, count, max_prompt_len=max_len)
    out = []
    for i in range(len(source)):
        ex = source[i]
        ids = tuple(tok.encode(ex["prompt"]))
        if len(ids) <= max_len:
            out.append(Problem(ids, ex["reference"], ex["prompt"]))
        if len(out) == count:
            break
    return out


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="tseeds eval", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dir", help="training run folder, optionally DIR@STEP")
    p.add_argument("--n", type=int, default=16, help="samples per problem (default 16)")
    p.add_argument("--k", default=None,
                   help="comma-separated k values for pass@k (default 1,2,4,...,n); each <= n")
    p.add_argument("--problems", type=int, default=256, help="held-out problems (default 256)")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0, help="sampling seed")
    p.add_argument("--relay-early", default=None,
                   help="earlier checkpoint (DIR or DIR@STEP) that writes the response prefix")
    p.add_argument("--relay-ratio", type=float, default=0.5,
                   help="fraction of the early response kept as the prefix (default 0.5)")
    p.add_argument("--out", default=None, help="write the results as JSON to this file")
    args = p.parse_args(argv)

    def fail(msg: str) -> int:
        print(f"tseeds eval: {msg}", file=sys.stderr)
        return 2

    if args.n < 1:
        return fail(f"--n={args.n} must be >= 1")
    if args.problems < 1:
        return fail(f"--problems={args.problems} must be >= 1")
    if not 0.0 <= args.relay_ratio <= 1.0:
        return fail(f"--relay-ratio={args.relay_ratio} must be in [0, 1]")
    ks = None
    if args.k:
        try:
            ks = [int(x) for x in args.k.split(",") if x.strip()]
        except ValueError:
            return fail(f"--k={args.k!r}: expected comma-separated integers")
        bad = [k for k in ks if not 1 <= k <= args.n]
        if bad:
            return fail(f"--k: k={bad[0]} is not in [1, n={args.n}]; pass@k needs n >= k samples "
                        "per problem (raise --n)")
    try:
        graphdef, params, cfg, tok = _load(args.run_dir)
        early = None
        if args.relay_early:
            eg, ep, ecfg, etok = _load(args.relay_early)
            if etok.vocab_size != tok.vocab_size or \
                    [etok.encode(c) for c in "0123456789"] != [tok.encode(c) for c in "0123456789"]:
                return fail(f"--relay-early {args.relay_early!r}: its tokenizer differs from "
                            f"{args.run_dir!r}'s; relay needs a shared vocabulary")
            early = (eg, ep)
    except ValueError as e:
        return fail(str(e))
    from tseeds_jax.eval.evaluate import evaluate, reward_score_fn
    from tseeds_jax.eval.relay import relay_evaluate

    problems = _problems(cfg, tok, args.problems)
    width = int(cfg.rollout.max_response_len)
    kw = dict(decode=lambda ids: tok.decode(ids, skip_special_tokens=True),
              score_fn=reward_score_fn(cfg.reward), max_new_tokens=width,
              temperature=args.temperature, top_p=args.top_p, stop_tokens=tok.stop_ids, ks=ks,
              max_prefill_length=cfg.data.max_prompt_len)
    single = evaluate((graphdef, params), problems, n=args.n, seed=args.seed, **kw)
    out = {"run": args.run_dir, "single": single.to_json()}
    print(f"{args.run_dir}: avg@{args.n} {100 * single.avg:.2f}%  "
          + "  ".join(f"pass@{k} {100 * v:.2f}%" for k, v in single.pass_at_k.items()))
    if early is not None:
        relay = relay_evaluate(early, (graphdef, params), problems, n=args.n,
                               ratio=args.relay_ratio, seed=args.seed, **kw)
        out.update(relay=relay.to_json(), early=args.relay_early, ratio=args.relay_ratio)
        print(f"relay {args.relay_early} -> {args.run_dir} (ratio {args.relay_ratio}): "
              f"avg@{args.n} {100 * relay.avg:.2f}%  "
              + "  ".join(f"pass@{k} {100 * v:.2f}%" for k, v in relay.pass_at_k.items()))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(out, f, indent=1)
    return 0
