"""Asynchronous DAPO on the tiny default task (docs/async.md): partial rollouts generated one step
ahead, while the learner updates, with truncated importance weights against the sampler.

  stale.steps 1            the batch of step k is generated at step k - 1, by that step's policy
  stale.overlap            ... in a worker thread during the update (the same numbers as without)
  stale.partial_tokens 12  a response decodes at most 12 new tokens per step; unfinished ones
                           are continued by the next policies as seeds (mixed-source ratio)
  stale.max_staleness 2    no trained token is more than 2 versions behind the learner
  stale.correction "tis"   each token's loss times min(pi_den / pi_sampler, 2)

    tseeds train --config configs/tiny_async.py --config.steps=20
"""

from tseeds_jax.rl.config import tiny_config


def get_config():
    c = tiny_config()
    c.method = "dapo_async"
    c.stale.steps = 1
    c.stale.overlap = True
    c.stale.partial_tokens = 12
    c.stale.max_staleness = 2
    c.stale.correction = "tis"
    return c
