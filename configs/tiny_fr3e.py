"""FR3E (a peer restart method, docs/restart_methods.md) on the tiny default task.

Method settings: tseeds_jax/rl/config/methods.py (`apply_restart`, method "fr3e").

    tseeds train --config configs/tiny_fr3e.py --config.steps=20
    tseeds train --config configs/tiny_fr3e.py:hard   # the demo's hard task (8-9 terms)
"""

from tseeds_jax.rl.config import tiny_config
from tseeds_jax.rl.config.methods import apply_restart, tiny_variant

VARIANTS = {"hard": "chains of 8-9 terms, prompt width 20, response width 96"}


def get_config(variant: str = "default"):
    return tiny_variant(apply_restart(tiny_config(), "fr3e", scale="tiny"), variant)
