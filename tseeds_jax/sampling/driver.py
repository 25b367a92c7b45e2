"""Offline rollout driver: token-level requests through decode slots with continuous batching.

Letters: B decode slots, P prefills run together, T prefill bucket, S cache length, N output
buffer length (largest max_new_tokens).

The host keeps a queue of requests. Free slots are filled by one batched prefill per length
bucket and one insert; then a single device call (`core.run_chunk`, a while_loop over decode
steps) runs until a slot finishes while requests wait (so it is refilled at once) or until all
slots finish. The host reads three [B] arrays per call, and the output buffers only when some
slot finished: no per-token host round-trip.

Sharded parameters (a multi-device `NamedSharding`, e.g. the learner's FSDP / tensor layout) are
used as they are: the decode state, output buffers and prefill inputs are then placed on the same
mesh by the logical rules (`placement.py`), the slot count is rounded up to a multiple of the
batch shards, and the prefill token cap applies per device.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

import tseeds_jax.sampling.core as core
from tseeds_jax.decode_layout import MAX_DEFAULT_SLOTS, default_slots  # noqa: F401
from tseeds_jax.model import Transformer
from tseeds_jax.sampling.placement import SamplerShardings, fetch, params_mesh
from tseeds_jax.sampling.strategies import make_strategy

# Cap on P * T of one batched prefill per device: bounds the [P, H, T, T] attention scores.
PREFILL_TOKENS = 8192


@dataclasses.dataclass(frozen=True)
class GenerationResult:
    """One request's outcome. `tokens`: new tokens only (a final stop token included);
    `logprobs`: their log-probs under the model at temperature 1 (float, natural log);
    `finish_reason`: "stop" | "length" | "error"; `error`: the message when "error"."""

    tokens: list[int]
    logprobs: list[float]
    finish_reason: str
    error: str | None = None


@dataclasses.dataclass
class _Request:
    index: int
    tokens: np.ndarray  # int32 prompt (+ prefix)
    budget: int
    key: np.ndarray  # uint32 [2]
    optional: bool = False  # interruptible: see `generate(..., interruptible=)`


# A module's pytree structure -> (ModelDef, structure of its params State); see split_model.
_SPLITS: collections.OrderedDict = collections.OrderedDict()
_SPLITS_MAX = 16


def split_model(model):
    """(ModelDef, params) from a Transformer or a (graphdef, params) pair.

    A Transformer's graph is split once per pytree structure (nnx.split walks the whole graph:
    ~1.2 ms for 4 layers, on every generate call); later calls only flatten its arrays, which
    come in the same order as the split State's leaves (checked when the entry is made)."""
    if isinstance(model, Transformer):
        leaves, tree = jax.tree.flatten(model)
        hit = _SPLITS.get(tree)
        if hit is None:
            graphdef, params = nnx.split(model)
            p_leaves, p_tree = jax.tree.flatten(params)
            mdef = core.ModelDef(graphdef)
            if len(p_leaves) != len(leaves) or any(a is not b for a, b in zip(p_leaves, leaves)):
                return mdef, params
            hit = _SPLITS[tree] = (mdef, p_tree)
            while len(_SPLITS) > _SPLITS_MAX:
                _SPLITS.popitem(last=False)
        return hit[0], jax.tree.unflatten(hit[1], leaves)
    if isinstance(model, tuple) and len(model) == 2 and isinstance(model[0], core.ModelDef):
        return model
    if isinstance(model, tuple) and len(model) == 2 and isinstance(model[0], nnx.GraphDef):
        return core.ModelDef(model[0]), model[1]
    raise TypeError(f"model: expected a Transformer or a (graphdef, params) pair from "
                    f"nnx.split(model), got {type(model).__name__}")


@functools.partial(jax.jit, static_argnums=(1,))
def _keys_from_int(seed, n: int):
    return jax.vmap(jax.random.fold_in, (None, 0))(jax.random.PRNGKey(seed),
                                                   jnp.arange(n, dtype=jnp.uint32))


@jax.jit
def _keys_from_seeds(seeds):
    return jax.vmap(jax.random.PRNGKey)(seeds)


