"""Multi-host plumbing: process layout, host-local <-> global arrays, and the distributed init.

JAX's own multi-host SPMD: every process runs the same program; each owns a contiguous slice of
every batch (prompts, rollouts, rewards stay on their host), and only the learner update sees the
global batch, as one array sharded over the mesh's batch axes. Sampling and the learner's
per-sequence statistics run on a host-local replica of the parameters
(`hardware.sampler_placement="replica"`), or on the learner's sharded parameters over the whole
mesh ("sharded", see `sampler_params`). Sharded on several processes, every device computes for
every host, so each collective step runs on all processes with the same global inputs:
  * sampling: `gathered_sample_fn` gathers every host's requests, all processes run the same
    global request list through the (deterministic) driver, each keeps its own results;
  * statistics passes: host-local rows become one global array (`to_global`), each host reads
    its rows of the result back (`local_rows`);
  * DAPO top-up rounds: the trainer loops while the hosts *together* keep too few groups, and
    `share_out` deals the kept groups out as one process drawing the whole batch would keep them.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import pickle

import jax
import numpy as np
from jax.experimental import multihost_utils

# Model / sampler modules are imported inside the functions: processes import this module first,
# for `maybe_initialize_distributed`, which must run before anything touches a JAX backend.

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


def check_sampler_placement(placement: str, hosts: Hosts, mesh=None) -> None:
    """Raises ConfigValueError when `placement` cannot run on this process layout (`mesh`: the
    learner's parameter mesh, when known)."""
    from tseeds_jax.rl.config.errors import ConfigValueError
    from tseeds_jax.rl.config.schema import SAMPLER_PLACEMENTS
    from tseeds_jax.sampling.placement import shards_of

    if placement not in SAMPLER_PLACEMENTS:
        raise ConfigValueError(f"config.hardware.sampler_placement={placement!r}: known: "
                               f"{SAMPLER_PLACEMENTS}")
    if placement in ("sharded", "decode") and not hosts.single and mesh is not None:
        # The statistics passes hand each host's rows to the mesh as its share of a global
        # array (`to_global`): every process must own whole row blocks of the batch axes.
        shards = shards_of(mesh, "batch")
        if shards % hosts.count:
            raise ConfigValueError(
                f"config.hardware.sampler_placement={placement!r}: on {hosts.count} processes "
                f"the mesh's batch axes (data x fsdp = {shards}) must be a multiple of the "
                f"process count (config.mesh={dict(mesh.shape)}; or use 'replica')")


def sampler_params(params, placement: str, hosts: Hosts):
    """The parameters that sampling and the per-sequence statistics run with: a host-local full
    replica ("replica"), or `params` as they are, sharded over the mesh ("sharded": no gather,
    no copy; the sampler places its KV cache on the same mesh; "decode": the same here, the
    sample function moves them into its decode layout, `sampling.layout.WeightSync`). The
    placement was checked once, when the trainer was built (`check_sampler_placement`)."""
    from tseeds_jax.sampling.placement import params_mesh

    if placement in ("sharded", "decode") and (hosts.single or params_mesh(params) is not None):
        return params
    # Fully replicated parameters on several processes (a data-only mesh): every device holds a
    # whole copy anyway, and the local one is free to take (no gather).
    return local_replica(params)


def spans_processes(tree) -> bool:
    """True when some array of `tree` has shards on other processes (collective code paths)."""
    return any(isinstance(x, jax.Array) and not x.is_fully_addressable
               for x in jax.tree_util.tree_leaves(tree))


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


def local_rows(x: jax.Array, mesh) -> np.ndarray:
    """This process's rows of a global array split over the mesh's batch axes: the inverse of
    `to_global` (the rows on this process's devices, in order; replicas read once)."""
    from tseeds_jax.model.sharding import batch_sharding

    if x.is_fully_addressable:
        return np.asarray(x)
    x = jax.device_put(x, batch_sharding(mesh, x.shape))  # no-op when already laid out so
    blocks = {}
    for shard in x.addressable_shards:
        blocks.setdefault(shard.index[0].start or 0, shard.data)
    return np.concatenate([np.asarray(blocks[k]) for k in sorted(blocks)])


def allgather_objects(obj, hosts: Hosts) -> list:
    """Every host's picklable `obj`, in process order. Collective: all processes call it."""
    if hosts.single:
        return [obj]
    data = np.frombuffer(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL), np.uint8)
    # int32 / uint8 only: without jax_enable_x64 a 64-bit array would be narrowed on the device.
    sizes = gather_rows(np.array([data.size], np.int32), hosts)
    buf_N = np.zeros(max(int(sizes.max()), 1), np.uint8)
    buf_N[: data.size] = data
    every_HN = np.asarray(multihost_utils.process_allgather(buf_N))  # stacked: [hosts, max]
    return [pickle.loads(every_HN[h, : int(n)].tobytes()) for h, n in enumerate(sizes)]


