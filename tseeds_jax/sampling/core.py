"""Jitted sampler core shared by the offline driver and the JetStream engine.

Letters: B decode slots, P prefills run together, T prefill bucket length, S cache length,
N output buffer length (max new tokens), V vocab, K kv heads, E head dim.

A slot's life: `prefill` computes the KV of a prompt (right-padded to a bucket) in its own small
cache and samples the first new token; `insert` copies that KV into a slot row of the decode
state; every `step` then *emits* the slot's current token (count, stop/length checks), feeds it
through the model, and samples the next one. Emitting before feeding lets the JetStream
orchestrator (whose prefill returns no token) receive every token from `generate`.

Randomness: the i-th new token of a request (i = 0 for the prefill's token) is drawn with
`fold_in(request_key, i)`, so tokens depend on the request's key only, never on the slot or on
the other requests.

Params enter every function as an argument (`merge(graphdef, params)` inside the trace):
new weights of the same shapes/dtypes reuse the compiled code. `graphdef` (a GraphDef, or a
`ModelDef` that hashes once), the strategy and the stop tokens are static (hashable) arguments.
"""

from __future__ import annotations

import functools

import flax.struct
import jax
import jax.numpy as jnp
from flax import nnx

import tseeds_jax.sampling.vocab_parallel as vocab_parallel
from tseeds_jax.kernels.sharded import mesh_of
from tseeds_jax.model import KVCache
from tseeds_jax.sampling.strategies import logprob_temperature, step_keys, tempered, token_logprobs

# finish codes (int32 in the state)
RUNNING, STOP, LENGTH, ERROR = 0, 1, 2, 3
FINISH_REASONS = {STOP: "stop", LENGTH: "length", ERROR: "error"}

# Counts traces of the jitted functions (tests check that new params values never retrace).
TRACE_COUNTS: dict[str, int] = {"prefill": 0, "insert": 0, "step": 0, "chunk": 0}


class ModelDef:
    """A model's static graph (`nnx.GraphDef`) as a jit static argument with its hash computed
    once: hashing a GraphDef walks it (measured ~0.14 ms per jitted call for 4 layers)."""

    __slots__ = ("graphdef", "_hash")

    def __init__(self, graphdef):
        self.graphdef = graphdef
        self._hash = hash(graphdef)

    def __hash__(self):
        return self._hash

    def __eq__(self, other):
        return self is other or (isinstance(other, ModelDef) and self._hash == other._hash
                                 and self.graphdef == other.graphdef)


def merge(graphdef, params):
    """`nnx.merge` for a GraphDef or a ModelDef."""
    return nnx.merge(graphdef.graphdef if isinstance(graphdef, ModelDef) else graphdef, params)


@flax.struct.dataclass
class Prefix:
    """The result of a prefill for P prompts: their keys [P, K, E, T] and values [P, K, T, E]
    per layer (the `KVCache` layout; an int8 cache's scales [P, K, T] beside them, else None)
    and first token."""

    k: tuple[jax.Array, ...]
    v: tuple[jax.Array, ...]
    length_P: jax.Array  # int32 real prompt lengths
    token_P: jax.Array  # int32 first new token (sampled, not yet emitted)
    logprob_P: jax.Array  # float32 its temperature-1 log-prob
    key_P: jax.Array  # uint32 [P, 2] request keys
    budget_P: jax.Array  # int32 max tokens to emit
    error_P: jax.Array  # bool: the request was invalid; the slot finishes with "error"
    k_scale: tuple[jax.Array, ...] | None = None
    v_scale: tuple[jax.Array, ...] | None = None


