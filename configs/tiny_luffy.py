"""LUFFY: 1 off-policy trace + G-1 on-policy samples per group, on the tiny default task.

Method settings: tseeds_jax/rl/config/methods.py (`apply_method`, method "luffy"); the run label
`config.method` is "luffy".

    tseeds train --config configs/tiny_luffy.py --config.steps=20
"""

from tseeds_jax.rl.config import tiny_config
from tseeds_jax.rl.config.methods import apply_method


def get_config():
    return apply_method(tiny_config(), "luffy", scale="tiny")
