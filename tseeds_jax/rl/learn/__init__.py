"""rl/learn: the update and what prepares its batch.

  learner.py     the jitted update (micro-batches, mini-batches, the loss family's needs)
  batch.py       the learner's batch: its fields, assembly from samples, the one sharding rule
  layout.py      the row layout: padded rows, the response-aligned [N, R] view, packed rows
  metrics.py     the update's per-token diagnostics and their exact reduction
  update.py      one step's learning: advantages, hooks, rollout correction, update, metrics
  hooks.py       what a loss's declared needs ask of a step (pi_old, controller, top-K)
  row_pass.py    the no-grad statistics pass over rows (log-probs, entropies, top-K)
  correction.py  rollout correction between the sampler and the learner (masks, TIS)
  advantages.py  GRPO advantages, DAPO's overlong penalty
  grad_accum.py  per-update gradient reduction over devices
"""
