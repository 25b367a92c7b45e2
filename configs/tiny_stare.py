"""STARE (surprisal-targeted reweighting under an entropy gate), on the tiny default task.

Method settings: tseeds_jax/rl/config/methods.py (`apply_method`, method "stare"); the run label
`config.method` is "stare".

    tseeds train --config configs/tiny_stare.py --config.steps=20
"""

from tseeds_jax.rl.config import tiny_config
from tseeds_jax.rl.config.methods import apply_method


def get_config():
    return apply_method(tiny_config(), "stare", scale="tiny")
