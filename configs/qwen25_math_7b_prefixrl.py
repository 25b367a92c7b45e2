"""PrefixRL (a peer restart method, docs/restart_methods.md), Qwen2.5-Math-7B / DAPO-Math-17k.

Method settings: tseeds_jax/rl/config/methods.py (`apply_restart`, method "prefixrl"); everything
else is the paper's on-policy DAPO setting (family_configs.qwen25_math_7b_base).

    tseeds train --config configs/qwen25_math_7b_prefixrl.py \
        --config.model.init=hf:DIR --config.tokenizer=hf:DIR \
        --config.data.source=dapo_math_17k:PATH
"""

from tseeds_jax.rl.config.methods import apply_restart
from tseeds_jax.rl.config.recipes import qwen25_math_7b_base


def get_config():
    return apply_restart(qwen25_math_7b_base(), "prefixrl", scale="paper")
