"""Test-wide settings: 8 emulated CPU devices (sharding tests), float32 matmuls at full precision."""

import os

# Must be set before JAX initialises its backends.
os.environ.setdefault("XLA_FLAGS", "")
if "xla_force_host_platform_device_count" not in os.environ["XLA_FLAGS"]:
    os.environ["XLA_FLAGS"] += " --xla_force_host_platform_device_count=8"
# The suite compiles thousands of small CPU programs, and LLVM's optimisation passes were most of
# their compile time: without them a trainer test takes half as long (docs/decisions.md). XLA's
# own HLO passes (fusion, layout, sharding) still run; the programs' numbers are checked against
# the same references with the same tolerances. Subprocess tests inherit the flag. Tests marked
# `default_codegen` (a check whose tolerance was set for the default machine code) run again in
# a process of their own without it (`pytest_pyfunc_call` below).
FAST_CODEGEN = "--xla_backend_optimization_level=0"
if "xla_backend_optimization_level" not in os.environ["XLA_FLAGS"] and not os.environ.get(
        "TSEEDS_DEFAULT_CODEGEN"):
    os.environ["XLA_FLAGS"] += " " + FAST_CODEGEN
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


def pytest_configure(config):
    config.addinivalue_line("markers", "default_codegen: runs in its own process at XLA's default "
                            "CPU code generation (conftest.py)")


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    """A `default_codegen` test, in a suite process compiled without LLVM's passes, runs in a
    child pytest process at the default level instead (same test, same tolerances)."""
    if (pyfuncitem.get_closest_marker("default_codegen") is None
            or FAST_CODEGEN not in os.environ.get("XLA_FLAGS", "")):
        return None
    import subprocess
    import sys

    env = dict(os.environ, TSEEDS_DEFAULT_CODEGEN="1",
               XLA_FLAGS=os.environ["XLA_FLAGS"].replace(FAST_CODEGEN, ""))
    env.pop("PYTEST_XDIST_WORKER", None)
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:randomly",
                          pyfuncitem.nodeid], cwd=str(pyfuncitem.config.rootpath), env=env,
                         capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, (f"{pyfuncitem.nodeid} at the default code generation:\n"
                                 + (res.stdout + res.stderr)[-6000:])
    return True
