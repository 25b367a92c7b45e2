"""On-policy DAPO (T = 1) on the tiny default task.

    tseeds train --config configs/tiny_dapo.py --config.steps=20 --config.run_dir=runs/tiny_dapo
"""

from tseeds_jax.rl.config import tiny_config


def get_config():
    c = tiny_config()
    c.run_dir = "runs/tiny_dapo"
    c.seeds.refresh_interval = 1  # T = 1: every batch is written by the current policy
    return c
