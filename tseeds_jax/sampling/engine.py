"""JetStream Engine API (google-jetstream 0.2.2) over the sampler core.

Letters: B decode slots, T prefill bucket, S cache length.

JetStream 0.2.2's orchestrator takes no token from `prefill`: every token reaches the client
through `generate`, which emits each slot's current token and samples the next one (see
`core`). Requests are token ids (client-side tokenization); `pad_tokens` in the orchestrator
prepends the tokenizer's BOS id, so our tokenizer reports a sentinel BOS that `prefill` strips:
the model sees exactly the client's tokens, as in the offline driver. Bad requests never raise
(a raising engine thread kills the JetStream server): the slot finishes at once with "error"
and the client's stream ends without tokens.

A stop token is emitted by `generate` with valid=1; the orchestrator ends the stream there
without forwarding it (the offline driver keeps it in `.tokens`).
"""

from __future__ import annotations

import functools
import itertools
import logging
import threading

import jax
import jax.numpy as jnp
import numpy as np

import tseeds_jax.sampling.core as core
from tseeds_jax.sampling.driver import cast_params, split_model
from tseeds_jax.sampling.jetstream_compat import engine_api, tokenizer_api, tokenizer_pb2
from tseeds_jax.sampling.strategies import Greedy

BOS_SENTINEL = -1  # what our tokenizer reports as BOS; prefill drops one leading sentinel
TOKENIZER_PATH = "tseeds:token-ids"  # TokenizerParameters.path of our (id-only) tokenizer


@functools.partial(jax.jit, static_argnames=("graphdef", "strategy", "stop_tokens"),
                   donate_argnames=("state",))
def _generate(graphdef, strategy, stop_tokens, params, state):
    """One step; the emitted tokens packed as JetStream's [B, tokens | valid | lengths]."""
    core.TRACE_COUNTS["step"] += 1
    state, em = core._step(core.merge(graphdef, params), strategy, stop_tokens, state)
    data = jnp.stack([em.token_B, em.valid_B.astype(jnp.int32), em.count_B], axis=1)
    return state, data


class TokenIdTokenizer(tokenizer_api.Tokenizer):
    """A tokenizer for token-id requests only; text in gets an invalid id (the request fails)."""

    def __init__(self, stop_tokens=()):
        self._stop = set(int(t) for t in stop_tokens)

    def encode(self, s, **kwargs):
        logging.warning("tseeds serve: text request refused (send token ids)")
        return np.asarray([-2], np.int32), 1

    def decode(self, token_ids, **kwargs) -> str:
        return " ".join(str(t) for t in token_ids)

    @property
    def pad_id(self) -> int:
        return 0

    @property
    def eos_id(self) -> int:
        return min(self._stop) if self._stop else -1

    @property
    def bos_id(self) -> int:
        return BOS_SENTINEL

    @property
    def stop_tokens(self) -> set[int]:
        return set(self._stop)


