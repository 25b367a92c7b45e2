"""Paper scale: Qwen2.5-Math-7B on DAPO-Math-17k, Thinking Seeds with adaptive seeds
(success_target, p* 0.5, T 8), state+action loss.

The paper recipe (tseeds_jax/rl/config/recipes.py, section 5.1) with the seed selector swapped: each seed
is cut from the behavior rollout and at the point where the current policy's estimated success
rate is near 0.5 (docs/adaptive_seeds.md); groups without a rollout of the needed kind use the
paper's ratio-0.3 rule. Point `model.init` / `tokenizer` at your local HF folder of
Qwen/Qwen2.5-Math-7B and `data.source` at the DAPO-Math-17k parquet; the paths are placeholders.

Variants (`FILE:VARIANT`): `tpu` (default) = a v5p-64 slice (32 devices); `gpu` = one 8xH100 host.

    tseeds plan  --config configs/qwen25_math_7b_seeds_adaptive.py
    tseeds train --config configs/qwen25_math_7b_seeds_adaptive.py:gpu \\
        --config.model.init=hf:/models/Qwen2.5-Math-7B --config.tokenizer=hf:/models/Qwen2.5-Math-7B
"""

from tseeds_jax.rl.config.recipes import Slice, paper_config

# Qwen/Qwen2.5-Math-7B config.json (architecture fields only).
ARCH = dict(model_type="qwen2", vocab_size=152064, hidden_size=3584, intermediate_size=18944,
            num_hidden_layers=28, num_attention_heads=28, num_key_value_heads=4,
            tie_word_embeddings=False, max_position_embeddings=4096, rope_theta=10000.0,
            rms_norm_eps=1e-6)

VARIANTS = {
    "tpu": Slice("v5p-64", fsdp=32, sampler_placement="decode"),
    "gpu": Slice("8xH100", fsdp=8, sampler_placement="decode"),
}


def get_config(variant: str = "tpu"):
    c = paper_config(
        name="qwen25_math_7b_seeds_adaptive", variants=VARIANTS, variant=variant,
        model_dir="/models/Qwen2.5-Math-7B", arch=ARCH,  # placeholder: your local HF folder
        data="dapo_math_17k:/data/dapo-math-17k.parquet",  # placeholder file
        template="qwen_math", max_prompt_len=1024, max_response_len=3072,
        method="thinking_seeds_adaptive")
    c.seeds.truncation = "success_target"
    c.seeds.target = 0.5
    c.seeds.fallback = "ratio"  # with the recipe's ratio 0.3
    return c
