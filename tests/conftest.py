"""Test-wide settings: 8 emulated CPU devices (sharding tests), float32 matmuls at full precision."""

import os

# Must be set before JAX initialises its backends.
os.environ.setdefault("XLA_FLAGS", "")
if "xla_force_host_platform_device_count" not in os.environ["XLA_FLAGS"]:
    os.environ["XLA_FLAGS"] += " --xla_force_host_platform_device_count=8"
# The suite compiles thousands of small CPU programs, and compiling them was most of its time:
# tests/xla_env.py's flags (no LLVM optimisation passes, the older fusion emitters) compile a
# trainer test in about a quarter of the default time (docs/decisions.md). XLA's own HLO passes
# (fusion, layout, sharding) still run; the programs' numbers are checked against the same
# references with the same tolerances. Child processes get the flags from
# `tests.xla_env.child_xla_flags`. Tests marked `default_codegen` (a check whose exactness holds
# for the default machine code) run again in a process of their own without them
# (`pytest_pyfunc_call` below).
from tests.xla_env import FAST_CODEGEN  # noqa: E402

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


# The files that take longest (seconds of one worker on the 2-core CI machine, measured with
# `--durations=0` in December 2026), heaviest first. xdist hands out whole files (`--dist
# loadfile`) in collection order (`--no-loadscope-reorder`): sent first, they run side by side
# and the suite ends on short files, not on one worker still running a 3-minute file while the
# other waits. A stale list costs minutes, never a result.
HEAVY_FILES = ("test_demo.py", "test_multihost.py", "test_wheel_install.py", "test_grad_accum.py",
               "test_preemption_kill.py", "test_doc_commands.py", "test_family_trainer.py",
               "test_grading_integrity.py", "test_compile_tpu.py", "test_lora_resume.py",
               "test_sandbox.py", "test_async_preemption.py", "test_kv_int8.py", "test_lora.py",
               "test_sampling_sharded.py", "test_grading_issue45.py", "test_attention_tpu.py",
               "test_async_trainer.py", "test_routes.py", "test_train_cli.py", "test_plan.py",
               "test_grading_contract.py", "test_run_identity.py", "test_export.py",
               "test_packing.py")


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(HEAVY_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(HEAVY_FILES)))  # stable