class TSeedsEngine(engine_api.Engine):
    """Engine for a `Transformer` (or `(graphdef, params)`) on one device.

    max_concurrent_decodes: decode slots B. max_prefill_length: longest prompt (a power of two
    >= 16: JetStream pads to {16, 32, ...} up to it). max_new_tokens: tokens a slot may emit
    (sets the cache length). strategy: a `strategies` dataclass (default greedy). seed: request
    i (in prefill order) samples with fold_in(PRNGKey(seed), i).
    """

    def __init__(self, model, *, max_concurrent_decodes: int = 8, max_prefill_length: int = 256,
                 max_new_tokens: int = 256, strategy=None, stop_tokens=(), seed: int = 0,
                 param_dtype=None, device=None, tokenizer=None):
        """tokenizer: a `sampling.text.TextTokenizer` to serve text requests (None: token ids
        only)."""
        if max_prefill_length < 16 or max_prefill_length & (max_prefill_length - 1):
            raise ValueError(f"max_prefill_length={max_prefill_length}: JetStream needs a power "
                             "of two >= 16")
        for name, v in (("max_concurrent_decodes", max_concurrent_decodes),
                        ("max_new_tokens", max_new_tokens)):
            if not isinstance(v, int) or v <= 0:
                raise ValueError(f"{name}={v!r}: must be a positive integer")
        graphdef, params = split_model(model)
        self._device = device or jax.devices()[0]
        params = jax.device_put(params, self._device)
        self._params = cast_params(params, param_dtype) if param_dtype else params
        self._graphdef = graphdef
        self._cfg = core.merge(graphdef, self._params).cfg
        self._slots = max_concurrent_decodes
        self._max_prefill = max_prefill_length
        self._max_new = max_new_tokens
        self._cache_len = core.cache_bucket(max_prefill_length + max_new_tokens)
        self._strategy = strategy or Greedy()
        self._stop = tuple(sorted({int(t) for t in stop_tokens}))
        self._base_key = jax.random.PRNGKey(seed)
        self._counter = itertools.count()
        self._lock = threading.Lock()
        self._mesh = jax.sharding.Mesh(np.asarray([self._device]), ("data",))
        self._tokenizer = tokenizer

    # ---- parameters and state ----
    def load_params(self, *args, **kwargs):
        """The parameter pytree given at construction (pass a new one to prefill/generate to
        update weights)."""
        return self._params

    def init_decode_state(self, *args, **kwargs) -> core.DecodeState:
        with jax.default_device(self._device):
            return core.DecodeState.init(self._cfg, self._slots, self._cache_len)

    # ---- prefill / insert / generate ----
    def _request_key(self):
        with self._lock:
            i = next(self._counter)
        return np.asarray(jax.random.fold_in(self._base_key, i))[None]

    def _problem(self, tokens: np.ndarray, true_length: int, padded_len: int) -> str | None:
        if true_length > padded_len:
            return f"prompt longer than max_prefill_length={self._max_prefill}"
        if tokens.size == 0:
            return "empty prompt"
        bad = (tokens < 0) | (tokens >= self._cfg.vocab_size)
        if bad.any():
            return f"token id {int(tokens[bad][0])} outside the vocabulary [0, " \
                   f"{self._cfg.vocab_size})"
        return None

    def prefill(self, *, params, existing_prefix=None, padded_tokens, true_length: int):
        """Prefix (KV + first sampled token) for one right-padded token sequence."""
        if existing_prefix is not None:
            raise NotImplementedError("existing_prefix: prefix caching is not supported")
        padded = np.asarray(padded_tokens)
        tokens = padded[:min(int(true_length), padded.size)]
        if tokens.size and tokens[0] == BOS_SENTINEL:
            tokens = tokens[1:]
        problem = self._problem(tokens, int(true_length), padded.size)
        if problem:
            logging.warning("tseeds engine: request refused: %s", problem)
        n = 1 if problem else tokens.size
        t = core.prefill_bucket(n, self._max_prefill)
        row = np.zeros((1, t), np.int32)
        if not problem:
            row[0, :n] = tokens
        with jax.default_device(self._device):
            return core.prefill(self._graphdef, self._strategy, params, row,
                                np.asarray([n], np.int32), self._request_key(),
                                np.asarray([self._max_new], np.int32),
                                np.asarray([problem is not None]))

    def insert(self, prefix, decode_state, slot: int):
        return core.insert(prefix, decode_state, jnp.asarray([slot], jnp.int32))

    def generate(self, params, decode_state):
        state, data = _generate(self._graphdef, self._strategy, self._stop, params, decode_state)
        return state, engine_api.ResultTokens(data=data, tokens_idx=(0, 1), valid_idx=(1, 2),
                                              length_idx=(2, 3), samples_per_slot=1)

    # ---- metadata ----
    def get_prefix_destination_sharding(self):
        return jax.sharding.SingleDeviceSharding(self._device)

    def get_tokenizer(self):
        return tokenizer_pb2.TokenizerParameters(path=TOKENIZER_PATH)

    def build_tokenizer(self, metadata):
        return self._tokenizer if self._tokenizer is not None else TokenIdTokenizer(self._stop)

    @property
    def max_concurrent_decodes(self) -> int:
        return self._slots

    @property
    def samples_per_slot(self) -> int:
        return 1

    @property
    def max_prefill_length(self) -> int:
        return self._max_prefill

    @property
    def mesh(self):
        return self._mesh

    @property
    def colocated_cpus(self):
        return None
