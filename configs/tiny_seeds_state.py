"""Thinking Seeds, `state` variant: seed tokens are context only (masked from the policy loss).

    tseeds train --config configs/tiny_seeds_state.py --config.steps=24
"""

from tseeds_jax.rl.config import tiny_config


def get_config():
    c = tiny_config()
    c.run_dir = "runs/tiny_seeds_state"
    c.seeds.refresh_interval = 8
    c.seeds.truncation = "ratio"
    c.seeds.ratio = 0.5
    c.seeds.variant = "state"  # token mean over continuation tokens only
    return c
