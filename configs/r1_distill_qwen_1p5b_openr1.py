"""Paper scale: DeepSeek-R1-Distill-Qwen-1.5B on OpenR1-Math, Thinking Seeds (ratio 0.3, T 8).

Paper section 5.1: 4,608 entries randomly sampled from Openr1-Math-46k-8192 (Elliott/Openr1-Math-
46k-8192, verl format), response length 8k, batch 32 prompts, G 8, clip-high 0.28 (the shared
recipe: tseeds_jax/rl/config/recipes.py). Point `model.init` / `tokenizer` at your local HF folder of
deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B and `data.source` at the parquet; the paths below are
placeholders. `model.arch` repeats the HF config.json so that `tseeds plan` works without the
weights (with the folder present the plan reads its config.json instead).

Variants (`FILE:VARIANT`): `tpu` (default) = a v6e-64 slice (64 devices); `gpu` = one 8xH100
host (also fits 8xH200).

    tseeds plan  --config configs/r1_distill_qwen_1p5b_openr1.py
    tseeds train --config configs/r1_distill_qwen_1p5b_openr1.py:gpu \\
        --config.model.init=hf:/models/R1-Distill-1.5B --config.tokenizer=hf:/models/R1-Distill-1.5B
    tpu_scripts/launch.sh --env pod.env --config configs/r1_distill_qwen_1p5b_openr1.py  (docs/scale.md)
"""

from tseeds_jax.rl.config.recipes import Slice, paper_config

# deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B config.json (architecture fields only).
ARCH = dict(model_type="qwen2", vocab_size=151936, hidden_size=1536, intermediate_size=8960,
            num_hidden_layers=28, num_attention_heads=12, num_key_value_heads=2,
            tie_word_embeddings=False, max_position_embeddings=131072, rope_theta=10000.0,
            rms_norm_eps=1e-6)

VARIANTS = {
    # data 8 x fsdp 8: jax.make_mesh lays each mesh axis on whole torus axes of the 8x8 v6e-64
    # (fsdp 32 x tensor 2 cannot be built there). With fsdp on one torus axis libtpu
    # reduce-scatters the weight gradients; over both (fsdp 64) it all-reduces them whole and
    # slices. grad_reduce "update": one reduction per update instead of one per micro-step
    # (half the collective bytes, more memory: docs/scale.md "Gradients that move once").
    "tpu": Slice("v6e-64", data=8, fsdp=8, sampler_placement="decode", grad_reduce="update"),
    "gpu": Slice("8xH100", fsdp=8, sampler_placement="decode"),
}


def get_config(variant: str = "tpu"):
    return paper_config(
        name="r1_distill_qwen_1p5b_openr1", variants=VARIANTS, variant=variant,
        model_dir="/models/DeepSeek-R1-Distill-Qwen-1.5B", arch=ARCH,  # placeholder HF folder
        data="openr1_math_46k:/data/openr1-math-46k-8192.parquet",  # placeholder: the verl parquet
        data_size=4608,  # a seeded random subset (paper: 4,608)
        template="r1_distill",  # DeepSeek-R1 chat format, generation starts after <think>
        max_prompt_len=1024, max_response_len=8192)
