"""M2PO (paper version, tau 0.04) on stale rollouts, on the tiny default task.

Method settings: tseeds_jax/rl/config/methods.py (`apply_method`, method "m2po"); the run label
`config.method` is "m2po".

    tseeds train --config configs/tiny_m2po.py --config.steps=20
"""

from tseeds_jax.rl.config import tiny_config
from tseeds_jax.rl.config.methods import apply_method


def get_config():
    return apply_method(tiny_config(), "m2po", scale="tiny")
