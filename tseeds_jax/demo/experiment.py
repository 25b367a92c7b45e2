"""The demo experiment: tokenizer, warm-started base policies, RL methods x bases x training
seeds, evaluation (the phases run in `tseeds_jax.demo.run`).

Output folder layout (read by `tseeds_jax.eval.report`; base b > 0: `plan.base_dir`/`run_dir`):
  DIR/tokenizer.model             character sentencepiece model
  DIR/base/                       base policy 0: checkpoint (a run folder `tseeds eval` can load),
                                  eval.json (sampled), eval_greedy.json
  DIR/runs/<method>/seed<k>/      one RL run from base 0: method.json, metrics.jsonl,
                                  eval_curve.json, eval.json, ckpt/
  DIR/relay.json                  relay (base 0 -> final on-policy) vs single-model pass@k
  DIR/demo.json                   command, setup, design, method order, timings
Everything runs in one process, so the sampler's and learner's compiled code is reused.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from typing import Any

import jax
import numpy as np

from tseeds_jax.data.compact_arith import CompactChainSum
from tseeds_jax.demo import plan
from tseeds_jax.demo.warmstart import SplitSource, WarmStartConfig
from tseeds_jax.eval.evaluate import EvalResult, Problem, evaluate, reward_score_fn
from tseeds_jax.eval.problems import EVAL_SPLIT_SEED, held_out_problems
from tseeds_jax.eval.relay import relay_evaluate
from tseeds_jax.rl.config.methods import overrides
from tseeds_jax.rl.methods import registry as method_registry


@dataclasses.dataclass(frozen=True)
class Method:
    name: str  # folder / table key
    label: str  # human-readable name in the report
    overrides: dict[str, Any]  # dotted config fields


def default_methods() -> list[Method]:
    core = [
        Method("dapo", "On-policy DAPO", {"seeds.refresh_interval": 1}),
        Method("ts_ratio", "Thinking Seeds (ratio 0.5, T 8)",
               {"seeds.refresh_interval": 8, "seeds.truncation": "ratio", "seeds.ratio": 0.5}),
        Method("ts_mixture", "Thinking Seeds (mixture, target 0.5, T 8)",
               {"seeds.refresh_interval": 8, "seeds.truncation": "mixture",
                "seeds.target": 0.5, "seeds.fallback": "ratio", "seeds.ratio": 0.5}),
        Method("ts_mixture_spread", "Thinking Seeds (mixture + spread cuts, target 0.5, T 8)",
               {"seeds.refresh_interval": 8, "seeds.truncation": "mixture_spread",
                "seeds.target": 0.5, "seeds.fallback": "ratio", "seeds.ratio": 0.5}),
        Method("ts_adaptive", "Thinking Seeds (adaptive, target 0.5, T 8)",
               {"seeds.refresh_interval": 8, "seeds.truncation": "success_target",
                "seeds.target": 0.5, "seeds.fallback": "ratio", "seeds.ratio": 0.5}),
        Method("ts_entropy", "Thinking Seeds (entropy, T 8)",
               {"seeds.refresh_interval": 8, "seeds.truncation": "entropy", "seeds.top_k": 8}),
        Method("dapo_minibatch", "On-policy DAPO, 4 mini-batches",
               {"seeds.refresh_interval": 1, "optim.mini_batches": 4}),
    ]
    return core + restart_methods() + [lora_variant(m) for m in core if m.name in LORA_OF]


# LoRA entries (`--lora`): the same method with rank-8 adapters on every projection of a frozen
# base; adapters exist in every layer, so the whole model is adapted where the full-parameter
# demo trains the head alone (config.lora refuses train_layers='head'). lr 1e-3, not the
# head-only 1e-2: at 1e-2 both LoRA runs fell to 0% held-out pass@1 (docs/lora.md).
DEMO_LORA = {"optim.train_layers": "all", "lora.rank": 8, "lora.alpha": 16.0, "optim.lr": 1e-3}
LORA_OF = {"dapo": "dapo_lora", "ts_ratio": "ts_ratio_lora"}


def lora_variant(m: Method) -> Method:
    """Method `m` with LoRA (`tseeds demo --lora` adds these; docs/lora.md)."""
    return Method(LORA_OF[m.name], f"{m.label}, LoRA rank 8", {**m.overrides, **DEMO_LORA})


def restart_methods() -> list[Method]:
    """The peer restart methods (docs/restart_methods.md), on request (`--methods`)."""
    return [Method(s.name, s.description, overrides(s.name)) for s in method_registry.specs()]


def method_names() -> list[str]:
    return [m.name for m in default_methods()]


@dataclasses.dataclass(frozen=True)
class DemoConfig:
    out: str = "runs/demo"
    task_name: str = "default"  # "default" | "hard" (TASKS)
    task: tuple[tuple[str, int], ...] = (("min_terms", 4), ("max_terms", 5), ("min_digits", 1),
                                         ("max_digits", 1))
    # model: a small Qwen2-style decoder
    hidden_size: int = 128
    num_layers: int = 2
    heads: int = 4
    prompt_width: int = 12
    response_width: int = 48
    # 500 steps put the sampled pass@1 at ~25-29% (greedy 57-66%); see docs/demo_results.md.
    warm: WarmStartConfig = WarmStartConfig(steps=500, batch_size=32, error_rate=0.15)
    # RL: head-only AdamW 1e-2 gave +10 points in 100 steps in the probes (1e-3: no visible gain)
    rl_steps: int = 100
    batch_prompts: int = 16
    group_size: int = 8
    lr: float = 1e-2
    train_layers: str = "head"
    # Bases (warm starts, `plan.base_seeds`) x training seeds per base. The default spends its
    # ~20 minutes on 3 bases x 1 training seed rather than 1 base x 3 seeds: the base policy is
    # the larger source of variation between runs (docs/demo_results.md, "Findings across
    # bases"), and a comparison over one base says nothing about another. Each base costs a
    # warm start (~1 min idle), about one RL run.
    bases: tuple[int, ...] = (0, 1, 2)
    seeds: tuple[int, ...] = (0,)
    # Per-method training-seed counts that differ from `seeds` (seeds 0..n-1), e.g. DAPO and the
    # ratio rule at 2 per base so that their variance splits into between- and within-base parts.
    method_seeds: tuple[tuple[str, int], ...] = ()
    # The first adaptive rule, the entropy rule, the mini-batched baseline and the peer restart
    # methods run on request (`--methods`).
    methods: tuple[str, ...] = ("dapo", "ts_ratio", "ts_mixture", "ts_mixture_spread")
    # The mini-batched baseline (4 updates per batch) gets every seed too: it is the fair
    # on-policy comparison for the seeded runs (report: "Against the fair on-policy baseline").
    minibatch_seeds: int = 3
    rl_overrides: tuple[tuple[str, Any], ...] = ()
    # evaluation
    eval_problems: int = 256
    eval_n: int = 8  # samples per problem for the final evaluations (k up to 8)
    curve_problems: int = 128
    curve_n: int = 4
    curve_points: int = 3
    relay_ratio: float = 0.5
    temperature: float = 1.0

    @property
    def task_params(self) -> dict[str, int]:
        return dict(self.task)


# The hard task: chains of 8-9 one-digit terms (7-8 worked steps instead of 3-4) and noisier
# demonstrations (step-error rate 0.25 instead of 0.15), so that the base policy's sampled
# held-out pass@1 is at most 10% and most on-policy groups all-fail. With the default error rate
# the longer chains alone left it at 15.2% (docs/demo_results.md, "Hard task").
HARD_TASK = dict(task=(("min_terms", 8), ("max_terms", 9), ("min_digits", 1), ("max_digits", 1)),
                 prompt_width=20, response_width=96,
                 warm=WarmStartConfig(steps=500, batch_size=32, error_rate=0.25))
TASKS = ("default", "hard")


def with_task(dc: DemoConfig, name: str) -> DemoConfig:
    if name not in TASKS:
        raise ValueError(f"demo task {name!r}: unknown; known: {list(TASKS)}")
    return dc if name == "default" else dataclasses.replace(dc, task_name=name, **HARD_TASK)


def quick_config(out: str) -> DemoConfig:
    # One base and one training seed per method: most of a quick run is per-run compilation
    # (each RL run builds its own trainer), so the number of runs sets its length.
    return DemoConfig(out=out, warm=WarmStartConfig(steps=150, batch_size=32, error_rate=0.15),
                      rl_steps=8, bases=(0,), seeds=(0,), eval_problems=32, eval_n=4,
                      curve_problems=16,
                      curve_n=2, curve_points=2)


def rl_config(dc: DemoConfig, tokenizer_path: str, run_dir: str, seed: int, method: Method):
    """The validated TrainConfig of one RL run (tiny_config + demo settings + method)."""
    from tseeds_jax.rl.config import TrainConfig, tiny_config

    c = tiny_config()
    c.run_dir = run_dir
    c.seed = seed
    c.steps = dc.rl_steps
    c.tokenizer = f"spm:{os.path.abspath(tokenizer_path)}"
    c.data.params = dc.task_params
    c.data.max_prompt_len = dc.prompt_width
    c.model.arch.hidden_size = dc.hidden_size
    c.model.arch.intermediate_size = 4 * dc.hidden_size
    c.model.arch.num_hidden_layers = dc.num_layers
    c.model.arch.num_attention_heads = dc.heads
    c.model.arch.num_key_value_heads = dc.heads
    c.model.arch.max_position_embeddings = 128
    # Untied: with tied embeddings the 'head' group would be the final norm alone (D scales).
    c.model.arch.tie_word_embeddings = False
    c.rollout.batch_prompts = dc.batch_prompts
    c.rollout.group_size = dc.group_size
    c.rollout.max_response_len = dc.response_width
    c.optim.lr = dc.lr
    c.optim.train_layers = dc.train_layers
    c.seeds.snapshots = False
    c.checkpoint_every = 0
    c.keep_checkpoints = 1
    c.progress = False
    for key, value in list(dc.rl_overrides) + list(method.overrides.items()):
        node = c
        *parents, leaf = key.split(".")
        for p in parents:
            node = node[p]
        node[leaf] = value
    return TrainConfig.from_config(c), c


def model_config(dc: DemoConfig, vocab_size: int):
    from tseeds_jax.model import ModelConfig

    return ModelConfig.from_hf_dict(dict(
        model_type="qwen2", vocab_size=vocab_size, hidden_size=dc.hidden_size,
        intermediate_size=4 * dc.hidden_size, num_hidden_layers=dc.num_layers,
        num_attention_heads=dc.heads, num_key_value_heads=dc.heads, tie_word_embeddings=False,
        max_position_embeddings=128, rope_theta=10000.0))


def held_out(dc: DemoConfig, tok, count: int) -> list[Problem]:
    src = CompactChainSum(seed=EVAL_SPLIT_SEED, size=100000, config=dc.task_params)
    return held_out_problems(src, tok.encode, count, max_prompt_len=dc.prompt_width)


class Evaluator:
    """Held-out evaluations with fixed problems and sampler settings."""

    def __init__(self, dc: DemoConfig, tok):
        self.dc, self.tok = dc, tok
        self.final_problems = held_out(dc, tok, dc.eval_problems)
        self.curve_problems = self.final_problems[:dc.curve_problems]
        self.score = reward_score_fn("compact_arith")
        self._curve_cache: dict = {}
        self.kw = dict(decode=lambda ids: tok.decode(ids, skip_special_tokens=True),
                       score_fn=self.score, max_new_tokens=dc.response_width,
                       stop_tokens=tok.stop_ids, max_prefill_length=dc.prompt_width)

    def final(self, model, seed: int = 0, temperature: float | None = None) -> EvalResult:
        t = self.dc.temperature if temperature is None else temperature
        n = self.dc.eval_n if t > 0 else 1
        return evaluate(model, self.final_problems, n=n, temperature=t, seed=seed, **self.kw)

    def curve(self, model, seed: int = 0, cache_key=None) -> EvalResult:
        """`cache_key`: reuse an earlier result for the same key (every run starts from the base
        with the same sampler seed, so its step-0 point is one evaluation)."""
        if cache_key is not None and cache_key in self._curve_cache:
            return self._curve_cache[cache_key]
        res = evaluate(model, self.curve_problems, n=self.dc.curve_n,
                       temperature=self.dc.temperature, seed=seed, **self.kw)
        if cache_key is not None:
            self._curve_cache[cache_key] = res
        return res

    def relay(self, early, final, seed: int = 0) -> EvalResult:
        return relay_evaluate(early, final, self.final_problems, n=self.dc.eval_n,
                              ratio=self.dc.relay_ratio, temperature=self.dc.temperature,
                              seed=seed, **self.kw)


def _write_json(path: str, obj) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1, default=float)
    os.replace(tmp, path)


def train_tokenizer(dc: DemoConfig):
    from tseeds_jax.data.tokenizer_train import train_sentencepiece

    src = CompactChainSum(seed=0, size=1000, config=dc.task_params)
    texts = [src[i]["prompt"] for i in range(200)] + [src.solution(i) for i in range(200)]
    texts.append(src.alphabet())
    path = os.path.join(dc.out, "tokenizer.model")
    os.makedirs(dc.out, exist_ok=True)
    return train_sentencepiece(texts, vocab_size=64, model_type="char", out=path), path


def save_base(dc: DemoConfig, tok_path: str, params, base: int = 0) -> str:
    """Writes base policy `base` as a run folder (step-0 checkpoint with its config)."""
    from tseeds_jax.rl.setup import make_trainer

    run_dir = plan.base_dir(dc.out, base)
    cfg, cd = rl_config(dc, tok_path, run_dir, 0, default_methods()[0])
    trainer = make_trainer(cfg, config_json=json.loads(cd.to_json_best_effort()),
                           env_overrides={"params": jax.tree_util.tree_map(lambda x: x.copy(),
                                                                           params)})
    trainer.save()
    trainer.writer.close()
    return run_dir


def _finished(run_dir: str, identity: dict) -> dict | None:
    """The eval.json of a finished run with the same identity (method, settings, base), else None."""
    try:
        with open(os.path.join(run_dir, "method.json")) as f:
            meta = json.load(f)
        with open(os.path.join(run_dir, "eval.json")) as f:
            ev = json.load(f)
    except (OSError, ValueError):
        return None
    return ev if meta.get("identity") == identity else None


_IDENTITY_FIELDS = ("task", "hidden_size", "num_layers", "heads", "prompt_width", "response_width",
                    "warm", "rl_steps", "batch_prompts", "group_size", "lr", "train_layers",
                    "rl_overrides", "eval_problems", "eval_n", "curve_problems", "curve_n",
                    "temperature")


def settings(dc: DemoConfig) -> dict:
    """The settings every run of a demo shares (not its design: bases, seeds, methods)."""
    return json.loads(json.dumps({k: getattr(dc, k) for k in _IDENTITY_FIELDS}, default=str))


def run_identity(dc: DemoConfig, method: Method, base_avg: float, base: int = 0) -> dict:
    """What a run's result depends on besides its seed: a kept run must match it exactly."""
    return json.loads(json.dumps({"config": settings(dc), "overrides": method.overrides,
                                  "base": base, "base_avg": base_avg}, default=str))


