"""XLA flags the suite compiles with, and the ones its child processes get (no JAX import here:
conftest.py reads this before JAX initialises)."""

import os

# Most of the suite's time is XLA compiling thousands of small CPU programs (docs/decisions.md):
# without LLVM's optimisation passes and with the older LLVM-IR fusion emitters instead of the
# MLIR-based ones, a trainer test compiles in about a quarter of the default time.
FAST_CODEGEN = "--xla_backend_optimization_level=0 --xla_cpu_use_fusion_emitters=false"


def child_xla_flags(devices: int | None = None) -> str:
    """XLA_FLAGS for a test's child process (a `tseeds` command, a host of a multi-host run):
    none of the suite's 8 emulated devices, `devices` CPU devices when given, and the suite's
    code generation, so a child compiles as fast as the test that starts it."""
    flags = [] if devices is None else [f"--xla_force_host_platform_device_count={devices}"]
    if FAST_CODEGEN in os.environ.get("XLA_FLAGS", ""):
        flags.append(FAST_CODEGEN)
    return " ".join(flags)
