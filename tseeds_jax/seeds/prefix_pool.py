"""PrefixRL's pool: one successful base-model trace per problem, found by rejection sampling once
per run, and the prefixes cut from it.

PrefixRL (Setlur et al., arXiv 2601.18795) conditions on-policy RL on prefixes of correct
off-policy traces, sourced by rejection sampling the base model; the prefix length sets the
difficulty and the prefix is context only. Here the pool is built from the run's initial policy
at step 0: `pool_prompts` problems drawn from the training stream, `pool_budget` samples each,
the first correct sample kept (problems with none drop out). It is written to RUN_DIR/
prefix_pool.json, and a resumed run reads it back instead of sampling again.
"""

from __future__ import annotations

import json
import os
from typing import Any

from tseeds_jax.seeds.truncation import RatioTruncation

POOL_FILE = "prefix_pool.json"


def first_successes(samples, group_size: int) -> list[dict[str, Any]]:
    """The first sample with reward >= 1 of each group of `group_size` scored samples."""
    pool = []
    for start in range(0, len(samples), group_size):
        for s in samples[start : start + group_size]:
            if s.reward >= 1.0:
                pool.append({"prompt_ids": [int(t) for t in s.prompt_ids],
                             "reference": s.reference,
                             "trace": [int(t) for t in s.response_ids]})
                break
    return pool


def prefix(trace: list[int], ratio: float) -> list[int]:
    """The first round(ratio * |trace|) tokens (never the last: the policy writes at least one)."""
    return list(trace[: RatioTruncation(ratio).seed_length(len(trace))])


def save(run_dir: str, pool: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    path = os.path.join(run_dir, POOL_FILE)
    os.makedirs(run_dir, exist_ok=True)
    # every host writes the same pool; each through its own temporary file (a shared run dir)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump({"meta": meta, "pool": pool}, f)
    os.replace(tmp, path)
    return path


def load(run_dir: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    path = os.path.join(run_dir, POOL_FILE)
    try:
        with open(path) as f:
            got = json.load(f)
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: PrefixRL's pool is missing; a run resumed after step 0 "
                                "reads the pool its step 0 built (start the run over)") from None
    except ValueError as e:
        raise ValueError(f"{path}: not a PrefixRL pool ({e})") from None
    if not isinstance(got, dict) or not isinstance(got.get("pool"), list):
        raise ValueError(f"{path}: not a PrefixRL pool (expected {{'meta', 'pool': [...]}})")
    return got["pool"], got.get("meta", {})
