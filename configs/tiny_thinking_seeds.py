"""Thinking Seeds (length-ratio seeds, T 8) with the DAPO loss, on the tiny default task.

Method settings: tseeds_jax/rl/config/methods.py (`apply_method`, method "thinking_seeds"); the run label
`config.method` is "thinking_seeds".

    tseeds train --config configs/tiny_thinking_seeds.py --config.steps=20
"""

from tseeds_jax.rl.config import tiny_config
from tseeds_jax.rl.config.methods import apply_method


def get_config():
    return apply_method(tiny_config(), "thinking_seeds", scale="tiny")
