"""CTPO (cumulative token ratio, ratio-space clip), mini-batched, on the tiny default task.

Method settings: tseeds_jax/rl/config/methods.py (`apply_method`, method "ctpo"); the run label
`config.method` is "ctpo".

    tseeds train --config configs/tiny_ctpo.py --config.steps=20
"""

from tseeds_jax.rl.config import tiny_config
from tseeds_jax.rl.config.methods import apply_method


def get_config():
    return apply_method(tiny_config(), "ctpo", scale="tiny")