@flax.struct.dataclass
class DecodeState:
    """Everything a decode step transforms, for all B slots.

    cache.end_B is each slot's position of the current token (prompt length + tokens fed).
    """

    cache: KVCache
    token_B: jax.Array  # int32 current token: sampled, not yet emitted
    logprob_B: jax.Array  # float32 its temperature-1 log-prob
    step_B: jax.Array  # int32 tokens emitted so far
    budget_B: jax.Array  # int32 max tokens to emit
    key_B: jax.Array  # uint32 [B, 2] request keys
    occupied_B: jax.Array  # bool: the slot holds a request (running or finished, not yet freed)
    finish_B: jax.Array  # int32 RUNNING / STOP / LENGTH / ERROR

    @property
    def live_B(self):
        return self.occupied_B & (self.finish_B == RUNNING)

    @classmethod
    def init(cls, cfg, slots: int, cache_len: int, cache_dtype=None) -> DecodeState:
        # Separate buffers per field: donation rejects one buffer passed twice.
        def zi():
            return jnp.zeros((slots,), jnp.int32)

        return cls(cache=KVCache.init(cfg, slots, cache_len, cache_dtype), token_B=zi(),
                   logprob_B=jnp.zeros((slots,), jnp.float32), step_B=zi(), budget_B=zi(),
                   key_B=jnp.zeros((slots, 2), jnp.uint32),
                   occupied_B=jnp.zeros((slots,), bool), finish_B=zi())


@functools.partial(jax.jit, static_argnames=("cfg", "slots", "cache_len", "out_len"))
def init_buffers(cfg, slots: int, cache_len: int, out_len: int):
    """(empty DecodeState, out_tokens [B, N] int32, out_logprobs [B, N] float32) in one call."""
    return (DecodeState.init(cfg, slots, cache_len), jnp.zeros((slots, out_len), jnp.int32),
            jnp.zeros((slots, out_len), jnp.float32))


@flax.struct.dataclass
class Emitted:
    """What one step emitted per slot: token, log-prob, validity, tokens emitted so far."""

    token_B: jax.Array
    logprob_B: jax.Array
    valid_B: jax.Array
    count_B: jax.Array


@functools.partial(jax.jit, static_argnames=("graphdef", "strategy"))
def prefill(graphdef, strategy, params, tokens_PT, length_P, key_P, budget_P, error_P) -> Prefix:
    """KV of P right-padded prompts [P, T] and their first sampled token.

    Rows flagged in `error_P` are computed on whatever tokens they hold (callers pass zeros) and
    ignored later. `budget_P`: max tokens to emit per request.
    """
    TRACE_COUNTS["prefill"] += 1
    model = merge(graphdef, params)
    p, t = tokens_PT.shape
    cache = KVCache.init(model.cfg, p, t)
    # The cache is fresh and T long: causal attention by the model's kernel (splash on TPU), no
    # float32 [T, S] scores over the cache.
    hidden_PTD, cache = model.hidden(tokens_PT, cache=cache, lengths_B=length_P, empty_cache=True)
    last_PD = hidden_PTD[jnp.arange(p), jnp.maximum(length_P - 1, 0)]
    logits_PV = model.logits(last_PD[:, None])[:, 0]
    token_P, logprob_P = sample_logits(model, strategy, logits_PV,
                                       step_keys(key_P, jnp.zeros((p,), jnp.int32)))
    return Prefix(k=cache.k, v=cache.v, length_P=length_P.astype(jnp.int32), token_P=token_P,
                  logprob_P=logprob_P, key_P=key_P,
                  budget_P=budget_P.astype(jnp.int32), error_P=error_P,
                  k_scale=cache.k_scale, v_scale=cache.v_scale)


