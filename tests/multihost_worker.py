"""One process of the multi-host tests (run by tests/test_multihost.py, not collected by pytest).

argv: OUT_NPZ RUN_DIR [SPEC_JSON]. Multi-process settings come from TSEEDS_* environment
variables. SPEC_JSON (optional): {"devices": CPU devices of this process (default 1),
"overrides": config overrides on top of the base run below, "reward": "half_parity" (groups of
about half the prompts all score 0: DAPO dynamic sampling filters them and tops up),
"checkpoints": true (write checkpoints to RUN_DIR), "resume": true (restore the latest
checkpoint of RUN_DIR first), "write_latency_s": hold every checkpoint
write that long before its commit (tests/checkpoint_hooks.py)}.
Prints "done INDEX COUNT" and a "stats {...}" JSON line (diagnostics the npz does not compare).
Stopped by SIGTERM / SIGINT (rl/run/preemption.py): prints "preempted STEP" and exits with the
trainer's exit code (75 / 130).
"""

import json
import os
import sys
import zlib

SPEC = json.loads(sys.argv[3]) if len(sys.argv) > 3 else {}
from tests.xla_env import child_xla_flags  # noqa: E402

os.environ["XLA_FLAGS"] = child_xla_flags(SPEC.get("devices", 1))
os.environ["JAX_PLATFORMS"] = "cpu"

from tseeds_jax.rl.run.hosts import maybe_initialize_distributed  # noqa: E402

maybe_initialize_distributed()

import jax  # noqa: E402
import numpy as np  # noqa: E402

jax.config.update("jax_default_matmul_precision", "highest")

from tests.checkpoint_hooks import slow_commit  # noqa: E402
from tests.trainer_utils import parity_reward, tiny_trainer  # noqa: E402
from tseeds_jax.rl.run import hosts  # noqa: E402
from tseeds_jax.rl.run.preemption import Preempted  # noqa: E402


def half_parity_reward(texts, refs):
    """Parity for prompts whose reference hashes even, 0 for the others (whole groups of equal
    rewards: filtered by dynamic sampling). crc32, not hash(): the same in every process."""
    scores = parity_reward(texts, refs)
    return [s if zlib.crc32(str(ref).encode()) % 2 == 0 else (0.0, "constant")
            for s, ref in zip(scores, refs)]


def _count_collectives(counts):
    """Counts the collective paths of sharded sampling: samples `hosts.share_out` moves between
    hosts (its allgather of a dict), gathered sampler calls (an allgather of a tuple) and
    statistics chunks read back from global arrays (`hosts.local_rows`)."""
    real_gather, real_rows = hosts.allgather_objects, hosts.local_rows

    def gather(obj, h):
        out = real_gather(obj, h)
        if isinstance(obj, dict):
            counts["moved_samples"] += sum(len(part) for part in out)
        elif isinstance(obj, tuple):
            counts["gathered_sample_calls"] += 1
        return out

    def rows(x, mesh):
        counts["global_stats_reads"] += 1
        return real_rows(x, mesh)

    hosts.allgather_objects, hosts.local_rows = gather, rows


def main(out, run_dir):
    # optim.eps=1e-3: gradients are summed in a different order across processes; Adam's
    # g / (|g| + eps) would blow the float32 rounding of near-zero entries up to ~lr.
    over = {"seeds.refresh_interval": 2, "seeds.ratio": 0.5, "steps": 3, "optim.eps": 1e-3,
            **SPEC.get("overrides", {})}
    slow_commit(float(SPEC.get("write_latency_s", 0.0)))
    tr = tiny_trainer(run_dir, checkpoints=SPEC.get("checkpoints", False), **over)
    if SPEC.get("reward") == "half_parity":
        tr.env.reward_fn = half_parity_reward
    counts = dict.fromkeys(("moved_samples", "gathered_sample_calls", "global_stats_reads"), 0)
    _count_collectives(counts)
    if SPEC.get("resume"):
        assert tr.restore(), "resume: no checkpoint in the run dir"
    try:
        hist = tr.run()
    except Preempted as e:
        print("preempted", e.step, flush=True)
        sys.exit(e.exit_code)
    params = hosts.local_replica(tr.state.params)
    leaves = {str(i): np.asarray(x) for i, x in enumerate(jax.tree_util.tree_leaves(params))}
    for key in ("loss", "reward", "gen_rounds", "kept_groups"):
        if key in hist[0]:
            leaves[key] = np.array([float(m[key]) for m in hist])
    if jax.process_index() == 0:
        np.savez(out, **leaves)
    sync = getattr(tr.env.sample_fn, "weight_sync", None)
    stats = {**counts, "mesh": dict(tr.update.mesh.shape), "weight_syncs": sync.count if sync else 0,
             "gen_rounds": [m.get("gen_rounds", 1) for m in hist],
             "seed_length": [float(m["seed_length"]) for m in hist],
             "partial": {k: [float(m[k]) for m in hist] for k in
                         ("group_staleness_max", "partial_groups_in_flight",
                          "partial_decoded_tokens", "slot_occupancy", "token_share/seed")
                         if k in hist[0]}}
    print("stats", json.dumps(stats), flush=True)
    print("done", jax.process_index(), jax.process_count(), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
