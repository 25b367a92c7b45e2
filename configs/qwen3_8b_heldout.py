"""Held-out shape for the memory planner: a Qwen3-8B-like architecture on math with
Thinking Seeds (ratio 0.3, T 8), not a run the paper reports.

The planner's TPU constants (`scale/plan.py`, docs/scale.md "The TPU learner model") were fitted to
compiles of the three paper variants (Qwen2.5-Math-7B, R1-Distill-Qwen-1.5B, Qwen3-4B). This
config is a fourth model shape (D 4096, F 12288, 36 layers, 32 heads / 8 kv heads of 128, untied
151,936-word vocabulary; Qwen/Qwen3-8B's config.json architecture fields, no weights needed) and a
fourth context length (2k prompts + 6k responses), kept out of every fit so that
`tseeds plan --config configs/qwen3_8b_heldout.py --compile` is a check of the planner, not of its
fit (docs/scale.md "Held-out validation"). `model.init` / `tokenizer` / `data.source`
are placeholders; point them at your HF folder and data to train it.

Variants (`FILE:VARIANT`): `tpu` (default) = a v5p-64 slice (32 devices, fsdp 32); `small` = the
same widths on a v5p-8 (4 devices, fsdp 4), which `tests/test_plan_heldout_tpu.py` compiles with 2
layers and short rows (a compile of minutes, not of the full model).

    tseeds plan  --config configs/qwen3_8b_heldout.py
    tseeds plan  --config configs/qwen3_8b_heldout.py --compile   (TPU compile: ~20 min on 2 cores)
"""

from tseeds_jax.rl.config.recipes import Slice, paper_config

# Qwen/Qwen3-8B config.json (architecture fields only).
ARCH = dict(model_type="qwen3", vocab_size=151936, hidden_size=4096, intermediate_size=12288,
            num_hidden_layers=36, num_attention_heads=32, num_key_value_heads=8, head_dim=128,
            tie_word_embeddings=False, max_position_embeddings=40960, rope_theta=1000000.0,
            rms_norm_eps=1e-6)

VARIANTS = {
    "tpu": Slice("v5p-64", fsdp=32, sampler_placement="decode"),
    "small": Slice("v5p-8", fsdp=4, sampler_placement="decode"),
}


def get_config(variant: str = "tpu"):
    return paper_config(
        name="qwen3_8b_heldout", variants=VARIANTS, variant=variant,
        model_dir="/models/Qwen3-8B", arch=ARCH,  # placeholder: your local HF folder
        data="dapo_math_17k:/data/dapo-math-17k.parquet",  # placeholder file
        template="qwen_math",
        max_prompt_len=2048, max_response_len=6144)
