"""rl/config: the run's configuration.

  schema.py    TrainConfig (top-level fields), default_config(), tiny_config(), validation
  sections.py  one frozen dataclass per section, holding each field's one default and comment
  fields.py    the machinery that derives the ConfigDict, type checks and `from_config`
  checks.py    per-feature checks (stale.*, restart.*): values and what each feature needs
  compat.py    the table of which features combine, checked once when the config is built
  family.py    the loss family as configured (registered hparams, learner options, labels)
  lengths.py   response-length distributions for step-time estimates
  recipes.py   the paper-scale recipe and its hardware slices
  methods.py   per-method settings of the loss family and the peer restart methods

`from tseeds_jax.rl.config import TrainConfig, tiny_config` is the public entry point; nothing
below the config sees a ConfigDict.
"""

from tseeds_jax.rl.config.errors import ConfigValueError
from tseeds_jax.rl.config.schema import TrainConfig, default_config, tiny_config
from tseeds_jax.rl.config.sections import (
    AdvantageConfig,
    DataConfig,
    HardwareConfig,
    LearnerConfig,
    LoraTrainConfig,
    LossConfig,
    OffPolicyConfig,
    OptimConfig,
    RestartConfig,
    RolloutConfig,
    SeedsConfig,
    StaleConfig,
    TrainModelConfig,
)

__all__ = ["AdvantageConfig", "ConfigValueError", "DataConfig", "HardwareConfig",
           "LearnerConfig", "LoraTrainConfig", "LossConfig",
           "OffPolicyConfig", "OptimConfig", "RestartConfig", "RolloutConfig", "SeedsConfig",
           "StaleConfig", "TrainConfig", "TrainModelConfig", "default_config", "tiny_config"]
