"""PrefixRL (a peer restart method, docs/restart_methods.md), Qwen2.5-Math-7B / DAPO-Math-17k.

Method settings: tseeds_jax/rl/restart_configs.py (`apply_restart`, method "prefixrl"); everything
else is the paper's on-policy DAPO setting (family_configs.qwen25_math_7b_base).

    tseeds train --config configs/qwen25_math_7b_prefixrl.py \
        --config.model.init=hf:DIR --config.tokenizer=hf:DIR \
        --config.data.source=dapo_math_17k:PATH
"""

from tseeds_jax.rl.family_configs import qwen25_math_7b_base
from tseeds_jax.rl.restart_configs import apply_restart


def get_config():
    return apply_restart(qwen25_math_7b_base(), "prefixrl", scale="paper")
