"""GSPO-token, mini-batched, on the tiny default task.

Method settings: tseeds_jax/rl/config/methods.py (`apply_method`, method "gspo_token"); the run label
`config.method` is "gspo_token".

    tseeds train --config configs/tiny_gspo_token.py --config.steps=20
"""

from tseeds_jax.rl.config import tiny_config
from tseeds_jax.rl.config.methods import apply_method


def get_config():
    return apply_method(tiny_config(), "gspo_token", scale="tiny")
