"""Mini-batched on-policy DAPO (the paper's Figure 3(b) baseline): 4 updates per batch.

pi_old is recomputed by the learner before the updates (the on-policy shortcut would be wrong).

    tseeds train --config configs/tiny_minibatch_dapo.py --config.steps=20
"""

from tseeds_jax.rl.config import tiny_config


def get_config():
    c = tiny_config()
    c.run_dir = "runs/tiny_minibatch_dapo"
    c.seeds.refresh_interval = 1
    c.optim.mini_batches = 4  # 16 sequences per batch -> 4 mini-batches of 4
    c.optim.old_logp = "recompute"
    return c
