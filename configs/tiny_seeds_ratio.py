"""Thinking Seeds, length-ratio truncation (ratio 0.5, T 8), state+action loss, tiny task.

    tseeds train --config configs/tiny_seeds_ratio.py --config.steps=24
"""

from tseeds_jax.rl.config import tiny_config


def get_config():
    c = tiny_config()
    c.run_dir = "runs/tiny_seeds_ratio"
    c.seeds.refresh_interval = 8  # T: behavior snapshot every 8 steps; batches 2..8 are seeded
    c.seeds.truncation = "ratio"
    c.seeds.ratio = 0.5  # keep the first half of each behavior response as the seed
    c.seeds.variant = "state+action"
    return c
