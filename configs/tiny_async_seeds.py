"""Thinking Seeds (length-ratio seeds, T 8, DAPO loss) with partial rollouts, on the tiny default
task (docs/async.md, "The refresh cycle"): the same refresh cycle, its seeds continued through the
partial-rollout pool.

  stale.partial_tokens 12  a response decodes at most 12 new tokens per step; unfinished ones
                           are continued by the next policies (mixed-source ratio, as seeds are)
  stale.max_staleness 1    pool tokens at most 1 version behind the learner; each refresh runs
                           one step before its cycle's first batch is trained, so a seed is at
                           most T - 1 + 1 = 8 versions old
  stale.correction "tis"   each token's loss times min(pi_den / pi_sampler, 2); refresh seeds
                           (no sampler log-prob) weigh 1

    tseeds train --config configs/tiny_async_seeds.py --config.steps=20
"""

from tseeds_jax.rl.config import tiny_config
from tseeds_jax.rl.config.methods import apply_method


def get_config():
    c = apply_method(tiny_config(), "thinking_seeds", scale="tiny")
    c.method = "thinking_seeds_async"
    c.stale.partial_tokens = 12
    c.stale.max_staleness = 1
    c.stale.correction = "tis"
    return c
