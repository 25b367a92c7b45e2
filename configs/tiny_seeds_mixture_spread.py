"""Thinking Seeds with adaptive seeds (mixture_spread, T 8), state+action loss, tiny task.

As configs/tiny_seeds_mixture.py, and groups whose behavior rollouts are all right or all wrong
cut each sample's own rollout at a position stratified over [0, ratio): the k-th sample of G in
the k-th of G equal strata (docs/adaptive_seeds.md).

    tseeds train --config configs/tiny_seeds_mixture_spread.py --config.steps=24
"""

from tseeds_jax.rl.config import tiny_config


def get_config():
    c = tiny_config()
    c.run_dir = "runs/tiny_seeds_mixture_spread"
    c.seeds.refresh_interval = 8  # T: behavior snapshot every 8 steps; batches 2..8 are seeded
    c.seeds.truncation = "mixture_spread"
    c.seeds.target = 0.5  # p*: each sample's expected predicted success
    c.seeds.gamma = 1.0  # value-model shape before the online calibration
    c.seeds.calibrate = True
    c.seeds.ema = 0.5
    c.seeds.fallback = "ratio"  # unused here: one-outcome groups get the spread cuts
    c.seeds.ratio = 0.5  # upper end of the spread cuts
    c.seeds.variant = "state+action"
    return c
