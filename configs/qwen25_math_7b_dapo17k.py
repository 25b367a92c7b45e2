"""Paper scale: Qwen2.5-Math-7B on DAPO-Math-17k, Thinking Seeds (ratio 0.3, T 8), state+action.

Paper section 5.1: 4k context (prompt + response), batch 32 prompts, G 8, clip-high 0.28, one update
per batch. Point `model.init` / `tokenizer` at your local HF folder of Qwen/Qwen2.5-Math-7B and
`data.source` at the DAPO-Math-17k parquet (BytedTsinghua-SIA/DAPO-Math-17k); the paths below
are placeholders. `model.arch` repeats the HF config.json so that `tseeds plan` works without the
weights (with the folder present the plan reads its config.json instead).

Variants (`FILE:VARIANT`): `tpu` (default) = a v5p-64 slice (32 devices); `gpu` = one 8xH100
host (also fits 8xH200).

    tseeds plan  --config configs/qwen25_math_7b_dapo17k.py
    tseeds train --config configs/qwen25_math_7b_dapo17k.py:gpu \\
        --config.model.init=hf:/models/Qwen2.5-Math-7B --config.tokenizer=hf:/models/Qwen2.5-Math-7B
    tpu_scripts/launch.sh --env pod.env --config configs/qwen25_math_7b_dapo17k.py  (docs/scale.md)
"""

import ml_collections

from tseeds_jax.rl.config import default_config

MODEL_DIR = "/models/Qwen2.5-Math-7B"  # placeholder: your local HF folder
DATA_FILE = "/data/dapo-math-17k.parquet"  # placeholder: the DAPO-Math-17k parquet

# Qwen/Qwen2.5-Math-7B config.json (architecture fields only).
ARCH = dict(model_type="qwen2", vocab_size=152064, hidden_size=3584, intermediate_size=18944,
            num_hidden_layers=28, num_attention_heads=28, num_key_value_heads=4,
            tie_word_embeddings=False, max_position_embeddings=4096, rope_theta=10000.0,
            rms_norm_eps=1e-6)

# variant -> (accelerator, mesh, micro_batch_size): one sequence per device per micro-step.
VARIANTS = {
    "tpu": ("v5p-64", dict(data=1, fsdp=32, tensor=1), 32),
    "gpu": ("8xH100", dict(data=1, fsdp=8, tensor=1), 8),
}


def get_config(variant: str = "tpu"):
    if variant not in VARIANTS:
        raise ValueError(f"{__file__}: unknown variant {variant!r}; known: {sorted(VARIANTS)}")
    accelerator, mesh, micro = VARIANTS[variant]
    c = default_config()
    c.run_dir = "runs/qwen25_math_7b_dapo17k"
    c.steps = 500  # the paper trains to convergence and keeps the best AIME24+25 checkpoint
    c.checkpoint_every = 20
    c.keep_checkpoints = 3

    c.model.init = f"hf:{MODEL_DIR}"
    c.model.arch = ml_collections.ConfigDict(ARCH)
    c.model.param_dtype = "float32"  # master weights and AdamW moments in float32
    c.model.dtype = "bfloat16"  # activations
    c.model.remat = True  # rematerialise each decoder layer in the backward pass
    c.model.sampler_dtype = "bfloat16"

    c.tokenizer = f"hf:{MODEL_DIR}"
    c.data.source = f"dapo_math_17k:{DATA_FILE}"  # registry name : file (tseeds_jax/data/registry.py)
    c.data.params = ml_collections.ConfigDict({}, type_safe=False)
    c.data.template = "qwen_math"  # chatml with the \\boxed{} instruction
    c.data.max_prompt_len = 1024  # prompt + response capped at 4k tokens (the model's context)
    c.data.size = 0  # 0: every example of the file
    c.reward = "math"

    c.rollout.batch_prompts = 32  # B
    c.rollout.group_size = 8  # G
    c.rollout.max_response_len = 3072  # R: 1024 + 3072 = 4096
    c.rollout.temperature = 1.0
    c.rollout.top_p = 1.0

    c.seeds.refresh_interval = 8  # T
    c.seeds.truncation = "ratio"
    c.seeds.ratio = 0.3
    c.seeds.top_k = 32  # entropy truncation's k (used with --config.seeds.truncation=entropy)
    c.seeds.variant = "state+action"

    c.loss.name = "dapo"
    c.loss.clip_low = 0.2
    c.loss.clip_high = 0.28
    c.loss.clip_c = 10.0
    c.loss.agg_mode = "token-mean"
    c.loss.kl_coef = 0.0

    c.optim.lr = 1e-6
    c.optim.warmup_steps = 10
    c.optim.weight_decay = 0.1
    c.optim.grad_clip = 1.0
    c.optim.mini_batches = 1  # one update per batch (paper)
    c.optim.micro_batch_size = micro  # global sequences per micro-step (memory, not the math)

    c.mesh = ml_collections.ConfigDict(mesh)
    c.hardware.accelerator = accelerator
    return c
