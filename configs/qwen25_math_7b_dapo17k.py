"""Paper scale: Qwen2.5-Math-7B on DAPO-Math-17k, Thinking Seeds (ratio 0.3, T 8), state+action.

Paper section 5.1: 4k context (prompt + response), batch 32 prompts, G 8, clip-high 0.28, one update
per batch (the shared recipe: tseeds_jax/rl/config/recipes.py). Point `model.init` / `tokenizer` at your
local HF folder of Qwen/Qwen2.5-Math-7B and `data.source` at the DAPO-Math-17k parquet
(BytedTsinghua-SIA/DAPO-Math-17k); the paths below are placeholders. `model.arch` repeats the HF
config.json so that `tseeds plan` works without the weights (with the folder present the plan
reads its config.json instead).

Variants (`FILE:VARIANT`): `tpu` (default) = a v5p-64 slice (32 devices); `gpu` = one 8xH100
host (also fits 8xH200).

    tseeds plan  --config configs/qwen25_math_7b_dapo17k.py
    tseeds train --config configs/qwen25_math_7b_dapo17k.py:gpu \\
        --config.model.init=hf:/models/Qwen2.5-Math-7B --config.tokenizer=hf:/models/Qwen2.5-Math-7B
    tpu_scripts/launch.sh --env pod.env --config configs/qwen25_math_7b_dapo17k.py  (docs/scale.md)
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
    return paper_config(
        name="qwen25_math_7b_dapo17k", variants=VARIANTS, variant=variant,
        model_dir="/models/Qwen2.5-Math-7B", arch=ARCH,  # placeholder: your local HF folder
        data="dapo_math_17k:/data/dapo-math-17k.parquet",  # placeholder file; data_size 0: all
        template="qwen_math",  # chatml with the \\boxed{} instruction
        max_prompt_len=1024, max_response_len=3072)  # 1024 + 3072 = the model's 4k context
