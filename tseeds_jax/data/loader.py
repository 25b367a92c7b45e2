"""Deterministic, shardable, resumable batches of examples from any random-access source.

A source is anything with `len()` and `src[i]` (and optionally `src.__getitems__(list)`):
`tfds_builder.ExampleSource`, `reasoning_gym_tasks.ReasoningGymSource`, a plain list.

Order: for epoch `e` the kept record indices are permuted by `numpy.random.default_rng([seed, e])`
(the same on every host), the permutation is cut to a multiple of `process_count` when
`drop_remainder` (so every host yields the same number of batches, as SPMD training needs; the
cut-off records differ per epoch), and host `p` takes positions `p, p + process_count, ...`. Hosts
therefore partition each epoch exactly. The stream of a host runs through epochs without gaps;
batches may straddle an epoch boundary. The position (epoch, offset into the host's epoch order)
is the whole state, a JSON-able dict, so resuming is exact.

We do not use grain's `DataLoader` here: its checkpoint is an opaque string and its sharding is a
fixed contiguous range per host, while we want a plain-dict state and a per-epoch global reshuffle
across hosts; the index arithmetic is a few lines of numpy.
"""

from __future__ import annotations

import logging
import zlib
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tseeds_jax.data.errors import OverlongPromptError

log = logging.getLogger(__name__)

STATE_VERSION = 1
_MAX_REPORTED = 20


class ExampleLoader:
    """Iterator over batches (lists of `batch_size` examples) for one host.

    Args:
      source: random-access examples.
      batch_size: examples per batch on this host.
      seed: shuffling seed (same on all hosts).
      shuffle: False keeps source order (still sharded and batched).
      num_epochs: None = endless; else stop after that many passes (the last batch may be short
        unless `drop_remainder`).
      process_index, process_count: this host and the number of hosts (jax.process_index() /
        jax.process_count() in multi-host runs).
      drop_remainder: equalise host shares per epoch and drop a short final batch.
      indices: the source indices to use (e.g. from `filter_prompt_lengths`); default all.
    """

    def __init__(self, source, *, batch_size: int, seed: int = 0, shuffle: bool = True,
                 num_epochs: int | None = None, process_index: int = 0, process_count: int = 1,
                 drop_remainder: bool = True, indices: Sequence[int] | np.ndarray | None = None):
        if not isinstance(batch_size, (int, np.integer)) or batch_size <= 0:
            raise ValueError(f"ExampleLoader: batch_size must be a positive int, got "
                             f"{batch_size!r}")
        if not isinstance(process_count, (int, np.integer)) or process_count <= 0:
            raise ValueError(f"ExampleLoader: process_count must be >= 1, got {process_count!r}")
        if not isinstance(process_index, (int, np.integer)) or not (
                0 <= process_index < process_count):
            raise ValueError(f"ExampleLoader: process_index={process_index!r} outside "
                             f"[0, process_count={process_count})")
        if num_epochs is not None and (not isinstance(num_epochs, int) or num_epochs <= 0):
            raise ValueError(f"ExampleLoader: num_epochs must be None or >= 1, got {num_epochs!r}")
        if not isinstance(seed, (int, np.integer)) or seed < 0:
            raise ValueError(f"ExampleLoader: seed must be a non-negative int, got {seed!r}")
        n = len(source)
        base = np.arange(n, dtype=np.int64) if indices is None else np.asarray(indices,
                                                                               dtype=np.int64)
        if base.ndim != 1 or (base.size and (base.min() < 0 or base.max() >= n)):
            raise ValueError(f"ExampleLoader: indices must be a 1-D list within [0, {n})")
        per_host = (base.size // process_count if drop_remainder
                    else len(range(process_index, base.size, process_count)))
        if per_host <= 0:
            raise ValueError(f"ExampleLoader: {base.size} usable examples cannot feed "
                             f"{process_count} hosts (host {process_index} would get none)")
        self._source, self._base = source, base
        self.batch_size, self.seed, self.shuffle = int(batch_size), int(seed), bool(shuffle)
        self.num_epochs, self.drop_remainder = num_epochs, bool(drop_remainder)
        self.process_index, self.process_count = int(process_index), int(process_count)
        self._epoch, self._position = 0, 0
        self._order_cache: tuple[int, np.ndarray] | None = None

    # --- order -------------------------------------------------------------------------------
    def epoch_order(self, epoch: int) -> np.ndarray:
        """Source indices this host visits in `epoch`, in order."""
        if self._order_cache is not None and self._order_cache[0] == epoch:
            return self._order_cache[1]
        order = self._base
        if self.shuffle:
            order = order[np.random.default_rng([self.seed, epoch]).permutation(order.size)]
        if self.drop_remainder:
            order = order[:order.size - order.size % self.process_count]
        order = order[self.process_index::self.process_count]
        self._order_cache = (epoch, order)
        return order

    @property
    def epoch(self) -> int:
        """The epoch the next example comes from."""
        return self._epoch

    @property
    def num_examples_per_epoch(self) -> int:
        return int(self.epoch_order(self._epoch).size)

    # --- iteration -----------------------------------------------------------------------------
    def __iter__(self):
        return self

    def __next__(self) -> list[dict[str, Any]]:
        picked: list[int] = []
        epoch, position = self._epoch, self._position
        while len(picked) < self.batch_size:
            if self.num_epochs is not None and epoch >= self.num_epochs:
                break
            order = self.epoch_order(epoch)
            take = order[position:position + self.batch_size - len(picked)]
            picked += take.tolist()
            position += take.size
            if position >= order.size:
                epoch, position = epoch + 1, 0
        if not picked or (len(picked) < self.batch_size and self.drop_remainder):
            self._epoch, self._position = epoch, position
            raise StopIteration
        self._epoch, self._position = epoch, position
        getitems = getattr(self._source, "__getitems__", None)
        return list(getitems(picked)) if getitems else [self._source[i] for i in picked]

    # --- checkpointing -------------------------------------------------------------------------
    def _identity(self) -> dict[str, Any]:
        return {"seed": self.seed, "shuffle": self.shuffle, "process_index": self.process_index,
                "process_count": self.process_count, "drop_remainder": self.drop_remainder,
                "num_records": int(self._base.size),
                "indices_crc32": zlib.crc32(self._base.tobytes())}

    def get_state(self) -> dict[str, Any]:
        """JSON-able position: restoring it with `set_state` continues exactly here."""
        return {"version": STATE_VERSION, "epoch": self._epoch, "position": self._position,
                **self._identity()}

    def set_state(self, state: dict[str, Any]) -> None:
        """Resume from `get_state()` output; ValueError if it belongs to a different stream
        (seed, sharding, data size) — batch_size may differ."""
        if not isinstance(state, dict):
            raise TypeError(f"set_state: state must be a dict, got {type(state).__name__}")
        if state.get("version") != STATE_VERSION:
            raise ValueError(f"set_state: state version {state.get('version')!r} != "
                             f"{STATE_VERSION}")
        mismatched = {k: (state.get(k), v) for k, v in self._identity().items()
                      if state.get(k) != v}
        if mismatched:
            raise ValueError(f"set_state: state is from another data stream; (saved, current) "
                             f"differ for {mismatched}")
        epoch, position = state.get("epoch"), state.get("position")
        if not isinstance(epoch, int) or epoch < 0 or not isinstance(position, int) or not (
                0 <= position < max(1, self.epoch_order(epoch).size)):
            raise ValueError(f"set_state: bad epoch/position {epoch!r}/{position!r}")
        self._epoch, self._position = epoch, position


