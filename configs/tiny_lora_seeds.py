"""LoRA Thinking Seeds on the tiny task: rank-8 adapters on every projection of a frozen base
(length-ratio seeds, T 8, the DAPO loss); pi_b snapshots are adapters (docs/lora.md).

Method settings: tseeds_jax/rl/config/methods.py (`apply_method` "thinking_seeds", `apply_lora`);
the run label `config.method` is "thinking_seeds+lora".

    tseeds train --config configs/tiny_lora_seeds.py --config.steps=20
"""

from tseeds_jax.rl.config import tiny_config
from tseeds_jax.rl.config.methods import apply_lora, apply_method


def get_config():
    c = apply_lora(apply_method(tiny_config(), "thinking_seeds", scale="tiny"), scale="tiny")
    c.run_dir = "runs/tiny_lora_seeds"
    return c
