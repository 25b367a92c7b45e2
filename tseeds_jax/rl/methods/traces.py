"""LUFFY off-policy traces: the first sample of every group comes from an external source
(`WithTraces` adds them to any method's plans; the trace sources are below).

Letters: B prompts of a batch, G samples per prompt.

LUFFY (Yan et al. 2025; docs/algorithms.md §3) trains groups of 1 off-policy trace + G-1 on-policy
samples; the trace's tokens are off-policy (seed mask over the whole response, no behavior ratio:
the LUFFY loss shapes them with f(p) = p / (p + γ)). Sources (`config.offpolicy.source`):

  jsonl:PATH   one JSON object per line:
                 {"prompt": "<prompt text>", "response": "<solution text>"}
               or "responses": [..] for several solutions; token ids instead of text with
               "prompt_ids" / "response_ids" (lists of ints). "prompt" is the example's prompt text
               exactly as the data source yields it; it is encoded with the run's tokenizer, as the
               training prompts are, and matched on token ids. The tokenizer's EOS is appended to a
               text response unless it already ends with a stop token. With several solutions per
               prompt one is drawn per (run seed, step, prompt index).
  model:SPEC   another checkpoint writes one trace per prompt with the sampler (the run's rollout
               temperature / top-p / top-k, up to max_response_len tokens): SPEC is hf:DIR or
               orbax:DIR (as `config.model.init`) or run:RUN_DIR (a training run's latest
               checkpoint). It must share the run's tokenizer (vocabulary size is checked).
  task         the data source's own worked solutions (sources with `.solution(i)`, e.g.
               compact:chain_sum), read for every example of the source: the tiny-task stand-in
               for a stronger model's traces (keep `data.size` small).

A prompt with no trace is an error (naming the file and the prompt) unless
`offpolicy.on_missing = "on_policy"`, which trains that group fully on-policy. Traces longer than
max_response_len are cut (finish "length"); the paper filters such prompts out of the data instead.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tseeds_jax.rl.config.errors import ConfigValueError
from tseeds_jax.rl.config.schema import TrainConfig

_TRACE_STREAM = 0x1FF


class TraceSource:
    """Interface: `traces(prompts, step, first_prompt)` -> one token list (or None) per prompt;
    `stop_ids`: token ids that mark a complete trace."""

    stop_ids: tuple[int, ...] = ()

    def traces(self, prompts: Sequence[list[int]], step: int, first_prompt: int):
        raise NotImplementedError


class JsonlTraces(TraceSource):
    """Solutions per prompt from records (a JSONL file, or the task's own solutions); see the
    module docstring for the record format."""

    def __init__(self, path: str, encode: Callable[[str], list[int]], *, eos_id: int,
                 stop_ids: Sequence[int] = (), run_seed: int = 0, on_missing: str = "error",
                 decode: Callable[[list[int]], str] | None = None, records=None):
        """records: optional iterable of (where, dict) used instead of reading `path`."""
        if records is None:
            if not os.path.isfile(path):
                raise FileNotFoundError(f"config.offpolicy.source: trace file {path!r} does not "
                                        "exist")
            records = _read_jsonl(path)
        self.path, self.run_seed, self.on_missing = path, run_seed, on_missing
        self.decode = decode
        stops = set(stop_ids) | {eos_id}
        self.stop_ids = tuple(sorted(stops))
        self.table: dict[tuple[int, ...], list[list[int]]] = {}
        for where, rec in records:
            if not isinstance(rec, dict):
                raise ValueError(f"{where}: expected a JSON object, got {type(rec).__name__}")
            key = tuple(_prompt_ids(rec, encode, where))
            for ids, is_text in _responses(rec, encode, where):
                if is_text and (not ids or ids[-1] not in stops):
                    ids = [*ids, eos_id]
                self.table.setdefault(key, []).append(ids)
        if not self.table:
            raise ValueError(f"{path}: no traces (empty file)")

    def traces(self, prompts, step, first_prompt):
        out = []
        for g, prompt in enumerate(prompts):
            options = self.table.get(tuple(prompt))
            if options is None:
                if self.on_missing == "on_policy":
                    out.append(None)
                    continue
                text = self.decode(list(prompt)) if self.decode else list(prompt)
                raise KeyError(f"{self.path}: no trace for prompt {text!r} (set "
                               f"config.offpolicy.on_missing='on_policy' to train such prompts "
                               f"on-policy)")
            pick = 0
            if len(options) > 1:
                rng = np.random.default_rng([self.run_seed, step, first_prompt + g, _TRACE_STREAM])
                pick = int(rng.integers(len(options)))
            out.append(list(options[pick]))
        return out


def _read_jsonl(path):
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                yield f"{path}:{lineno}", json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{lineno}: not valid JSON ({e.msg})") from None


def _task_records(source):
    if not hasattr(source, "solution"):
        raise ConfigValueError(f"config.offpolicy.source='task': the data source "
                               f"{type(source).__name__} has no worked solutions (.solution(i))")
    for i in range(len(source)):
        yield f"task example {i}", {"prompt": source[i]["prompt"], "response": source.solution(i)}


def _prompt_ids(rec, encode, where) -> list[int]:
    if "prompt_ids" in rec:
        return _int_list(rec["prompt_ids"], f"{where}: field 'prompt_ids'")
    if "prompt" not in rec:
        raise ValueError(f"{where}: missing field 'prompt' (or 'prompt_ids')")
    if not isinstance(rec["prompt"], str):
        raise ValueError(f"{where}: field 'prompt' must be a string, got "
                         f"{type(rec['prompt']).__name__}")
    return encode(rec["prompt"])


def _responses(rec, encode, where) -> list[tuple[list[int], bool]]:
    if "response_ids" in rec:
        return [(_int_list(rec["response_ids"], f"{where}: field 'response_ids'"), False)]
    if "response" in rec:
        texts = [rec["response"]]
        name = "response"
    elif "responses" in rec:
        texts = rec["responses"]
        name = "responses"
        if not isinstance(texts, list) or not texts:
            raise ValueError(f"{where}: field 'responses' must be a non-empty list of strings")
    else:
        raise ValueError(f"{where}: missing field 'response' (or 'responses' / 'response_ids')")
    out = []
    for t in texts:
        if not isinstance(t, str):
            raise ValueError(f"{where}: field {name!r} must hold strings, got {type(t).__name__}")
        out.append((encode(t), True))
    return out


def _int_list(value, what) -> list[int]:
    if not isinstance(value, list) or not all(isinstance(x, int) and not isinstance(x, bool)
                                              for x in value):
        raise ValueError(f"{what} must be a list of integers")
    return list(value)


@dataclasses.dataclass
class ModelTraces(TraceSource):
    """Traces written by another checkpoint through the sampler."""

    graphdef: Any
    params: Any
    sample: Callable  # sample(params, requests, budgets, seeds) -> [(tokens, logprobs, finish)]
    max_response_len: int
    run_seed: int = 0
    stop_ids: tuple[int, ...] = ()

    def traces(self, prompts, step, first_prompt):
        seeds = [int(np.random.SeedSequence([self.run_seed, step, first_prompt + g,
                                             _TRACE_STREAM]).generate_state(1)[0])
                 for g in range(len(prompts))]
        results = self.sample(self.params, [list(p) for p in prompts],
                              [self.max_response_len] * len(prompts), seeds)
        return [list(tokens) for tokens, _, _ in results]


class WithTraces:
    """A method whose every plan (dynamic sampling's rounds included) gets a trace per prompt:
    the group's first sample is the trace, the other G - 1 are the method's."""

    def __init__(self, inner, source: TraceSource):
        self.inner, self.source = inner, source

    def __getattr__(self, name):  # plan's partners (generate, after_scoring, ...) are inner's
        return getattr(self.inner, name)

    def _traced(self, plan, j: int):
        plan.traces = self.source.traces(plan.prompts, j, plan.first // self.inner.ctx.g)
        plan.stop_ids = tuple(getattr(self.source, "stop_ids", ()))
        return plan

    def plan(self, j, policy, info):
        return self._traced(self.inner.plan(j, policy, info), j)

    def topup(self, j, round_):
        return self._traced(self.inner.topup(j, round_), j)

    def sample_metrics(self, samples):
        off = [s for s in samples if s.offpolicy]
        out = dict(self.inner.sample_metrics(samples))
        out.update({"offpolicy_frac": len(off) / max(len(samples), 1),
                    "offpolicy_reward": float(np.mean([s.reward for s in off])) if off else 0.0,
                    "offpolicy_length": float(np.mean([len(s.seed_ids) for s in off]))
                    if off else 0.0})
        return out


def build_trace_source(cfg: TrainConfig, tokenizer, *, encode_prompt=None, build_model=None,
                       load_run=None, source=None) -> TraceSource | None:
    """The configured trace source (None when `offpolicy.source` is empty).

    encode_prompt: how training prompts are encoded (the prompt stream's; default
    `tokenizer.encode`), so that trace prompts match them token for token. build_model /
    load_run: rl/setup.py's (given, so that this module imports nothing that builds runs).
    source: the data source (for 'task').
    """
    spec = cfg.offpolicy.source
    if not spec:
        return None
    kind, _, rest = spec.partition(":")
    if kind in ("jsonl", "task"):
        return JsonlTraces(rest if kind == "jsonl" else "task", encode_prompt or tokenizer.encode,
                           eos_id=int(tokenizer.eos_id), stop_ids=tuple(tokenizer.stop_ids),
                           run_seed=cfg.seed, on_missing=cfg.offpolicy.on_missing,
                           decode=lambda ids: tokenizer.decode(ids, skip_special_tokens=True),
                           records=_task_records(source) if kind == "task" else None)
    if kind == "model":
        graphdef, params = _load_model(cfg, rest, tokenizer, build_model, load_run)
        return ModelTraces(graphdef, params, _sampler(cfg, graphdef, tokenizer),
                           cfg.rollout.max_response_len, cfg.seed, tuple(tokenizer.stop_ids))
    raise ConfigValueError(f"config.offpolicy.source={spec!r}: expected 'jsonl:PATH', 'task' or "
                           "'model:hf:DIR' / 'model:orbax:DIR' / 'model:run:DIR'")


def _load_model(cfg: TrainConfig, spec: str, tokenizer, build_model, load_run):
    from flax import nnx

    if spec.startswith("run:"):
        graphdef, params, _, _ = load_run(spec[4:])
    elif spec.startswith(("hf:", "orbax:")):
        model_cfg = dataclasses.replace(cfg.model, init=spec)
        model = build_model(dataclasses.replace(cfg, model=model_cfg), tokenizer.vocab_size)
        graphdef, params = nnx.split(model)
    else:
        raise ConfigValueError(f"config.offpolicy.source='model:{spec}': expected model:hf:DIR, "
                               "model:orbax:DIR or model:run:RUN_DIR")
    vocab = nnx.merge(graphdef, params).cfg.vocab_size
    if vocab < tokenizer.vocab_size:
        raise ConfigValueError(f"config.offpolicy.source='model:{spec}': vocab_size={vocab} is "
                               f"smaller than the run tokenizer's {tokenizer.vocab_size}")
    return graphdef, params


def _sampler(cfg: TrainConfig, graphdef, tokenizer):
    from tseeds_jax import sampling

    r = cfg.rollout
    max_prefill = cfg.data.max_prompt_len + r.max_response_len

    def sample(params, requests, budgets, seeds):
        results = sampling.generate((graphdef, params), requests, max_new_tokens=budgets,
                                    temperature=r.temperature, top_p=r.top_p, top_k=r.top_k,
                                    seed=seeds, stop_tokens=tuple(tokenizer.stop_ids),
                                    max_prefill_length=max_prefill)
        for res in results:
            if res.finish_reason == "error":
                raise RuntimeError(f"offpolicy sampler rejected a request: {res.error}")
        return [(res.tokens, res.logprobs, res.finish_reason) for res in results]

    return sample