@jax.jit
def _cast_floats(params, dtype_like):
    return jax.tree.map(
        lambda x: x.astype(dtype_like.dtype) if jnp.issubdtype(x.dtype, jnp.floating) else x,
        params)


def cast_params(params, dtype):
    """Float leaves of `params` cast to `dtype` (e.g. "bfloat16"); compute dtype is unchanged."""
    return _cast_floats(params, jnp.zeros((), jnp.dtype(dtype)))


def _request_keys(seed, n: int) -> np.ndarray:
    """uint32 [n, 2]: fold_in(PRNGKey(seed), i) for an int seed; PRNGKey(seed_i) for a list."""
    # Keys are computed for a power-of-two bucket of requests and sliced: one compiled program
    # per bucket, not per request count (partial rollouts' calls vary call by call); each key
    # is a function of its own seed and index only, so the padding changes no key.
    bucket = 1 << (max(n, 1) - 1).bit_length()
    if isinstance(seed, (int, np.integer)) and not isinstance(seed, bool):
        if not 0 <= seed < 2**32:
            raise ValueError(f"seed={seed!r}: must be in [0, 2**32)")
        return np.asarray(_keys_from_int(np.uint32(seed), bucket))[:n]
    seeds = list(seed)
    if len(seeds) != n:
        raise ValueError(f"seed: a list of per-request seeds needs {n} entries, got {len(seeds)}")
    for s in seeds:
        if not isinstance(s, (int, np.integer)) or isinstance(s, bool) or not 0 <= s < 2**32:
            raise ValueError(f"seed: per-request seeds must be integers in [0, 2**32), got {s!r}")
    padded = np.zeros(bucket, np.uint32)
    padded[:n] = seeds
    return np.asarray(_keys_from_seeds(padded))[:n]


def _per_request(value, n: int, name: str) -> list:
    if isinstance(value, (list, tuple, np.ndarray)):
        if len(value) != n:
            raise ValueError(f"{name}: expected one value per prompt ({n}), got {len(value)}")
        return list(value)
    return [value] * n


def _validate(tokens, budget, vocab: int, max_prefill: int) -> str | None:
    """The problem with one request, or None."""
    if not isinstance(budget, (int, np.integer)) or isinstance(budget, bool) or budget <= 0:
        return f"max_new_tokens={budget!r}: must be a positive integer"
    if tokens.ndim != 1 or (tokens.size and not np.issubdtype(tokens.dtype, np.integer)):
        return f"prompt must be a flat list of integer token ids, got dtype {tokens.dtype} " \
               f"shape {tokens.shape}"
    if tokens.size == 0:
        return "empty prompt: at least one token is needed to condition on"
    if tokens.size > max_prefill:
        return f"prompt length {tokens.size} exceeds max_prefill_length={max_prefill}"
    bad = (tokens < 0) | (tokens >= vocab)
    if bad.any():
        return f"token id {int(tokens[bad][0])} at position {int(np.argmax(bad))} is outside " \
               f"the vocabulary [0, {vocab})"
    return None


