"""SIS on GSPO-token, mini-batched, on the tiny default task.

Method settings: tseeds_jax/rl/config/methods.py (`apply_method`, method "sis_gspo"); the run label
`config.method` is "sis_gspo".

    tseeds train --config configs/tiny_sis_gspo.py --config.steps=20
"""

from tseeds_jax.rl.config import tiny_config
from tseeds_jax.rl.config.methods import apply_method


def get_config():
    return apply_method(tiny_config(), "sis_gspo", scale="tiny")
