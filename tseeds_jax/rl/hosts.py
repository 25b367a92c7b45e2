"""Multi-host plumbing: process layout, host-local <-> global arrays, and the distributed init.

JAX's own multi-host SPMD: every process runs the same program; each owns a contiguous slice of
every batch (prompts, rollouts, rewards stay on their host), and only the learner update sees the
global batch, as one array sharded over the mesh's batch axes. Sampling and the learner's
per-sequence statistics run on a host-local replica of the parameters
(`hardware.sampler_placement="replica"`), or on the learner's sharded parameters over the whole
mesh ("sharded"; single-host meshes only, see `sampler_params`).
"""

from __future__ import annotations

import dataclasses
import logging
import os

import jax
import numpy as np
from jax.experimental import multihost_utils

log = logging.getLogger(__name__)


def maybe_initialize_distributed() -> bool:
    """Calls `jax.distributed.initialize()` when this is one process of several; True if it did.

    Explicit: TSEEDS_COORDINATOR_ADDRESS, TSEEDS_NUM_PROCESSES, TSEEDS_PROCESS_ID (CPU/GPU
    clusters, tests). On Cloud TPU pods (TPU_WORKER_HOSTNAMES lists several workers) JAX finds
    everything itself.
    """
    if jax.distributed.is_initialized():
        return True
    n = int(os.environ.get("TSEEDS_NUM_PROCESSES", "1"))
    if n > 1:
        # Cross-process collectives on the CPU backend (tests, CPU clusters); no effect elsewhere.
        # Must not touch the backend here: initialize() has to come first.
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(coordinator_address=os.environ["TSEEDS_COORDINATOR_ADDRESS"],
                                   num_processes=n,
                                   process_id=int(os.environ["TSEEDS_PROCESS_ID"]))
        return True
    workers = os.environ.get("TPU_WORKER_HOSTNAMES", "")
    if "," in workers:
        jax.distributed.initialize()
        return True
    return False


@dataclasses.dataclass(frozen=True)
class Hosts:
    index: int
    count: int

    @classmethod
    def current(cls) -> Hosts:
        return cls(jax.process_index(), jax.process_count())

    def slice(self, n: int, what: str) -> slice:
        if n % self.count:
            raise ValueError(f"{what}={n} is not divisible by the {self.count} processes")
        per = n // self.count
        return slice(self.index * per, (self.index + 1) * per)

    @property
    def single(self) -> bool:
        return self.count == 1


def local_replica(tree, device=None):
    """The full values of `tree` on one local device (gathers across hosts when needed)."""
    device = device or jax.local_devices()[0]

    def one(x):
        if isinstance(x, jax.Array) and not x.is_fully_addressable:
            if x.is_fully_replicated:
                x = x.addressable_data(0)
            else:
                x = multihost_utils.process_allgather(x, tiled=True)
        return jax.device_put(x, device)

    return jax.tree_util.tree_map(one, tree)


def check_sampler_placement(placement: str, hosts: Hosts) -> None:
    """Raises ConfigValueError when `placement` cannot run on this process layout."""
    from tseeds_jax.rl.config import SAMPLER_PLACEMENTS, ConfigValueError

    if placement not in SAMPLER_PLACEMENTS:
        raise ConfigValueError(f"config.hardware.sampler_placement={placement!r}: known: "
                               f"{SAMPLER_PLACEMENTS}")
    if placement == "sharded" and not hosts.single:
        # Sharded sampling needs every process to run the same driver loop on the same global
        # request list, and the statistics passes global token arrays; the rollout code keeps
        # each host's requests local, so this is not wired up yet.
        raise ConfigValueError(
            f"config.hardware.sampler_placement={placement!r}: sharded sampling runs on "
            f"single-host meshes only; this run has {hosts.count} processes (use 'replica')")


def sampler_params(params, placement: str, hosts: Hosts):
    """The parameters that sampling and the per-sequence statistics run with: a host-local full
    replica ("replica"), or `params` as they are, sharded over the mesh ("sharded": no gather,
    no copy; the sampler places its KV cache on the same mesh)."""
    check_sampler_placement(placement, hosts)
    return params if placement == "sharded" else local_replica(params)


def to_global(tree, mesh, hosts: Hosts):
    """Host-local row blocks -> global arrays split over the mesh's batch axes (rows concatenated
    in process order). None leaves (unused optional fields) stay None."""
    from tseeds_jax.model.sharding import batch_sharding

    def one(x):
        x = np.asarray(x)
        shape = (x.shape[0] * hosts.count,) + x.shape[1:]
        return jax.make_array_from_process_local_data(batch_sharding(mesh, shape), x, shape)

    return jax.tree_util.tree_map(one, tree)


def gather_rows(x: np.ndarray, hosts: Hosts) -> np.ndarray:
    """Concatenates every host's rows of a host-local numpy array (process order)."""
    if hosts.single:
        return np.asarray(x)
    return np.asarray(multihost_utils.process_allgather(np.asarray(x), tiled=True))
