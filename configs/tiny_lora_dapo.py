"""LoRA DAPO (on-policy, T = 1) on the tiny task: rank-8 adapters on every projection of a frozen
base (docs/lora.md).

Method settings: tseeds_jax/rl/config/methods.py (`apply_method` "dapo", `apply_lora`); the run
label `config.method` is "dapo+lora".

    tseeds train --config configs/tiny_lora_dapo.py --config.steps=20
"""

from tseeds_jax.rl.config import tiny_config
from tseeds_jax.rl.config.methods import apply_lora, apply_method


def get_config():
    c = apply_lora(apply_method(tiny_config(), "dapo", scale="tiny"), scale="tiny")
    c.run_dir = "runs/tiny_lora_dapo"
    return c
