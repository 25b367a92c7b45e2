"""Paper scale: Qwen3-4B-Thinking-2507 on code with unit-test rewards, Thinking Seeds (ratio 0.3,
T 8), state variant (seed tokens are context only).

Paper section 5.1: 5,120 prompts randomly sampled from KlearReasoner-CodeSub-15k, prompts up to 2k
and responses up to 16k tokens, ratio 30% and T 8 reused from the math runs (the shared recipe:
tseeds_jax/rl/config/recipes.py); masking the prefix from the loss (the `state` variant) raised
LiveCodeBench-v6 from 48.58 to 52.19. The data file holds one problem per line with
`stdin_stdout` pairs and/or `asserts` (the `code` registry format). Point `model.init` /
`tokenizer` at your local HF folder of Qwen/Qwen3-4B-Thinking-2507; the paths below are
placeholders. `model.arch` repeats the HF config.json so that `tseeds plan` works without the
weights (with the folder present the plan reads its config.json instead).

Variants (`FILE:VARIANT`): `tpu` (default) = a v5p-128 slice (64 devices); `gpu` = one 8xH200
host. Attention scores are materialised ([heads, T, T] per sequence and layer at T = 18k), so the
meshes split heads over `tensor`; `tseeds plan` shows what still does not fit.

    tseeds plan  --config configs/qwen3_4b_thinking_code.py
    tseeds train --config configs/qwen3_4b_thinking_code.py:gpu \\
        --config.model.init=hf:/models/Qwen3-4B --config.tokenizer=hf:/models/Qwen3-4B
    tpu_scripts/launch.sh --env pod.env --config configs/qwen3_4b_thinking_code.py  (docs/scale.md)
"""

from tseeds_jax.rl.config.recipes import Slice, paper_config

# Qwen/Qwen3-4B-Thinking-2507 config.json (architecture fields only).
ARCH = dict(model_type="qwen3", vocab_size=151936, hidden_size=2560, intermediate_size=9728,
            num_hidden_layers=36, num_attention_heads=32, num_key_value_heads=8, head_dim=128,
            tie_word_embeddings=True, max_position_embeddings=262144, rope_theta=5000000.0,
            rms_norm_eps=1e-6)

VARIANTS = {
    # fsdp 16 (data x fsdp a multiple of the 16 hosts, as sharded sampling needs), tensor 4.
    "tpu": Slice("v5p-128", fsdp=16, tensor=4, sampler_placement="decode"),
    # 256 slots x 24k cache on one host's 8 GPUs is too tight.
    "gpu": Slice("8xH200", tensor=8, sampler_slots=128, sampler_placement="decode"),
}


def get_config(variant: str = "tpu"):
    c = paper_config(
        name="qwen3_4b_thinking_code", variants=VARIANTS, variant=variant,
        model_dir="/models/Qwen3-4B-Thinking-2507", arch=ARCH,  # placeholder: your HF folder
        data="code:/data/klear-codesub.jsonl",  # placeholder: code problems with tests
        data_size=5120,  # a seeded random subset (paper: 5,120)
        template="qwen3_thinking",  # chatml, generation starts after <think>
        reward="code",  # runs the unit tests in the sandbox
        max_prompt_len=2048, max_response_len=16384,
        seeds_variant="state")  # seed tokens are context only (paper's better code variant)
    if variant == "tpu":
        # An 8-bit KV cache (int8 + a float32 scale per slot, kv head and position): at 24k-token
        # caches the decode step is bound by KV reads, and int8 halves them. Its compiled decode
        # step and the sampler-vs-learner log-prob gap it adds: docs/scale.md.
        c.model.kv_cache_dtype = "int8"
    return c