def gathered_sample_fn(sample_fn, hosts: Hosts):
    """`sample_fn` for parameters sharded over several processes: every device decodes for every
    host, so all processes must run the same driver loop on the same requests. The wrapper
    gathers every host's requests (with their global indices, which fix their random streams),
    runs the global list once, and returns this host's results. Collective: every process calls
    it, also with no requests of its own (`collective` tells `rollout.continue_samples`).

    seed: (stream seed, first global index | list of global indices), as `make_sample_fn`.
    interruptible: optional per-request flags (`sampling.generate`); the global call stops the
    interruptible requests of every host when the last other request ends."""

    def run(params, requests, budgets, seed, interruptible=None):
        kw = {"interruptible": interruptible} if interruptible is not None else {}
        if hosts.single or not spans_processes(params):
            return sample_fn(params, requests, budgets, seed, **kw) if requests else []
        if not isinstance(seed, tuple):
            raise ValueError("gathered_sample_fn: seed must be (stream, global index), so that "
                             "requests of different hosts keep distinct random streams")
        stream, where = seed
        index = (list(range(where, where + len(requests))) if isinstance(where, (int, np.integer))
                 else [int(i) for i in where])
        lengths_N = np.array([len(x) for x in requests], np.int64)
        flat = np.concatenate([np.asarray(x, np.int32) for x in requests] + [np.zeros(0, np.int32)])
        flags = [bool(x) for x in interruptible] if interruptible is not None else \
            [False] * len(requests)
        every = allgather_objects((int(stream), flat, lengths_N, [int(b) for b in budgets], index,
                                   flags), hosts)
        if len({e[0] for e in every}) != 1:
            raise RuntimeError(f"gathered_sample_fn: the hosts sample with different stream seeds "
                               f"{[e[0] for e in every]}; they must run the same step")
        all_requests, all_budgets, all_index, all_flags = [], [], [], []
        for _, flat_h, lengths_h, budgets_h, index_h, flags_h in every:
            ends = np.cumsum(lengths_h)
            all_requests += [flat_h[a:b].tolist() for a, b in zip(ends - lengths_h, ends)]
            all_budgets += budgets_h
            all_index += index_h
            all_flags += flags_h
        if not all_requests:
            return []
        kw = {"interruptible": all_flags} if any(all_flags) else {}
        results = sample_fn(params, all_requests, all_budgets, (stream, all_index), **kw)
        first = sum(len(e[2]) for e in every[: hosts.index])
        return results[first : first + len(requests)]

    run.collective = True
    return run


def share_out(rounds: list[list], counts: list[np.ndarray], quota: int, hosts: Hosts) -> list:
    """This host's `quota` items of what the hosts together kept over several rounds.

    rounds: this host's kept items per round; counts: per round, every host's count ([hosts]).
    The global order is round by round, host by host within a round (the order one process
    drawing every host's prompts keeps them in); its first `quota * hosts` items are dealt out in
    contiguous blocks of `quota`, so the global batch does not depend on the host count. Items
    that change hosts travel in one `allgather_objects`, skipped when none do (every host knows).
    """
    order = [(r, h, p) for r, c in enumerate(counts) for h in range(hosts.count)
             for p in range(int(c[h]))][: quota * hosts.count]
    me = hosts.index
    leaving = {i: rounds[r][p] for i, (r, h, p) in enumerate(order) if h == me and i // quota != me}
    arrived: dict = {}
    if any(h != i // quota for i, (_, h, _) in enumerate(order)):
        for part in allgather_objects(leaving, hosts):
            arrived.update(part)
    mine = range(me * quota, min((me + 1) * quota, len(order)))
    return [rounds[order[i][0]][order[i][2]] if order[i][1] == me else arrived[i] for i in mine]
