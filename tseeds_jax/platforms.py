"""Which JAX platform a `tseeds` command starts on, decided before JAX is imported.

With the TPU extra installed (libtpu), importing JAX's TPU kernels loads libtpu, which on a
machine without a TPU prints its initialisation errors (`TPU_ACCELERATOR_TYPE`,
`TPU_WORKER_HOSTNAMES`, an `E0000 ... INVALID_ARGUMENT` line) before every CPU command: noise
that reads like a failure. `choose_platform` sets JAX_PLATFORMS=cpu when libtpu is installed and
no TPU is attached (no /dev/accel*, no numbered /dev/vfio group, no TPU environment variable)
and no GPU is there either, so libtpu is never probed. It changes nothing when JAX_PLATFORMS is
already set, when a TPU or a GPU is present, and for `tseeds compile` / `tseeds plan`, which ask
libtpu for TPU topologies from any machine.
"""

from __future__ import annotations

import glob
import importlib.util
import os

NEEDS_LIBTPU = ("compile", "plan")  # commands that use libtpu without a TPU attached
_TPU_ENV = ("TPU_NAME", "TPU_ACCELERATOR_TYPE", "TPU_WORKER_ID", "TPU_WORKER_HOSTNAMES",
            "CLOUD_TPU_TASK_ID")
_GPU_PLUGINS = ("jax_cuda12_plugin", "jax_cuda13_plugin", "jax_rocm60_plugin",
                "jax_rocm7_plugin")


def tpu_attached(dev: str = "/dev", env=None) -> bool:
    env = os.environ if env is None else env
    if glob.glob(os.path.join(dev, "accel*")):  # TPU v2-v5e chips
        return True
    vfio = os.path.join(dev, "vfio")
    if os.path.isdir(vfio) and any(n.isdigit() for n in os.listdir(vfio)):  # v5p, v6e
        return True
    return any(env.get(k) for k in _TPU_ENV)


def _installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def gpu_usable(dev: str = "/dev") -> bool:
    return any(_installed(p) for p in _GPU_PLUGINS) and bool(
        glob.glob(os.path.join(dev, "nvidia[0-9]*")) or os.path.exists(os.path.join(dev, "kfd")))


def choose_platform(command: str, env=None, dev: str = "/dev") -> str | None:
    """Sets env["JAX_PLATFORMS"] = "cpu" where libtpu would only print errors; returns what it
    set (None: left as it was)."""
    env = os.environ if env is None else env
    if command in NEEDS_LIBTPU or "JAX_PLATFORMS" in env or not _installed("libtpu"):
        return None
    if tpu_attached(dev, env) or gpu_usable(dev):
        return None
    env["JAX_PLATFORMS"] = "cpu"
    return "cpu"
