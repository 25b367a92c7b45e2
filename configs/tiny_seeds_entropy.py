"""Thinking Seeds, entropy truncation (T 8), tiny task.

The paper uses k = 32 on responses of thousands of tokens; tiny responses have ~20 tokens, so k
is scaled down to 4 (k >= |o| would make the cut uniform over all positions).

    tseeds train --config configs/tiny_seeds_entropy.py --config.steps=24
"""

from tseeds_jax.rl.config import tiny_config


def get_config():
    c = tiny_config()
    c.run_dir = "runs/tiny_seeds_entropy"
    c.seeds.refresh_interval = 8
    c.seeds.truncation = "entropy"
    c.seeds.top_k = 4  # cut before one of the 4 highest-entropy tokens, chosen uniformly
    return c
