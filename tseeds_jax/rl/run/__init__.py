"""rl/run: a run's life around the training step.

  hosts.py       process layout, host-local <-> global arrays, distributed init
  preemption.py  signals and preemption notices, agreed across hosts
  state_io.py    checkpoints: train state, seed cache, cross-step state, exact resume
  metrics.py     JSONL and TensorBoard metrics
  run_files.py   local mirrors of gs:// run dirs
"""
