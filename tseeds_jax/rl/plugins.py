"""Moved to rl/loss_plugins.py. Kept only for scale/compile_programs.py, which imports
`learner_old_logp_mode` from here; delete when that import names rl.loss_plugins."""

from tseeds_jax.rl.loss_plugins import learner_old_logp_mode

__all__ = ["learner_old_logp_mode"]