def _iter_source(source, chunk: int = 1024):
    """(index, example) over a whole source, in chunks when it supports `__getitems__`."""
    getitems = getattr(source, "__getitems__", None)
    for start in range(0, len(source), chunk):
        idx = list(range(start, min(start + chunk, len(source))))
        yield from zip(idx, getitems(idx) if getitems else (source[i] for i in idx))


def filter_prompt_lengths(source, count_tokens: Callable[[str], int], max_prompt_tokens: int, *,
                          on_overlong: str = "skip") -> tuple[np.ndarray, dict[str, Any]]:
    """Indices of examples whose prompt has at most `max_prompt_tokens` tokens.

    `count_tokens`: prompt -> token count (e.g. `templates.prompt_token_counter(tok, "qwen_math")`,
    which counts the *formatted* prompt). `on_overlong`: "skip" drops and reports over-long
    prompts (log warning + report), "error" raises OverlongPromptError at the first one.
    Returns (indices, report) with report = {"total", "kept", "overlong", "max_prompt_tokens",
    "longest_kept", "overlong_examples": [{"id", "source", "tokens"}, ...] (first 20)}.
    """
    if on_overlong not in ("skip", "error"):
        raise ValueError(f"on_overlong must be 'skip' or 'error', got {on_overlong!r}")
    if not isinstance(max_prompt_tokens, int) or max_prompt_tokens <= 0:
        raise ValueError(f"max_prompt_tokens must be a positive int, got {max_prompt_tokens!r}")
    kept: list[int] = []
    over: list[dict[str, Any]] = []
    n_over, longest = 0, 0
    for i, ex in _iter_source(source):
        length = int(count_tokens(ex["prompt"]))
        if length <= max_prompt_tokens:
            kept.append(i)
            longest = max(longest, length)
            continue
        if on_overlong == "error":
            raise OverlongPromptError(
                f"example {ex['id']!r} (source {ex['source']!r}, index {i}) has a {length}-token "
                f"prompt > max_prompt_tokens={max_prompt_tokens}")
        n_over += 1
        if len(over) < _MAX_REPORTED:
            over.append({"id": ex["id"], "source": ex["source"], "tokens": length})
    report = {"total": len(source), "kept": len(kept), "overlong": n_over,
              "max_prompt_tokens": max_prompt_tokens, "longest_kept": longest,
              "overlong_examples": over}
    if n_over:
        log.warning("skipped %d of %d prompts longer than %d tokens, e.g. %s", n_over,
                    len(source), max_prompt_tokens, over[:3])
    return np.asarray(kept, dtype=np.int64), report