def generate(model, prompts: Sequence[Sequence[int]], *, max_new_tokens, temperature: float = 1.0,
             top_p: float = 1.0, top_k: int = 0, seed=0, stop_tokens=None, prefixes=None,
             num_slots: int | None = None, max_prefill_length: int | None = None,
             param_dtype=None, interruptible=None) -> list[GenerationResult]:
    """Samples continuations of token-level prompts; results in input order.

    model: a `Transformer`, or `(graphdef, params)` from `nnx.split(model)` — the learner's
      parameter pytree as is (new values of the same shapes/dtypes reuse compiled code).
    prompts: list of token-id lists (a prompt may already end with a seed prefix).
    max_new_tokens: int, or one int per prompt.
    temperature / top_p / top_k: temperature 0 is greedy; top_k 0 and top_p 1 disable them.
    seed: int (request i uses fold_in(PRNGKey(seed), i)) or one seed per prompt (PRNGKey(s_i)).
      The i-th new token uses fold_in(request key, i): results do not depend on slot count or
      on the other prompts.
    stop_tokens: token ids that end a request (included in `.tokens`, reason "stop").
    prefixes: optional per-prompt token lists appended to the prompts (e.g. a seed prefix);
      `.tokens` are the tokens after the prefix.
    num_slots: concurrent decode slots (default: next power of two >= len(prompts), <= 256);
      with sharded params rounded up to a multiple of the mesh's batch shards.
    max_prefill_length: longest accepted prompt (+ prefix); default the model's
      max_position_embeddings.
    param_dtype: optionally cast the float params (e.g. "bfloat16") before sampling.
    interruptible: optional per-prompt bools (partial rollouts, rl/rollout/pool.py). When every
      request marked False has ended (and at least one was), the call returns at once: the
      interruptible requests still decoding end with the tokens written so far and finish
      "length", those never started with no tokens. They fill the slots the others leave idle.

    Invalid requests (empty, too long, ids outside the vocabulary, max_new_tokens <= 0) get a
    result with finish_reason "error" and a message; the others still run.
    """
    graphdef, params = split_model(model)
    # merge wraps the arrays (nothing is copied) but walks the graph: skip it for a module
    cfg = model.cfg if isinstance(model, Transformer) else core.merge(graphdef, params).cfg
    if isinstance(prompts, np.ndarray) and prompts.ndim == 2:
        prompts = list(prompts)
    if not isinstance(prompts, Sequence) or isinstance(prompts, (str, bytes)):
        raise TypeError(f"prompts: expected a list of token-id lists, got {type(prompts).__name__}")
    n = len(prompts)
    if n == 0:
        return []
    strategy = make_strategy(temperature, top_k, top_p)
    stops = tuple(sorted({int(t) for t in (stop_tokens or ())}))
    max_prefill = int(max_prefill_length or cfg.max_position_embeddings)
    if max_prefill <= 0:
        raise ValueError(f"max_prefill_length={max_prefill_length!r}: must be positive")
    budgets = _per_request(max_new_tokens, n, "max_new_tokens")
    extra = _per_request(None, n, "prefixes") if prefixes is None else \
        _per_request(prefixes, n, "prefixes")
    keys = _request_keys(seed, n)
    if param_dtype is not None:
        params = cast_params(params, param_dtype)

    results: list[GenerationResult | None] = [None] * n
    requests = []
    for i in range(n):
        try:
            tokens = np.asarray(list(prompts[i]) + list(extra[i] or ()))
        except TypeError as e:
            results[i] = GenerationResult([], [], "error", f"prompt {i}: {e}")
            continue
        problem = _validate(tokens, budgets[i], cfg.vocab_size, max_prefill)
        if problem:
            results[i] = GenerationResult([], [], "error", f"prompt {i}: {problem}")
            continue
        requests.append(_Request(i, tokens.astype(np.int32), int(budgets[i]), keys[i],
                                 bool(interruptible[i]) if interruptible is not None else False))
    if requests:
        slots = num_slots or default_slots(len(requests))
        if not isinstance(slots, int) or slots <= 0:
            raise ValueError(f"num_slots={num_slots!r}: must be a positive integer")
        mesh = params_mesh(params)
        place = SamplerShardings(mesh) if mesh is not None else None
        for r, out in _run(cfg, graphdef, params, strategy, stops, requests, slots, max_prefill,
                           place):
            results[r.index] = out
    return results


