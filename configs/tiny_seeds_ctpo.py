"""Thinking Seeds + CTPO-LA ratio, on the tiny default task.

Method settings: tseeds_jax/rl/config/methods.py (`apply_method`, method "seeds_ctpo"); the run label
`config.method` is "seeds_ctpo".

    tseeds train --config configs/tiny_seeds_ctpo.py --config.steps=20
"""

from tseeds_jax.rl.config import tiny_config
from tseeds_jax.rl.config.methods import apply_method


def get_config():
    return apply_method(tiny_config(), "seeds_ctpo", scale="tiny")
