"""GSPO (sequence ratio, clip 3e-4/4e-4), mini-batched, Qwen2.5-Math-7B / DAPO-Math-17k.

Method settings: tseeds_jax/rl/config/methods.py (`apply_method`, method "gspo"); the run label
`config.method` is "gspo".

    tseeds train --config configs/qwen25_math_7b_gspo.py \
        --config.model.init=hf:DIR --config.tokenizer=hf:DIR \
        --config.data.source=dapo_math_17k:PATH
"""

from tseeds_jax.rl.config.methods import apply_method
from tseeds_jax.rl.config.recipes import qwen25_math_7b_base


def get_config():
    return apply_method(qwen25_math_7b_base(), "gspo", scale="paper")