def _run(cfg, graphdef, params, strategy, stops, requests, slots, max_prefill, place=None):
    """Continuous batching over `slots`; yields (request, GenerationResult) as they finish.
    `place`: a SamplerShardings when the params are sharded (None: everything on the default device)."""
    # Output buffer length: a power of two (>= 16) so that nearby budgets share compiled code.
    n_out = max(16, 1 << (max(r.budget for r in requests) - 1).bit_length())
    cache_len = core.cache_bucket(max(max(r.tokens.size + r.budget,
                                          core.prefill_bucket(r.tokens.size, max_prefill))
                                      for r in requests))
    if place is None:
        state, out_t, out_lp = core.init_buffers(cfg, slots, cache_len, n_out)
        rows_per_prefill = 1
    else:
        slots = place.round_rows(slots)
        state, out_t, out_lp = place.init_buffers(cfg, slots, cache_len, n_out)
        rows_per_prefill = place.batch_shards
    queue = collections.deque(requests)
    free = list(range(slots))
    in_slot: list[_Request | None] = [None] * slots
    required = sum(not r.optional for r in requests)
    while queue or any(r is not None for r in in_slot):
        if required == 0 and len(requests) > sum(r.optional for r in requests):
            # every required request ended: interrupt the interruptible ones
            toks, lps = fetch((out_t, out_lp))
            count = fetch(state.step_B)
            for s in range(slots):
                if in_slot[s] is not None:
                    c = int(count[s])
                    yield in_slot[s], GenerationResult(toks[s, :c].tolist(), lps[s, :c].tolist(),
                                                       "length")
            for r in queue:
                yield r, GenerationResult([], [], "length")
            return
        if queue and free:
            take = [queue.popleft() for _ in range(min(len(free), len(queue)))]
            for group in _prefill_groups(take, max_prefill, rows_per_prefill):
                used = [free.pop(0) for _ in group]
                for s, r in zip(used, group):
                    in_slot[s] = r
                state = _prefill_insert(graphdef, params, strategy, state, group, used, slots,
                                        max_prefill, place)
        # With required requests in flight beside interruptible ones, return as soon as any
        # slot finishes, so that the call can stop when the last required one ends.
        watch = bool(queue) or (required > 0 and any(r is not None and r.optional
                                                     for r in in_slot))
        state, out_t, out_lp, _ = core.run_chunk(graphdef, strategy, stops, params, state, out_t,
                                                 out_lp, n_out + 1, watch)
        finish, count = fetch((state.finish_B, state.step_B))
        done = [s for s in range(slots) if in_slot[s] is not None and finish[s] != core.RUNNING]
        if not done:
            continue
        toks, lps = fetch((out_t, out_lp))
        for s in done:
            r, c = in_slot[s], int(count[s])
            yield r, GenerationResult(toks[s, :c].tolist(), lps[s, :c].tolist(),
                                      core.FINISH_REASONS[int(finish[s])])
            required -= not r.optional
            in_slot[s] = None
            free.append(s)


def _prefill_groups(requests, max_prefill, shards: int = 1):
    """Requests grouped by prefill bucket, each group at most PREFILL_TOKENS padded tokens per
    device (`shards`: devices the rows are split over)."""
    by_bucket: dict[int, list] = collections.defaultdict(list)
    for r in requests:
        by_bucket[core.prefill_bucket(r.tokens.size, max_prefill)].append(r)
    for t, group in sorted(by_bucket.items()):
        rows = max(1, PREFILL_TOKENS // t)
        rows = (1 << (rows.bit_length() - 1)) * shards  # a power of two per device
        for i in range(0, len(group), rows):
            yield group[i:i + rows]


def _prefill_insert(graphdef, params, strategy, state, group, slots_used, num_slots, max_prefill,
                    place=None):
    """One batched prefill (P padded to a power of two; sharded: also to a multiple of the batch
    shards, so every device prefills whole rows) and one insert."""
    t = core.prefill_bucket(max(r.tokens.size for r in group), max_prefill)
    p = 1 << (len(group) - 1).bit_length()
    if place is not None:
        p = place.round_rows(p)
    tokens = np.zeros((p, t), np.int32)
    length = np.ones((p,), np.int32)
    key = np.zeros((p, 2), np.uint32)
    budget = np.ones((p,), np.int32)
    slot = np.full((p,), num_slots, np.int32)  # padding rows: out of range, dropped by insert
    for j, (r, s) in enumerate(zip(group, slots_used)):
        tokens[j, :r.tokens.size] = r.tokens
        length[j], key[j], budget[j], slot[j] = r.tokens.size, r.key, r.budget, s
    error = np.zeros((p,), bool)
    if place is not None:
        tokens, length, key, budget, error, slot = place.put_rows(tokens, length, key, budget,
                                                                  error, slot)
    prefix = core.prefill(graphdef, strategy, params, tokens, length, key, budget, error)
    if place is not None:  # the prefix KV laid out like the cache rows it is copied into
        prefix = place.place(prefix, place.prefix_shardings(prefix, type(state.cache)))
    return core.insert(prefix, state, slot)
