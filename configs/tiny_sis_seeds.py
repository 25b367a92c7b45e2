"""Thinking Seeds + SIS on the seed tokens (proposal pi_b), on the tiny default task.

Method settings: tseeds_jax/rl/config/methods.py (`apply_method`, method "sis_seeds"); the run label
`config.method` is "sis_seeds".

    tseeds train --config configs/tiny_sis_seeds.py --config.steps=20
"""

from tseeds_jax.rl.config import tiny_config
from tseeds_jax.rl.config.methods import apply_method


def get_config():
    return apply_method(tiny_config(), "sis_seeds", scale="tiny")
