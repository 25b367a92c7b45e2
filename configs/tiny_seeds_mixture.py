"""Thinking Seeds with adaptive seeds (mixture, T 8), state+action loss, tiny task.

Each seeded sample restarts from its own draw: a success source with probability w and a failure
source otherwise (w set so that its expected predicted success is 0.5), cut by the value model
with per-sample jitter, no two samples of a group on the same (source, cut) while the group has
distinct candidates; groups whose behavior rollouts are all right or all wrong use the ratio rule
(docs/adaptive_seeds.md).

    tseeds train --config configs/tiny_seeds_mixture.py --config.steps=24
"""

from tseeds_jax.rl.config import tiny_config


def get_config():
    c = tiny_config()
    c.run_dir = "runs/tiny_seeds_mixture"
    c.seeds.refresh_interval = 8  # T: behavior snapshot every 8 steps; batches 2..8 are seeded
    c.seeds.truncation = "mixture"
    c.seeds.target = 0.5  # p*: each sample's expected predicted success
    c.seeds.gamma = 1.0  # value-model shape before the online calibration
    c.seeds.calibrate = True
    c.seeds.ema = 0.5
    c.seeds.fallback = "ratio"  # groups whose behavior rollouts all got one reward
    c.seeds.ratio = 0.5  # the fallback's ratio
    c.seeds.variant = "state+action"
    return c