@functools.partial(jax.jit, donate_argnames=("state",))
def insert(prefix: Prefix, state: DecodeState, slot_P) -> DecodeState:
    """Copies P prefills into slots `slot_P` (int32 [P]); entries equal to B are skipped."""
    TRACE_COUNTS["insert"] += 1
    t = prefix.k[0].shape[-1]

    def put(dst, src):
        return dst.at[slot_P].set(src.astype(dst.dtype), mode="drop")

    def put_k(dst_BKES, src_PKET):
        return dst_BKES.at[slot_P, :, :, :t].set(src_PKET.astype(dst_BKES.dtype), mode="drop")

    def put_v(dst_BKSE, src_PKTE):
        return dst_BKSE.at[slot_P, :, :t].set(src_PKTE.astype(dst_BKSE.dtype), mode="drop")

    def put_s(dst_BKS, src_PKT):
        return dst_BKS.at[slot_P, :, :t].set(src_PKT.astype(dst_BKS.dtype), mode="drop")

    cache = state.cache
    if (cache.k_scale is None) != (prefix.k_scale is None):
        raise ValueError(f"insert: a prefill of a {prefix.k[0].dtype} cache into a "
                         f"{cache.k[0].dtype} decode cache (kv_cache_dtype differs)")
    scales = {}
    if cache.k_scale is not None:
        scales = dict(k_scale=tuple(put_s(d, s) for d, s in zip(cache.k_scale, prefix.k_scale)),
                      v_scale=tuple(put_s(d, s) for d, s in zip(cache.v_scale, prefix.v_scale)))
    cache = KVCache(k=tuple(put_k(d, s) for d, s in zip(cache.k, prefix.k)),
                    v=tuple(put_v(d, s) for d, s in zip(cache.v, prefix.v)),
                    end_B=put(cache.end_B, prefix.length_P), **scales)
    p = slot_P.shape[0]
    return DecodeState(
        cache=cache, token_B=put(state.token_B, prefix.token_P),
        logprob_B=put(state.logprob_B, prefix.logprob_P),
        step_B=put(state.step_B, jnp.zeros((p,), jnp.int32)),
        budget_B=put(state.budget_B, prefix.budget_P), key_B=put(state.key_B, prefix.key_P),
        occupied_B=put(state.occupied_B, jnp.ones((p,), bool)),
        finish_B=put(state.finish_B, jnp.where(prefix.error_P, ERROR, RUNNING)))


def prefill_bucket(length: int, max_prefill_length: int) -> int:
    """Padded prefill length: the next power of two >= length (min 16), capped at the maximum."""
    return min(max(16, 1 << (max(length, 1) - 1).bit_length()), max_prefill_length)


def cache_bucket(length: int) -> int:
    """Cache length for `length` positions: next of 64, 96, 128, 192, 256, ... (<= 1.5x waste)."""
    size = 64
    while size < length:
        size = size // 2 * 3 if size & (size - 1) == 0 else size // 3 * 4
    return size


def _emit(stop_tokens, state: DecodeState):
    """Emits every running slot's current token (count, stop / length checks), no model call.
    Returns (state after emission, Emitted, still_B: the slots that keep running)."""
    live = state.live_B
    count = state.step_B + live.astype(jnp.int32)
    stop_arr = jnp.asarray(stop_tokens if stop_tokens else (-1,), jnp.int32)
    hit_stop = live & jnp.any(state.token_B[:, None] == stop_arr[None, :], axis=-1)
    hit_len = live & (count >= state.budget_B)
    finish = jnp.where(hit_stop, STOP, jnp.where(hit_len, LENGTH, state.finish_B))
    emitted = Emitted(token_B=state.token_B, logprob_B=state.logprob_B, valid_B=live,
                      count_B=count)
    return state.replace(step_B=count, finish_B=finish), emitted, live & ~hit_stop & ~hit_len


def _continues(stop_tokens, state: DecodeState):
    """bool: some slot keeps running after the next emission (so the next step needs the
    model); otherwise emitting is all that is left."""
    return jnp.any(_emit(stop_tokens, state)[2])


def _feed(model, strategy, state: DecodeState, still_B):
    """Feeds every slot's current token through the model and samples the next one; only the
    `still_B` slots advance their cache end and take the new token."""
    # All rows run (one batched matmul); rows that are not running do not advance their end.
    logits_B1V, cache = model.decode(state.token_B[:, None], state.cache,
                                     lengths_B=still_B.astype(jnp.int32))
    logits_BV = logits_B1V[:, 0]
    nxt, logp = sample_logits(model, strategy, logits_BV, step_keys(state.key_B, state.step_B))
    return state.replace(cache=cache, token_B=jnp.where(still_B, nxt, state.token_B),
                         logprob_B=jnp.where(still_B, logp, state.logprob_B))


