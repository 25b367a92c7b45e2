"""Relay inference (paper, Section 3.1): an earlier checkpoint writes the first part of each
response, a later checkpoint completes it from that state.

For problem x and sample j: y_j ~ pi_early(.|x); the cut m_j = round(|y_j| * ratio), capped at
|y_j| - 1 so that the later model always writes at least one token (an early response that ended
before the cut is continued from all but its final stop token); z_j ~ pi_final(.|x, y_j[:m_j]);
the sample is scored on y_j[:m_j] + z_j. The n (early, final) pairs of a problem are independent,
so the unbiased pass@k estimator applies to their correct count.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from tseeds_jax.eval.evaluate import EvalResult, Problem, ScoreFn, _check, sample


def cut_point(length: int, ratio: float) -> int:
    """Tokens of an early response of `length` tokens that the later model keeps."""
    if not 0.0 <= ratio <= 1.0:
        raise ValueError(f"relay: ratio={ratio!r} must be in [0, 1]")
    return max(0, min(int(round(length * ratio)), length - 1))


def relay_evaluate(early, final, problems: Sequence[Problem], *, n: int, ratio: float = 0.5,
                   decode: Callable[[list[int]], str], score_fn: ScoreFn, max_new_tokens: int,
                   temperature: float = 1.0, top_p: float = 1.0, seed: int = 0, stop_tokens=None,
                   ks=None, max_prefill_length=None) -> EvalResult:
    """avg@n and pass@k of relay inference (early writes the prefix, final the rest)."""
    _check(problems, n, max_new_tokens)
    cut_point(1, ratio)  # validates the ratio
    if ks is not None and any(k > n for k in ks):
        raise ValueError(f"relay: k={max(ks)} exceeds the n={n} samples per problem")
    first = sample(early, problems, n, max_new_tokens=max_new_tokens, temperature=temperature,
                   top_p=top_p, seed=seed, stream=1, stop_tokens=stop_tokens,
                   max_prefill_length=max_prefill_length)
    prefixes = [list(r.tokens[:cut_point(len(r.tokens), ratio)]) for r in first]
    budgets = [max_new_tokens - len(h) for h in prefixes]
    prompts = [list(p.prompt_ids) for p in problems for _ in range(n)]
    width = None if max_prefill_length is None else max_prefill_length + max_new_tokens
    from tseeds_jax import sampling
    from tseeds_jax.eval.evaluate import request_seeds

    second = sampling.generate(final, prompts, max_new_tokens=budgets, temperature=temperature,
                               top_p=top_p, seed=request_seeds(seed, 2, len(problems), n),
                               stop_tokens=stop_tokens, prefixes=prefixes,
                               max_prefill_length=width)
    for r in second:
        if r.finish_reason == "error":
            raise ValueError(f"relay: the sampler rejected a continuation: {r.error}")
    full = [h + list(r.tokens) for h, r in zip(prefixes, second)]
    texts = [decode(t) for t in full]
    refs = [p.reference for p in problems for _ in range(n)]
    scores = np.asarray(score_fn(texts, refs), np.float64).reshape(len(problems), n)
    correct = (scores >= 1.0).sum(axis=1)
    extra = {"ratio": ratio, "mean_prefix_length": float(np.mean([len(h) for h in prefixes]))}
    return EvalResult.from_counts(correct, n, [len(t) for t in full], ks, extra)
