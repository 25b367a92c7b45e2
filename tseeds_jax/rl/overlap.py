"""Generation overlapped with the update (`stale.overlap`, docs/async.md).

With M2PO's lag s >= 1 (rl/stale.py) batch k + s is generated at step k by the parameters of
step k, and the update of step k trains batch k: neither needs the other's result, so the
trainer runs the generation in a worker thread while the learner updates, and joins it before
the step ends (checkpoints, metrics and preemption see the same state as without overlap). JAX
releases the GIL while a computation runs, so the sampler's host loop, the reward programs and
the learner's update proceed together.

The update donates the state's buffers, so the worker generates with its own copy of the
parameters (`snapshot`): one parameter copy of memory, what a separate sampler replica costs.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import jax


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
