"""CTPO-LA (position-adaptive log-space clip), mini-batched, on the tiny default task.

Method settings: tseeds_jax/rl/config/methods.py (`apply_method`, method "ctpo_la"); the run label
`config.method` is "ctpo_la".

    tseeds train --config configs/tiny_ctpo_la.py --config.steps=20
"""

from tseeds_jax.rl.config import tiny_config
from tseeds_jax.rl.config.methods import apply_method


def get_config():
    return apply_method(tiny_config(), "ctpo_la", scale="tiny")
