"""Paper scale: DeepSeek-R1-Distill-Qwen-1.5B on OpenR1-Math, Thinking Seeds (ratio 0.3, T 8).

Paper section 5.1: 4,608 entries randomly sampled from Openr1-Math-46k-8192 (Elliott/Openr1-Math-
46k-8192, verl format), response length 8k, batch 32 prompts, G 8, clip-high 0.28. Point
`model.init` / `tokenizer` at your local HF folder of deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B and
`data.source` at the parquet; the paths below are placeholders. `model.arch` repeats the HF
config.json so that `tseeds plan` works without the weights (with the folder present the plan
reads its config.json instead).

Variants (`FILE:VARIANT`): `tpu` (default) = a v6e-64 slice (64 devices); `gpu` = one 8xH100
host (also fits 8xH200).

    tseeds plan  --config configs/r1_distill_qwen_1p5b_openr1.py
    tseeds train --config configs/r1_distill_qwen_1p5b_openr1.py:gpu \\
        --config.model.init=hf:/models/R1-Distill-1.5B --config.tokenizer=hf:/models/R1-Distill-1.5B
    tpu_scripts/launch.sh --env pod.env --config configs/r1_distill_qwen_1p5b_openr1.py  (docs/scale.md)
"""

import ml_collections

from tseeds_jax.rl.config import default_config

MODEL_DIR = "/models/DeepSeek-R1-Distill-Qwen-1.5B"  # placeholder: your local HF folder
DATA_FILE = "/data/openr1-math-46k-8192.parquet"  # placeholder: the verl parquet

# deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B config.json (architecture fields only).
ARCH = dict(model_type="qwen2", vocab_size=151936, hidden_size=1536, intermediate_size=8960,
            num_hidden_layers=28, num_attention_heads=12, num_key_value_heads=2,
            tie_word_embeddings=False, max_position_embeddings=131072, rope_theta=10000.0,
            rms_norm_eps=1e-6)

# variant -> (accelerator, mesh, micro_batch_size): one sequence per device per micro-step.
VARIANTS = {
    "tpu": ("v6e-64", dict(data=1, fsdp=32, tensor=2), 32),
    "gpu": ("8xH100", dict(data=1, fsdp=8, tensor=1), 8),
}


def get_config(variant: str = "tpu"):
    if variant not in VARIANTS:
        raise ValueError(f"{__file__}: unknown variant {variant!r}; known: {sorted(VARIANTS)}")
    accelerator, mesh, micro = VARIANTS[variant]
    c = default_config()
    c.run_dir = "runs/r1_distill_qwen_1p5b_openr1"
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
    c.data.source = f"openr1_math_46k:{DATA_FILE}"  # registry name : file (tseeds_jax/data/registry.py)
    c.data.params = ml_collections.ConfigDict({}, type_safe=False)
    c.data.template = "r1_distill"  # DeepSeek-R1 chat format, generation starts after <think>
    c.data.max_prompt_len = 1024
    c.data.size = 4608  # a seeded random subset of this many entries (paper: 4,608)
    c.reward = "math"

    c.rollout.batch_prompts = 32  # B
    c.rollout.group_size = 8  # G
    c.rollout.max_response_len = 8192  # R
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
