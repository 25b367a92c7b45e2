"""M2PO's stale-data setting: step k trains on the rollouts generated s steps earlier.

Batch j (prompts drawn in order, rollout stream of step j) is generated at step max(0, j - s) by
the parameters current then: at step 0 the queue is filled with batches 0..s (all by the initial
parameters), and every later step k generates batch k + s and trains on batch k. So s = 0 is
on-policy training exactly, and batches j >= s are s steps stale.

The ratio's denominator is the generating policy: each queued sample carries `old_logp`, the
learner's log-probs under the parameters that generated it (computed at generation time, as
the official M2PO code does; never the sampler's numbers), and for SIS the proposal's top-K.
The queue (samples, rewards, log-probs, per-batch info) is checkpointed with the run, so a resumed
run trains on exactly the batches the uninterrupted run would have.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from tseeds_jax.rl import rollout
from tseeds_jax.rl.metrics import to_python


class StaleRollouts:
    def __init__(self, steps: int):
        if not isinstance(steps, int) or steps < 0:
            raise ValueError(f"stale steps must be an integer >= 0, got {steps!r}")
        self.steps = steps
        self.queue: dict[int, tuple[list[rollout.Sample], dict[str, Any]]] = {}

    def next_batch(self, collect: Callable, annotate: Callable, sampler_params, params, step: int,
                   *, defer: bool = False):
        """(samples, info) to train at `step`; with `defer`, (samples, info, ahead).

        collect(sampler_params, j) -> (samples, info) generates batch j; annotate(params, samples)
        attaches the generating policy's log-probs (in place). defer: batch step + s is left for
        `ahead()` (None when it is queued already), a function that generates and queues it with
        these parameters: the trainer runs it while the learner updates (`stale.overlap`). Batches
        are the same either way: batch j's prompts, random streams and parameters do not depend
        on when it is generated, and nothing else draws prompts meanwhile.
        """
        last = step + self.steps
        for j in range(step, last if defer else last + 1):
            if j not in self.queue:
                self._generate(collect, annotate, sampler_params, params, step, j)
        if step not in self.queue:
            raise KeyError(f"stale rollouts: no batch queued for step {step} "
                           f"(queued: {sorted(self.queue)})")
        samples, info = self.queue.pop(step)
        info = dict(info)
        info["stale_age"] = step - info.pop("generated_at")
        if not defer:
            return samples, info
        ahead = None
        if last not in self.queue:
            def ahead():
                self._generate(collect, annotate, sampler_params, params, step, last)
        return samples, info, ahead

    def _generate(self, collect, annotate, sampler_params, params, step: int, j: int) -> None:
        samples, info = collect(sampler_params, j)
        annotate(params, samples)
        self.queue[j] = (samples, {**info, "generated_at": step})

    # ---- checkpointing ----
    def state(self) -> tuple[dict[str, Any], dict[str, Any]]:
        tree, meta = {}, {}
        for j, (samples, info) in sorted(self.queue.items()):
            arrays, smeta = rollout.pack_samples(samples)
            tree[str(j)] = arrays
            meta[str(j)] = {"samples": smeta, "info": to_python(info)}
        return tree, meta

    def load(self, tree: dict[str, Any], meta: dict[str, Any]) -> None:
        self.queue = {}
        for key, m in meta.items():
            arrays = {k: np.asarray(v) for k, v in tree[key].items()}
            self.queue[int(key)] = (rollout.unpack_samples(arrays, m["samples"]), dict(m["info"]))
