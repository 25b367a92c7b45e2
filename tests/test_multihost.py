"""Two processes on localhost (jax.distributed, CPU/gloo) train like one process with the same
global batch: with a host-local sampler replica, and with the sampler on the learner's parameters
sharded over both processes (hardware.sampler_placement="sharded"). SIGTERM to one of them stops
both at the same step, with a checkpoint (rl/run/preemption.py)."""

import json
import os
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from tests.xla_env import child_xla_flags

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TSEEDS_", "XLA_"))}
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env["XLA_FLAGS"] = child_xla_flags()  # the worker adds its device count
    env.update(extra)
    return env


def _worker(out, run_dir, spec=None, **env):
    args = [sys.executable, "-m", "tests.multihost_worker", str(out), str(run_dir)]
    if spec is not None:
        args.append(json.dumps(spec))
    return subprocess.Popen(args, cwd=ROOT, env=_env(**env), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def _run(tmp_path, name, processes, spec=None):
    """Runs one training run as `processes` processes; (npz of process 0, [stdout per process])."""
    if processes == 1:
        procs = [_worker(tmp_path / f"{name}.npz", tmp_path / name, spec)]
    else:
        port = _free_port()
        procs = [_worker(tmp_path / f"{name}.npz", tmp_path / f"{name}{i}", spec,
                         TSEEDS_NUM_PROCESSES=str(processes), TSEEDS_PROCESS_ID=str(i),
                         TSEEDS_COORDINATOR_ADDRESS=f"127.0.0.1:{port}")
                 for i in range(processes)]
    outs = [p.communicate(timeout=900)[0] for p in procs]
    for p, out in zip(procs, outs):
        assert p.returncode == 0, out[-3000:]
    assert f"done {processes - 1} {processes}" in outs[-1]
    return np.load(tmp_path / f"{name}.npz"), outs


def _stats(out):
    line = next(x for x in out.splitlines() if x.startswith("stats "))
    return json.loads(line[len("stats "):])


def _assert_same_run(a, b, what):
    assert sorted(a.files) == sorted(b.files), what
    np.testing.assert_array_equal(a["reward"], b["reward"], err_msg=what)  # same rollouts
    assert np.any(a["loss"] != 0)
    for k in a.files:
        np.testing.assert_allclose(b[k], a[k], rtol=1e-5, atol=1e-6, err_msg=f"{what}: {k}")


@pytest.mark.slow
def test_two_processes_match_one_process(tmp_path):
    single, _ = _run(tmp_path, "single", 1)
    multi, _ = _run(tmp_path, "multi", 2)
    _assert_same_run(single, multi, "replica, 2 processes")


# Partial rollouts (rl/rollout/pool.py) with the base run's refresh cycle: each host keeps its share of
# every batch's groups in its own pool; the sampler's request indices are global, so the hosts
# decode what one process decodes. Interruption off: with a host-local sampler each host would
# stop its interruptible requests when its own last due one ends (one process: the last of all).
PARTIAL = {"overrides": {"stale.partial_tokens": 6, "stale.max_staleness": 1,
                         "stale.partial_interrupt": False, "steps": 4}}


@pytest.mark.manual  # ~3 min; CI keeps the overlapped run below and the pools' unit test
def test_two_processes_partial_rollouts_match_one_process(tmp_path):
    single, _ = _run(tmp_path, "single", 1, PARTIAL)
    multi, outs = _run(tmp_path, "multi", 2, PARTIAL)
    _assert_same_run(single, multi, "partial rollouts, 2 processes")
    stats = [_stats(o) for o in outs]
    assert stats[0]["partial"] == stats[1]["partial"]  # the pool metrics, merged over hosts
    assert max(stats[0]["partial"]["group_staleness_max"]) == 2  # a seed from a step-early refresh
    assert stats[0]["partial"]["partial_groups_in_flight"][0] > 0


# Generation overlapped with the update (stale.overlap) behind M2PO's lag, with partial rollouts:
# the worker thread makes no collective call (host-local sampler and statistics; the batch-wide
# statistics of a generated batch are gathered by the main thread before the next worker starts).
OVERLAP = {"overrides": {"seeds.refresh_interval": 1, "stale.steps": 1, "stale.overlap": True,
                         "stale.partial_tokens": 6, "stale.max_staleness": 2,
                         "stale.partial_interrupt": False, "steps": 4}}


@pytest.mark.slow  # ~35 s
def test_two_processes_overlapped_generation_match_one_process(tmp_path):
    single, _ = _run(tmp_path, "single", 1, OVERLAP)
    multi, outs = _run(tmp_path, "multi", 2, OVERLAP)
    _assert_same_run(single, multi, "overlap + partial rollouts, 2 processes")
    stats = [_stats(o) for o in outs]
    assert stats[0]["partial"] == stats[1]["partial"]
    assert max(stats[0]["partial"]["group_staleness_max"]) == 2


# The peer restart methods on several hosts (rl/methods/prefix.py, branch.py): every host draws
# the whole batch and keeps its share; PrefixRL's pool is sampled by share and gathered; FR3E's
# anchors come from one stream over every host's first-pass rollouts.
def _restart(method):
    from tseeds_jax.rl.config.methods import overrides

    return {"overrides": {**overrides(method), "restart.pool_prompts": 4, "steps": 3}}


@pytest.mark.slow  # ~40 s
def test_two_processes_branch_from_the_anchors_one_process_draws(tmp_path):
    single, _ = _run(tmp_path, "single", 1, _restart("fr3e"))
    multi, _ = _run(tmp_path, "multi", 2, _restart("fr3e"))
    _assert_same_run(single, multi, "FR3E, 2 processes")


@pytest.mark.manual  # ~2 min
@pytest.mark.parametrize("method", ["prefixrl", "questa", "cure"])
def test_two_processes_restart_method_matches_one_process(tmp_path, method):
    single, _ = _run(tmp_path, "single", 1, _restart(method))
    multi, _ = _run(tmp_path, "multi", 2, _restart(method))
    _assert_same_run(single, multi, f"{method}, 2 processes")


def _run_shared(tmp_path, name, spec):
    """Two processes on one run dir (as a gs:// run root on a pod); the npz of process 0."""
    port = _free_port()
    procs = [_worker(tmp_path / f"{name}.npz", tmp_path / "shared", spec,
                     TSEEDS_NUM_PROCESSES="2", TSEEDS_PROCESS_ID=str(i),
                     TSEEDS_COORDINATOR_ADDRESS=f"127.0.0.1:{port}") for i in range(2)]
    outs = [p.communicate(timeout=900)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[-3000:] for o in outs]
    return np.load(tmp_path / f"{name}.npz")


@pytest.mark.manual  # ~2 min
def test_two_processes_resume_with_partial_rollouts_in_flight(tmp_path):
    """Each host's pool (responses in flight, their versions and log-probs) and seed cache are
    saved beside the checkpoint and restored: 2 + 2 steps train what 4 steps do."""
    base = {**PARTIAL["overrides"], "checkpoint_every": 1}
    full = _run_shared(tmp_path / "a", "full", {"checkpoints": True, "overrides": base})
    _run_shared(tmp_path / "b", "half", {"checkpoints": True, "overrides": {**base, "steps": 2}})
    saved = tmp_path / "b" / "shared" / "seed_cache" / "2" / "host-0001.extra.json"
    assert json.loads(saved.read_text())["partial"]["references"]  # groups in flight on host 1
    resumed = _run_shared(tmp_path / "b", "resumed", {"checkpoints": True, "resume": True,
                                                      "overrides": base})
    for k in full.files:
        if k.isdigit():  # parameters (the metrics of the resumed run start at step 2)
            np.testing.assert_array_equal(resumed[k], full[k], err_msg=k)


# Both processes' 4 CPU devices in one (data 2, fsdp 2, tensor 2) mesh: the batch axes split
# across the processes, so the sampler's decode slots, the statistics chunks and the update each
# span both. Dynamic sampling (a reward that gives half the prompts all-equal groups) runs top-up
# rounds, at most 2 (a step may end short of a full batch); refresh_interval 2 (base run) trains
# a refresh step and a seeded step.
SHARDED = {"devices": 4, "reward": "half_parity",
           "overrides": {"mesh.data": 2, "mesh.fsdp": 2, "mesh.tensor": 2,
                         "optim.micro_batch_size": 2, "advantage.filter_groups": True,
                         "advantage.max_gen_batches": 2, "hardware.sampler_placement": "sharded"}}


@pytest.mark.manual  # ~160 s; CI keeps test_two_processes_match_one_process (CI time)
def test_two_processes_sharded_sampler_match_one_process(tmp_path):
    single, _ = _run(tmp_path, "single", 1, {**SHARDED, "devices": 8})
    multi, outs = _run(tmp_path, "multi", 2, SHARDED)
    # The decode layout (tensor-parallel pairs within each process, replicas across both):
    # sampling spans the processes on its own mesh, statistics and update on the learner's.
    decode_spec = {**SHARDED, "overrides": {**SHARDED["overrides"],
                                            "hardware.sampler_placement": "decode",
                                            "hardware.sampler_tensor": 2}}
    decode, decode_outs = _run(tmp_path, "decode", 2, decode_spec)
    _assert_same_run(single, multi, "sharded, 2 processes")
    _assert_same_run(single, decode, "decode layout, 2 processes")
    dstats = _stats(decode_outs[0])
    assert dstats["gathered_sample_calls"] > 0 and dstats["weight_syncs"] > 0, dstats
    stats = [_stats(o) for o in outs]
    assert stats[0] == stats[1]  # both hosts took the same collective paths
    stats = stats[0]
    assert stats["mesh"] == {"data": 2, "fsdp": 2, "tensor": 2}
    assert stats["gathered_sample_calls"] > 0 and stats["global_stats_reads"] > 0, stats
    assert stats["seed_length"][1] > 0, stats  # step 1 trained seeded samples
    assert max(stats["gen_rounds"]) > 1, stats  # a top-up round ran
    assert stats["moved_samples"] > 0, stats  # the hosts kept unequal shares: rebalanced
    # A step short of a full batch after max_gen_batches rounds: the last host's block is
    # padding rows (statistics chunks padded to the longest host).
    assert np.any(single["kept_groups"] < 2), single["kept_groups"]


@pytest.mark.manual  # ~4 min; CI keeps the replica run above (CI time)
def test_two_processes_partial_rollouts_sharded_sampler_match_one_process(tmp_path):
    """The sampler and the statistics pass span both processes: every host makes the same
    sampler calls (`any_host` agrees on each extra one; a host without requests joins with none),
    interruption is decided over all hosts' requests (`gathered_sample_fn(interruptible=)`), as
    in one process."""
    over = {**SHARDED["overrides"], **PARTIAL["overrides"], "stale.partial_interrupt": True,
            "advantage.filter_groups": False}
    spec = {**SHARDED, "overrides": over}
    single, _ = _run(tmp_path, "single", 1, {**spec, "devices": 8})
    multi, outs = _run(tmp_path, "multi", 2, spec)
    _assert_same_run(single, multi, "partial rollouts, sharded sampler, 2 processes")
    stats = [_stats(o) for o in outs]
    assert stats[0] == stats[1] and stats[0]["gathered_sample_calls"] > 0, stats


@pytest.mark.manual  # ~35 s; test_preemption.py checks the agreement in one process (CI time)
def test_sigterm_to_one_host_stops_both_at_the_same_step(tmp_path):
    port = _free_port()
    spec = {"checkpoints": True, "overrides": {"steps": 12, "checkpoint_every_minutes": 0.0}}
    # one run dir for both, as a gs:// run root is on a pod
    procs = [_worker(tmp_path / "m.npz", tmp_path / "m", spec, TSEEDS_NUM_PROCESSES="2",
                     TSEEDS_PROCESS_ID=str(i), TSEEDS_COORDINATOR_ADDRESS=f"127.0.0.1:{port}")
             for i in range(2)]
    metrics = tmp_path / "m" / "metrics.jsonl"  # process 0 writes the metrics
    deadline = time.monotonic() + 600
    while not (metrics.exists() and len(metrics.read_text().splitlines()) >= 2):
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs)
        time.sleep(0.05)
    procs[1].send_signal(signal.SIGTERM)  # only host 1 is told
    outs = [p.communicate(timeout=600)[0] for p in procs]
    assert [p.returncode for p in procs] == [75, 75], [o[-2000:] for o in outs]
    steps = [int(next(x for x in o.splitlines() if x.startswith("preempted ")).split()[1])
             for o in outs]
    assert steps[0] == steps[1] and 2 <= steps[0] < 12, steps
    step = steps[0]
    # the Orbax step (committed by process 0) and each host's own seed-cache file
    assert (tmp_path / "m" / "ckpt" / str(step) / "commit_success.txt").exists()
    for i in range(2):
        assert (tmp_path / "m" / "seed_cache" / str(step) / f"host-000{i}.npz").exists()
    assert len(metrics.read_text().splitlines()) == step
