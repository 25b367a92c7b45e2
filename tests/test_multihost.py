"""Two processes on localhost (jax.distributed, CPU/gloo) train like one process with the same
global batch."""

import os
import socket
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TSEEDS_", "XLA_"))}
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra)
    return env


def _worker(out, run_dir, **env):
    return subprocess.Popen([sys.executable, "-m", "tests.multihost_worker", str(out), str(run_dir)],
                            cwd=ROOT, env=_env(**env), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


@pytest.mark.slow
def test_two_processes_match_one_process(tmp_path):
    single = _worker(tmp_path / "single.npz", tmp_path / "single")
    out_s, _ = single.communicate(timeout=600)
    assert single.returncode == 0, out_s[-3000:]

    port = _free_port()
    procs = [_worker(tmp_path / "multi.npz", tmp_path / f"multi{i}",
                     TSEEDS_NUM_PROCESSES="2", TSEEDS_PROCESS_ID=str(i),
                     TSEEDS_COORDINATOR_ADDRESS=f"127.0.0.1:{port}") for i in range(2)]
    outs = [p.communicate(timeout=600)[0] for p in procs]
    for p, out in zip(procs, outs):
        assert p.returncode == 0, out[-3000:]
    assert "done 1 2" in outs[1]

    a, b = np.load(tmp_path / "single.npz"), np.load(tmp_path / "multi.npz")
    assert sorted(a.files) == sorted(b.files)
    np.testing.assert_array_equal(a["reward"], b["reward"])  # same rollouts, host-split
    assert np.any(a["loss"] != 0)
    for k in a.files:
        np.testing.assert_allclose(b[k], a[k], rtol=1e-5, atol=1e-6, err_msg=k)
