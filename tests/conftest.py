"""Test-wide settings: 8 emulated CPU devices (sharding tests), float32 matmuls at full precision."""

import os

# Must be set before JAX initialises its backends.
os.environ.setdefault("XLA_FLAGS", "")
if "xla_force_host_platform_device_count" not in os.environ["XLA_FLAGS"]:
    os.environ["XLA_FLAGS"] += " --xla_force_host_platform_device_count=8"
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402

jax.config.update("jax_default_matmul_precision", "highest")

import gc  # noqa: E402

import pytest  # noqa: E402


@pytest.fixture(autouse=True, scope="module")
def _free_compiled_code():
    """Drops JAX's compiled executables after each test module. Every executable keeps a few
    memory mappings alive for the life of the jitted function's cache; over the whole suite in
    one process they passed Linux's default limit of 65530 mappings per process, and XLA then
    crashed (segfault) while compiling. Two test files alone held ~9,500 mappings."""
    yield
    jax.clear_caches()
    gc.collect()


def pytest_xdist_auto_num_workers(config):
    """`-n auto`: one worker per CPU, at most 4. A file's tests stay on one worker (`--dist
    loadfile`): module fixtures, sandbox users and coordinator ports are per file. Each worker
    holds its own JAX runtime (~1-2 GB), so many-core machines would gain little beyond 4 and
    risk memory."""
    return max(1, min(4, len(os.sched_getaffinity(0))))