def run_one(dc: DemoConfig, tok_path: str, base_params, method: Method, seed: int,
            evaluator: Evaluator, bar=None, identity: dict | None = None,
            base: int = 0, base_graphdef=None) -> dict[str, Any]:
    """One RL run from base policy `base`; writes its folder and returns its final evaluation.
    base_graphdef: the base's graph (needed by LoRA runs, which adapt the base model itself)."""
    from tseeds_jax.rl.setup import PromptStream, make_trainer

    run_dir = plan.run_dir(dc.out, method.name, base, seed)
    cfg, cd = rl_config(dc, tok_path, run_dir, seed, method)
    _write_json(os.path.join(run_dir, "method.json"),
                {"method": method.name, "label": method.label, "seed": seed, "base": base,
                 "overrides": method.overrides, "steps": cfg.steps, "identity": identity})
    if os.path.exists(os.path.join(run_dir, "metrics.jsonl")):
        os.remove(os.path.join(run_dir, "metrics.jsonl"))
    train_src = SplitSource(CompactChainSum(seed=seed, size=100000, config=dc.task_params),
                            held_out=False)
    # The learner donates its state's buffers: give each run its own copy of the base params.
    own = jax.tree_util.tree_map(lambda x: x.copy(), base_params)
    if base_graphdef is not None:
        # The base is the run's starting model (a LoRA run's frozen one): make_trainer saves
        # it in the run folder and records it, so `tseeds eval` rebuilds what was trained
        # (rl/run/source.py).
        from flax import nnx

        trainer = make_trainer(cfg, config_json=json.loads(cd.to_json_best_effort()),
                               model=nnx.merge(base_graphdef, own))
    else:
        trainer = make_trainer(cfg, config_json=json.loads(cd.to_json_best_effort()),
                               env_overrides={"params": own})
    trainer.env.prompts = PromptStream(train_src, evaluator.tok.encode, dc.prompt_width, seed=seed)
    graphdef = trainer.env.graphdef

    def policy():
        """(graphdef, params) of the current policy: a LoRA run's adapters merged into its base."""
        if not cfg.lora.rank:
            return graphdef, trainer.state.params
        from flax import nnx

        from tseeds_jax.model.lora import merge_lora

        return nnx.split(merge_lora(nnx.merge(graphdef, trainer.state.params,
                                              *trainer.env.frozen.states)))

    eval_steps = sorted({int(round(x)) for x in np.linspace(0, cfg.steps, dc.curve_points + 1)})
    curve = []
    tokens = [0]

    def record(step):
        res = evaluator.curve(policy(), seed=1000 + step,
                              cache_key=("base", base) if step == 0 else None)
        curve.append({"step": step, "generated_tokens": tokens[0], "avg": res.avg,
                      "correct": res.correct, "n": res.n})

    record(0)

    def progress(step, end, m):
        tokens[0] += int(m["generated_tokens"])
        if step in eval_steps:
            record(step)
        if bar is not None:
            bar.update(1)
            bar.set_postfix_str(f"{method.name} s{seed} acc={m['accuracy']:.2f} "
                                f"H={float(m.get('entropy/all', 0)):.2f}")

    t0 = time.perf_counter()
    trainer.run(progress=progress)
    train_time = time.perf_counter() - t0
    final_graphdef, final_params = policy()
    final = evaluator.final((final_graphdef, final_params), seed=7)
    _write_json(os.path.join(run_dir, "eval_curve.json"), curve)
    out = final.to_json()
    out["train_seconds"] = train_time
    _write_json(os.path.join(run_dir, "eval.json"), out)
    return {"final": final, "params": final_params, "graphdef": final_graphdef,
            "train_seconds": train_time, "run_dir": run_dir}
