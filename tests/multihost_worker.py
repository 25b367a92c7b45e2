"""One process of the multi-host test (run by tests/test_multihost.py, not collected by pytest).

argv: OUT_NPZ RUN_DIR. Multi-process settings come from TSEEDS_* environment variables.
"""

import os
import sys

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=1"
os.environ["JAX_PLATFORMS"] = "cpu"

from tseeds_jax.rl.hosts import maybe_initialize_distributed  # noqa: E402

maybe_initialize_distributed()

import jax  # noqa: E402
import numpy as np  # noqa: E402

jax.config.update("jax_default_matmul_precision", "highest")

from tests.trainer_utils import tiny_trainer  # noqa: E402
from tseeds_jax.rl.hosts import local_replica  # noqa: E402


def main(out, run_dir):
    # optim.eps=1e-3: gradients are summed in a different order across processes; Adam's
    # g / (|g| + eps) would blow the float32 rounding of near-zero entries up to ~lr.
    tr = tiny_trainer(run_dir, **{"seeds.refresh_interval": 2, "seeds.ratio": 0.5, "steps": 3,
                                  "optim.eps": 1e-3})
    hist = tr.run()
    params = local_replica(tr.state.params)
    leaves = {str(i): np.asarray(x) for i, x in enumerate(jax.tree_util.tree_leaves(params))}
    leaves["loss"] = np.array([float(m["loss"]) for m in hist])
    leaves["reward"] = np.array([float(m["reward"]) for m in hist])
    if jax.process_index() == 0:
        np.savez(out, **leaves)
    print("done", jax.process_index(), jax.process_count(), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
