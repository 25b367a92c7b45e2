"""Reward registry and the single / batched scoring entry points.

A reward is a function `fn(response: str, reference, **options) -> RewardResult | float`. It is
registered with an isolation mode:
  - "process": runs in a persistent reward worker process (`_pool`), on that process's main thread,
    with a hard deadline enforced by the caller (the worker is killed and replaced on expiry). Used
    for anything that can hang or must fork (math-verify/sympy, reasoning-gym scorers, the sandbox).
  - "inline": runs in the calling thread (cheap, trusted, pure-Python rewards).
Whatever happens, scoring returns a RewardResult with a score in [0, 1] and a reason; it never
raises into the trainer (only programming errors — an unknown reward name, mismatched batch
lengths — raise ValueError).
"""

from __future__ import annotations

import collections
import concurrent.futures
import inspect
import os
from collections.abc import Callable
from typing import Any

import tseeds_jax.rewards._pool as _pool
import tseeds_jax.rewards.failure_log as failure_log
from tseeds_jax.rewards.results import RewardResult, RewardSpec, call_inline, normalize

__all__ = ["RewardResult", "RewardSpec", "call_inline", "get", "names", "normalize", "register", "score",
           "score_batch", "score_result", "summarize"]


_REGISTRY: dict[str, RewardSpec] = {}


def register(name: str, *, isolation: str = "process", hard_timeout_s: float | Callable = 60.0):
    """Decorator: register `fn(response, reference, **options)` under `name`.

    hard_timeout_s: seconds (or `f(reference, options) -> seconds`) after which a "process" reward
    is abandoned (worker killed) and scored 0 with reason "timeout".
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"reward name must be a non-empty str, got {name!r}")
    if isolation not in ("process", "inline"):
        raise ValueError(f"isolation must be 'process' or 'inline', got {isolation!r}")
    timeout_fn = (
        hard_timeout_s if callable(hard_timeout_s) else (lambda ref, opts, t=float(hard_timeout_s): t)
    )

    def deco(fn):
        try:
            file = inspect.getsourcefile(fn)
        except TypeError:
            file = None
        _REGISTRY[name] = RewardSpec(name, fn, fn.__module__, file, isolation, timeout_fn)
        return fn

    return deco


def get(name: str) -> RewardSpec:
    """The registered spec for `name`; ValueError naming the known rewards otherwise."""
    if name not in _REGISTRY:
        raise ValueError(f"unknown reward {name!r}; registered: {sorted(_REGISTRY)}")
    return _REGISTRY[name]


def names() -> list[str]:
    return sorted(_REGISTRY)


def score_result(name: str, response: Any, reference: Any, **options) -> RewardResult:
    """Score one response; see the module docstring for the isolation modes."""
    spec = get(name)
    if spec.isolation == "inline":
        res = call_inline(spec, response, reference, options)
    else:
        try:
            timeout = float(spec.hard_timeout_s(reference, options))
        except Exception:  # noqa: BLE001 - malformed reference: let the reward itself report it
            timeout = 60.0
        res = _pool.shared_pool().call(spec, response, reference, options, timeout)
    failure_log.note(res)  # the first sandbox_error of the process is logged with its cause
    return res


def score(name: str, response: Any, reference: Any, **options) -> float:
    """Public single-response form: a float in [0, 1] (0 for anything that cannot be graded)."""
    return score_result(name, response, reference, **options).score


def score_batch(name: str, responses, references, *, max_workers: int | None = None, **options):
    """Score responses[i] against references[i] in parallel; results in input order.

    Threads dispatch to reward worker processes ("process" rewards: math, reasoning_gym, code), so
    up to `max_workers` (default: CPU count) are graded at once.
    """
    get(name)
    responses, references = list(responses), list(references)
    if len(responses) != len(references):
        raise ValueError(f"score_batch: {len(responses)} responses but {len(references)} references")
    if max_workers is None:
        max_workers = os.cpu_count() or 1
    if not isinstance(max_workers, int) or max_workers < 1:
        raise ValueError(f"max_workers must be a positive int, got {max_workers!r}")
    if not responses:
        return []
    workers = min(max_workers, len(responses))
    if workers == 1:
        return [score_result(name, r, ref, **options) for r, ref in zip(responses, references)]
    _pool.shared_pool().ensure_capacity(workers)
    with concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="reward") as ex:
        return list(
            ex.map(lambda rr: score_result(name, rr[0], rr[1], **options), zip(responses, references))
        )


def summarize(results: list[RewardResult], prefix: str = "reward") -> dict[str, float]:
    """Batch metrics: mean score and a count per reason (`{prefix}/reason/<reason>`)."""
    n = len(results)
    out = {f"{prefix}/mean": sum(r.score for r in results) / n if n else 0.0}
    for reason, c in sorted(collections.Counter(r.reason for r in results).items()):
        out[f"{prefix}/reason/{reason}"] = float(c)
    return out
