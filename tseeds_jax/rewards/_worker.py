"""Reward worker process main loop (started by `_pool`): one request at a time, on the main thread.

stdin carries request frames; answers go to a private duplicate of the original stdout, while fd 1
itself is pointed at stderr so that a reward library that prints cannot corrupt the protocol.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys

from tseeds_jax.rewards.results import RewardResult


def _load(name: str, module: str, file: str | None) -> None:
    """Make reward `name` available: import its module, else execute its source file."""
    import tseeds_jax.rewards.registry as registry

    if module != "__main__":  # our own __main__ is this worker
        try:
            importlib.import_module(module)
        except ImportError:
            if not file:
                raise
    if name in registry._REGISTRY or not file:
        return
    spec = importlib.util.spec_from_file_location(f"_tseeds_reward_{abs(hash(file))}", file)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)


def main() -> int:
    import tseeds_jax.rewards._linux as _linux

    # The expected values of the tests it grades live in this process: a program that runs as our
    # uid (the weak backend without namespaces) must not read them through /proc/PID/mem or ptrace.
    # Its children regain the flag at exec.
    _linux.set_dumpable(False)
    out_fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    import tseeds_jax.rewards._pool as _pool
    import tseeds_jax.rewards.code_reward as code_reward  # noqa: F401 - registers itself
    import tseeds_jax.rewards.gym_reward as gym_reward  # noqa: F401 - registers itself
    import tseeds_jax.rewards.math_reward as math_reward  # noqa: F401 - registers itself
    import tseeds_jax.rewards.registry as registry

    while True:
        try:
            name, module, file, response, reference, options = _pool.read_frame(0)
        except EOFError:
            return 0
        try:
            if name not in registry._REGISTRY:
                _load(name, module, file)
            result = registry.call_inline(registry.get(name), response, reference, options)
        except Exception as e:  # noqa: BLE001
            result = RewardResult(0.0, "error", {"error": f"{type(e).__name__}: {e}"[:500]})
        try:
            _pool.write_frame(out_fd, result)
        except Exception as e:  # noqa: BLE001 - e.g. unpicklable details: send a plain answer
            _pool.write_frame(
                out_fd, RewardResult(result.score, result.reason, {"error": repr(e)[:200]})
            )


if __name__ == "__main__":
    sys.exit(main())
