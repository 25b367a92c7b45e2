"""CURE (a peer restart method, docs/restart_methods.md) on the tiny default task.

Method settings: tseeds_jax/rl/restart_configs.py (`apply_restart`, method "cure").

    tseeds train --config configs/tiny_cure.py --config.steps=20
"""

from tseeds_jax.rl.config import tiny_config
from tseeds_jax.rl.restart_configs import apply_restart


def get_config():
    return apply_restart(tiny_config(), "cure", scale="tiny")
