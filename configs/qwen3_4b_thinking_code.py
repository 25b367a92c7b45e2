"""Paper scale: Qwen3-4B-Thinking-2507 on code with unit-test rewards, Thinking Seeds (ratio 0.3,
T 8), state variant (seed tokens are context only).

Paper section 5.1: 5,120 prompts randomly sampled from KlearReasoner-CodeSub-15k, prompts up to 2k
and responses up to 16k tokens, ratio 30% and T 8 reused from the math runs; masking the prefix
from the loss (the `state` variant) raised LiveCodeBench-v6 from 48.58 to 52.19. The data file
holds one problem per line with `stdin_stdout` pairs and/or `asserts` (the `code` registry
format). Point `model.init` / `tokenizer` at your local HF folder of
Qwen/Qwen3-4B-Thinking-2507; the paths below are placeholders. `model.arch` repeats the HF
config.json so that `tseeds plan` works without the weights (with the folder present the plan
reads its config.json instead).

Variants (`FILE:VARIANT`): `tpu` (default) = a v5p-128 slice (64 devices); `gpu` = one 8xH200
host. Attention scores are materialised ([heads, T, T] per sequence and layer at T = 18k), so the
meshes split heads over `tensor`; `tseeds plan` shows what still does not fit.

    tseeds plan  --config configs/qwen3_4b_thinking_code.py
    tseeds train --config configs/qwen3_4b_thinking_code.py:gpu \\
        --config.model.init=hf:/models/Qwen3-4B --config.tokenizer=hf:/models/Qwen3-4B
    tpu_scripts/launch.sh --env pod.env --config configs/qwen3_4b_thinking_code.py  (docs/scale.md)
"""

import ml_collections

from tseeds_jax.rl.config import default_config

MODEL_DIR = "/models/Qwen3-4B-Thinking-2507"  # placeholder: your local HF folder
DATA_FILE = "/data/klear-codesub.jsonl"  # placeholder: code problems with tests

# Qwen/Qwen3-4B-Thinking-2507 config.json (architecture fields only).
ARCH = dict(model_type="qwen3", vocab_size=151936, hidden_size=2560, intermediate_size=9728,
            num_hidden_layers=36, num_attention_heads=32, num_key_value_heads=8, head_dim=128,
            tie_word_embeddings=True, max_position_embeddings=262144, rope_theta=5000000.0,
            rms_norm_eps=1e-6)

# variant -> (accelerator, mesh, micro_batch_size): one sequence per device per micro-step.
VARIANTS = {
    "tpu": ("v5p-128", dict(data=1, fsdp=8, tensor=8), 8),
    "gpu": ("8xH200", dict(data=1, fsdp=1, tensor=8), 1),
}


def get_config(variant: str = "tpu"):
    if variant not in VARIANTS:
        raise ValueError(f"{__file__}: unknown variant {variant!r}; known: {sorted(VARIANTS)}")
    accelerator, mesh, micro = VARIANTS[variant]
    c = default_config()
    c.run_dir = "runs/qwen3_4b_thinking_code"
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
    c.data.source = f"code:{DATA_FILE}"  # registry name : file (tseeds_jax/data/registry.py)
    c.data.params = ml_collections.ConfigDict({}, type_safe=False)
    c.data.template = "qwen3_thinking"  # chatml, generation starts after <think>
    c.data.max_prompt_len = 2048
    c.data.size = 5120  # a seeded random subset of this many problems (paper: 5,120)
    c.reward = "code"  # runs the unit tests in the sandbox

    c.rollout.batch_prompts = 32  # B
    c.rollout.group_size = 8  # G
    c.rollout.max_response_len = 16384  # R
    c.rollout.temperature = 1.0
    c.rollout.top_p = 1.0

    c.seeds.refresh_interval = 8  # T
    c.seeds.truncation = "ratio"
    c.seeds.ratio = 0.3
    c.seeds.top_k = 32  # entropy truncation's k (used with --config.seeds.truncation=entropy)
    c.seeds.variant = "state"  # seed tokens are context only (paper's better code variant)

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
    if variant == "gpu":
        c.hardware.sampler_slots = 128  # 256 slots x 24k cache on one host's 8 GPUs is too tight
    return c