def sample_logits(model, strategy, logits_BV, keys_B2):
    """(tokens, log-probs at the strategy's temperature, `strategies.logprob_temperature`): on
    vocabulary-split logits (the decode layout's tensor-parallel LM head) without gathering them
    (`vocab_parallel`), else the strategy's own."""
    mesh = mesh_of(model.embed.value, min_devices=2)
    if vocab_parallel.applies(strategy, mesh, logits_BV.shape[-1]):
        return vocab_parallel.sample(strategy, logits_BV, keys_B2, mesh)
    tok = strategy.sample(logits_BV, keys_B2)
    return tok, token_logprobs(tempered(logits_BV, logprob_temperature(strategy)), tok)


def _step(model, strategy, stop_tokens, state: DecodeState):
    """One decode step for all slots (traced inside jit): emit, feed, sample."""
    state, emitted, still = _emit(stop_tokens, state)
    return _feed(model, strategy, state, still), emitted


@functools.partial(jax.jit, static_argnames=("graphdef", "strategy", "stop_tokens"),
                   donate_argnames=("state",))
def step(graphdef, strategy, stop_tokens, params, state: DecodeState):
    """One decode step for all slots -> (new state, Emitted)."""
    TRACE_COUNTS["step"] += 1
    return _step(merge(graphdef, params), strategy, stop_tokens, state)


@functools.partial(jax.jit, static_argnames=("graphdef", "strategy", "stop_tokens"),
                   donate_argnames=("state", "out_tokens_BN", "out_logprobs_BN"))
def run_chunk(graphdef, strategy, stop_tokens, params, state: DecodeState, out_tokens_BN,
              out_logprobs_BN, max_steps, return_on_finish):
    """Up to `max_steps` decode steps in one device call (a while_loop), writing emitted tokens
    into the output buffers at column `count - 1`.

    Stops early when no slot is running, or (if `return_on_finish`) as soon as a slot finishes
    so that the host can refill it. Both scalars are traced: changing them never recompiles.
    A step in which every running slot emits its last token runs no model call (an emit-only
    pass after the loop). Returns (state, out_tokens_BN, out_logprobs_BN, model steps run).
    """
    TRACE_COUNTS["chunk"] += 1
    model = merge(graphdef, params)
    b, n = out_tokens_BN.shape
    rows = jnp.arange(b)

    def write(toks, lps, em):
        col = jnp.where(em.valid_B, em.count_B - 1, n)  # n: out of range, dropped
        return (toks.at[rows, col].set(em.token_B, mode="drop"),
                lps.at[rows, col].set(em.logprob_B, mode="drop"))

    def cond(carry):
        i, st, _, _, finished = carry
        # Steps whose emissions finish every running slot are left to the emit-only pass below:
        # their model call would be wasted.
        go_on = (i < max_steps) & _continues(stop_tokens, st)
        return go_on & ~(return_on_finish & finished)

    def body(carry):
        i, st, toks, lps, _ = carry
        was_live = st.live_B
        st, em = _step(model, strategy, stop_tokens, st)
        toks, lps = write(toks, lps, em)
        finished = jnp.any(was_live & ~st.live_B)
        return i + 1, st, toks, lps, finished

    init = (jnp.int32(0), state, out_tokens_BN, out_logprobs_BN, jnp.bool_(False))
    i, state, out_tokens_BN, out_logprobs_BN, _ = jax.lax.while_loop(cond, body, init)
    # Emit-only pass: slots whose current token is their last finish without a model call;
    # the others are untouched (their emission waits for the next step).
    emitted_state, em, still = _emit(stop_tokens, state)
    last = em.valid_B & ~still & (i < max_steps)
    em = em.replace(valid_B=last)
    out_tokens_BN, out_logprobs_BN = write(out_tokens_BN, out_logprobs_BN, em)
    state = state.replace(step_B=jnp.where(last, emitted_state.step_B, state.step_B),
                          finish_B=jnp.where(last, emitted_state.finish_B, state.finish_B))
    return state, out_tokens_BN, out_logprobs_BN, i
