"""LoRA Thinking Seeds at paper scale: Qwen2.5-Math-7B / DAPO-Math-17k, the paper recipe (ratio
0.3, T 8, batch 32 x G 8, 4k context) with rank-32 adapters on every projection of a frozen base
(docs/lora.md). pi_b snapshots are the adapters (80.7M float32 parameters: 323 MB) instead of
the 7.6B-parameter model (15.2 GB in the sampler's bfloat16).

Variants (`FILE:VARIANT`): `tpu` (default) = a v5p-8 slice (4 chips, 95 GiB each): the smallest
that holds it (`tseeds plan` / `tseeds compile`: docs/scale.md, "LoRA at 7B"). The base is frozen,
so it is kept in bfloat16 (Qwen2.5-Math-7B's own dtype; the full-parameter recipe keeps float32
master weights because it updates them) with no optimizer state: 15.2 GB of weights in all, where
full-parameter training holds 7.6B x (4 + 8) bytes = 91 GB of weights and Adam moments and needs
a v5p-64. `v6e` = a v6e-8 slice (8 chips, 32 GiB each).

    tseeds plan    --config configs/qwen25_math_7b_lora_seeds.py
    tseeds compile --config configs/qwen25_math_7b_lora_seeds.py --prefill-buckets max
    tseeds train   --config configs/qwen25_math_7b_lora_seeds.py \\
        --config.model.init=hf:/models/Qwen2.5-Math-7B --config.tokenizer=hf:/models/Qwen2.5-Math-7B
"""

from tseeds_jax.rl.config.methods import apply_lora
from tseeds_jax.rl.config.recipes import QWEN25_MATH_7B, Slice, paper_config

VARIANTS = {
    "tpu": Slice("v5p-8", fsdp=4, sampler_placement="decode"),
    "v6e": Slice("v6e-8", fsdp=8, sampler_placement="decode"),
}


def get_config(variant: str = "tpu"):
    c = paper_config(
        name="qwen25_math_7b_lora_seeds", variants=VARIANTS, variant=variant,
        model_dir="/models/Qwen2.5-Math-7B", arch=QWEN25_MATH_7B,  # placeholder: your HF folder
        data="dapo_math_17k:/data/dapo-math-17k.parquet", template="qwen_math",
        max_prompt_len=1024, max_response_len=3072, method="thinking_seeds")
    c.model.param_dtype = "bfloat16"  # the frozen base (the adapters are float32)
    return apply_lora(c, scale="paper")
