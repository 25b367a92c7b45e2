"""Thinking Seeds with adaptive seeds (success_target, T 8), state+action loss, tiny task.

Each seeded sample restarts from a prefix of one of its prompt's behavior rollouts, chosen so that
the current policy's estimated success rate from there is near 0.5 (docs/adaptive_seeds.md):
prompts the policy mostly fails are restarted inside successful rollouts, prompts it mostly
solves inside failed ones; groups with no rollout of the needed kind use the ratio rule.

    tseeds train --config configs/tiny_seeds_adaptive.py --config.steps=24
"""

from tseeds_jax.rl.config import tiny_config


def get_config():
    c = tiny_config()
    c.run_dir = "runs/tiny_seeds_adaptive"
    c.seeds.refresh_interval = 8  # T: behavior snapshot every 8 steps; batches 2..8 are seeded
    c.seeds.truncation = "success_target"
    c.seeds.target = 0.5  # p*: restart where the estimated success rate is 1/2
    c.seeds.gamma = 1.0  # value-model shape before the online calibration
    c.seeds.calibrate = True
    c.seeds.ema = 0.5
    c.seeds.fallback = "ratio"  # groups without a rollout of the needed kind
    c.seeds.ratio = 0.5  # the fallback's ratio
    c.seeds.variant = "state+action"
    return c
