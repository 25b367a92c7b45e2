"""M2PO's lag (`stale.steps` = s): step k trains on the batch generated s steps earlier, and
`stale.overlap` generates it in a worker thread while the learner updates.

Batch j (prompts drawn in order, rollout stream of step j) is generated at step max(0, j - s) by
the parameters current then: at step 0 the queue is filled with batches 0..s (all by the initial
parameters), and every later step k generates batch k + s and trains on batch k. So s = 0 is
on-policy training exactly, and batches j >= s are s steps stale.

The ratio's denominator is the generating policy: each queued sample carries `old_logp`, the
learner's log-probs under the parameters that generated it (computed at generation time, as
the official M2PO code does; never the sampler's numbers), and for SIS the proposal's top-K.
The queue (samples, rewards, log-probs, per-batch info) is checkpointed with the run, so a resumed
run trains on exactly the batches the uninterrupted run would have.

Overlap (docs/async.md): with s >= 1 batch k + s is generated at step k by the parameters of
step k, and the update of step k trains batch k: neither needs the other's result, so `Lagged`
runs that generation in a worker thread while the learner updates, and `settle` joins it before
the step ends (checkpoints, metrics and preemption see the same state as without overlap). JAX
releases the GIL while a computation runs, so the sampler's host loop, the reward programs and
the learner's update proceed together. The update donates the state's buffers, so the worker
generates with its own copy of the parameters (`Policy`, `keeps_params`): one parameter copy
of memory, what a separate sampler replica costs.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from tseeds_jax.rl.rollout import samples as rollout
from tseeds_jax.rl.rollout.source import BatchSource, Policy, StepInfo
from tseeds_jax.rl.run.metrics import to_python


class StaleRollouts:
    """The queue of batches generated ahead: batch j -> (samples, StepInfo, step it was
    generated at)."""

    def __init__(self, steps: int):
        if not isinstance(steps, int) or steps < 0:
            raise ValueError(f"stale steps must be an integer >= 0, got {steps!r}")
        self.steps = steps
        self.queue: dict[int, tuple[list[rollout.Sample], StepInfo, int]] = {}

    def next_batch(self, collect: Callable, annotate: Callable, step: int, *,
                   defer: bool = False):
        """(samples, info, ahead) to train at `step`.

        collect(j) -> (samples, info) generates batch j with the parameters of `step`;
        annotate(samples) attaches the generating policy's log-probs (in place). defer: batch
        step + s is left for `ahead()` (None when it is queued already), a function that
        generates and queues it: the caller runs it while the learner updates (overlap).
        Batches are the same either way: batch j's prompts, random streams and parameters do not
        depend on when it is generated, and nothing else draws prompts meanwhile.
        """
        last = step + self.steps
        for j in range(step, last if defer else last + 1):
            if j not in self.queue:
                self._generate(collect, annotate, step, j)
        if step not in self.queue:
            raise KeyError(f"stale rollouts: no batch queued for step {step} "
                           f"(queued: {sorted(self.queue)})")
        samples, info, generated_at = self.queue.pop(step)
        info.metrics["stale_age"] = step - generated_at
        ahead = None
        if defer and last not in self.queue:
            def ahead():
                self._generate(collect, annotate, step, last)
        return samples, info, ahead

    def _generate(self, collect, annotate, step: int, j: int) -> None:
        samples, info = collect(j)
        annotate(samples)
        self.queue[j] = (samples, info, step)

    # ---- checkpointing ----
    def state(self) -> tuple[dict[str, Any], dict[str, Any]]:
        tree, meta = {}, {}
        for j, (samples, info, generated_at) in sorted(self.queue.items()):
            arrays, smeta = rollout.pack_samples(samples)
            tree[str(j)] = arrays
            meta[str(j)] = {"samples": smeta,
                            "info": to_python({**info.to_json(), "generated_at": generated_at})}
        return tree, meta

    def load(self, tree: dict[str, Any], meta: dict[str, Any]) -> None:
        self.queue = {}
        for key, m in meta.items():
            arrays = {k: np.asarray(v) for k, v in tree[key].items()}
            info = dict(m["info"])
            generated_at = int(info.pop("generated_at"))
            self.queue[int(key)] = (rollout.unpack_samples(arrays, m["samples"]),
                                    StepInfo.from_json(info), generated_at)


class Lagged(BatchSource):
    """M2PO's lag around a source: batch k comes from the queue, generated at step k - s by
    that step's policy and annotated with its log-probs (and proposal top-K) by the learner's
    hooks; with overlap, the generation of batch k + s runs in a worker thread from `next`
    until `settle`. Checkpoint key "stale"."""

    key = "stale"

    def __init__(self, inner: BatchSource, steps: int, *, overlap: bool, annotate: Callable,
                 finish):
        """annotate(params, samples): the learner's per-sample hooks; finish: the collection
        tail, whose batch-wide statistics a batch generated in the worker may have left."""
        self.inner, self.stale, self.overlap = inner, StaleRollouts(steps), overlap
        self.keeps_params = overlap
        self.annotate, self.finish = annotate, finish
        self.ahead = Ahead(None)

    def next(self, step: int, policy: Policy):
        samples, info, ahead = self.stale.next_batch(
            lambda j: self.inner.next(j, policy),
            lambda batch: self.annotate(policy.stats, batch), step, defer=self.overlap)
        if info.pending:  # before the worker starts: no collective call beside the update's
            self.finish.collective(samples, info, step)
        if self.overlap:  # batch step + s, generated while the learner updates
            self.ahead = Ahead(ahead)
        return samples, info

    def settle(self, *, reraise: bool = True) -> dict[str, float]:
        if not self.overlap:
            return {}
        waited = self.ahead.wait(reraise=reraise)
        # the worker's generation, and the part of it the step waited for
        return {"time_ahead": self.ahead.seconds, "time_ahead_wait": waited}

    def state(self):
        out = {self.key: self.stale.state()} if self.stale.queue else {}
        out.update(self.inner.state())
        return out

    def load(self, extra):
        self.stale.queue = {}
        tree, meta = extra.get(self.key, (None, None))
        if meta is not None:
            self.stale.load(tree, meta)
        self.inner.load(extra)


def snapshot(params):
    """A copy of `params` that the donating update cannot invalidate."""
    return jax.tree_util.tree_map(lambda x: x.copy() if isinstance(x, jax.Array) else x, params)


class Ahead:
    """Runs fn() in a thread from construction; `wait()` joins it (re-raising its error) and
    returns the seconds the caller waited. fn None: nothing to run."""

    def __init__(self, fn: Callable[[], None] | None):
        self.error: BaseException | None = None
        self.seconds = 0.0
        self.thread = None
        if fn is not None:
            self.thread = threading.Thread(target=self._run, args=(fn,), name="tseeds-ahead",
                                           daemon=True)
            self.thread.start()

    def _run(self, fn) -> None:
        t0 = time.perf_counter()
        try:
            fn()
        except BaseException as e:  # re-raised in the trainer's thread by wait()
            self.error = e
        self.seconds = time.perf_counter() - t0

    def wait(self, *, reraise: bool = True) -> float:
        if self.thread is None:
            return 0.0
        t0 = time.perf_counter()
        self.thread.join()
        waited = time.perf_counter() - t0
        self.thread = None
        if self.error is not None and reraise:
            raise RuntimeError("the generation overlapped with the update (stale.overlap) "
                               "failed") from self.error
        return waited
