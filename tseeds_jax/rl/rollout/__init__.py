"""rl/rollout: the samples of a step and the seam every generation route goes through.

  source.py        the batch-source seam: `next(step, policy) -> (samples, StepInfo)`
  finish.py        the one collection tail (scoring, reward checks, statistics, filter)
  samples.py       samples: generation from prompts and seeds, scoring, packed form
  stats.py         batch-wide statistics, occupancy, DAPO's group filter
  streams.py       every random stream of a run
  pool.py          partial rollouts: the pool of groups in flight (`PoolSource`)
  pool_tallies.py  per-token versions of a batch, merged over hosts
  lag.py           M2PO's lag and overlap (`Lagged`)
"""
