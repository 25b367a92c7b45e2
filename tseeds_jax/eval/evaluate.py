"""Sampled evaluation of a policy on a fixed problem set: avg@n and unbiased pass@k.

Letters: P problems, n samples per problem.

Every sample j of problem i draws its randomness from a request seed derived from
(seed, stream, i, j), so results are reproducible and independent of batching, and two
evaluations with different `seed`s are independent.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tseeds_jax import sampling
from tseeds_jax.eval.passk import avg_at_k, default_ks, mean_pass_at_k

ScoreFn = Callable[[list[str], list[Any]], list[float]]


@dataclasses.dataclass(frozen=True)
class Problem:
    prompt_ids: tuple[int, ...]
    reference: Any
    prompt: str = ""


@dataclasses.dataclass
class EvalResult:
    """Per-problem correct counts and the summary statistics derived from them."""

    n: int
    correct: list[int]  # [P] correct samples per problem
    mean_length: float  # generated tokens per sample (relay: prefix + continuation)
    pass_at_k: dict[int, float]
    avg: float  # avg@n
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"n": self.n, "avg_at_n": self.avg, "pass_at_k": {str(k): v for k, v in
                                                                  self.pass_at_k.items()},
                "mean_length": self.mean_length, "correct": list(self.correct),
                "num_problems": len(self.correct), **self.extra}

    @staticmethod
    def from_counts(correct, n: int, lengths, ks=None, extra=None) -> EvalResult:
        ks = list(ks) if ks is not None else default_ks(n)
        for k in ks:
            if not 1 <= k <= n:
                raise ValueError(f"ks: k={k} must be in [1, n={n}]")
        correct = [int(c) for c in correct]
        return EvalResult(n=n, correct=correct, mean_length=float(np.mean(lengths)),
                          pass_at_k={k: mean_pass_at_k(correct, n, k) for k in ks},
                          avg=avg_at_k(correct, n), extra=dict(extra or {}))


def request_seeds(seed: int, stream: int, num_problems: int, n: int) -> list[int]:
    """One 31-bit seed per (problem, sample), in problem-major order."""
    ss = np.random.SeedSequence([int(seed), int(stream)])
    return [int(x) >> 1 for x in ss.generate_state(num_problems * n)]


def reward_score_fn(reward: str) -> ScoreFn:
    """A batch scorer from a registered reward name (tseeds_jax.rewards)."""
    from tseeds_jax import rewards  # noqa: F401  (registers the built-in rewards)
    from tseeds_jax.rewards import compact  # noqa: F401
    from tseeds_jax.rewards.registry import score_batch

    def score(texts, refs):
        return [float(r.score) for r in score_batch(reward, texts, refs)]

    return score


def _check(problems: Sequence[Problem], n: int, max_new_tokens: int):
    if not problems:
        raise ValueError("evaluate: no problems")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"evaluate: n={n!r} must be an integer >= 1")
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise ValueError(f"evaluate: max_new_tokens={max_new_tokens!r} must be an integer >= 1")


def sample(model, problems: Sequence[Problem], n: int, *, max_new_tokens, temperature: float,
           top_p: float, seed: int, stream: int, stop_tokens, prefixes=None,
           max_prefill_length=None):
    """n samples per problem (problem-major); returns the sampler's results, [P * n]."""
    prompts = [list(p.prompt_ids) for p in problems for _ in range(n)]
    results = sampling.generate(model, prompts, max_new_tokens=max_new_tokens,
                                temperature=temperature, top_p=top_p,
                                seed=request_seeds(seed, stream, len(problems), n),
                                stop_tokens=stop_tokens, prefixes=prefixes,
                                max_prefill_length=max_prefill_length)
    for r in results:
        if r.finish_reason == "error":
            raise ValueError(f"evaluate: the sampler rejected a request: {r.error}")
    return results


def evaluate(model, problems: Sequence[Problem], *, n: int, decode: Callable[[list[int]], str],
             score_fn: ScoreFn, max_new_tokens: int, temperature: float = 1.0, top_p: float = 1.0,
             seed: int = 0, stop_tokens=None, ks=None, max_prefill_length=None) -> EvalResult:
    """avg@n and pass@k (k in `ks`, default 1, 2, 4, ..., n) of `model` on `problems`.

    model: a Transformer or (graphdef, params). A sample is correct when score_fn gives >= 1.
    """
    _check(problems, n, max_new_tokens)
    if ks is not None and any(k > n for k in ks):
        raise ValueError(f"evaluate: k={max(ks)} exceeds the n={n} samples per problem")
    results = sample(model, problems, n, max_new_tokens=max_new_tokens, temperature=temperature,
                     top_p=top_p, seed=seed, stream=0, stop_tokens=stop_tokens,
                     max_prefill_length=max_prefill_length)
    texts = [decode(r.tokens) for r in results]
    refs = [p.reference for p in problems for _ in range(n)]
    scores = np.asarray(score_fn(texts, refs), np.float64).reshape(len(problems), n)
    correct = (scores >= 1.0).sum(axis=1)
    lengths = [len(r.tokens) for r in results]
    return EvalResult.from_counts(correct, n, lengths, ks)
