"""The paper-scale training recipe (Section 5.1): one recipe (`paper_recipe`), used by the paper
configs (`paper_config`, with a hardware slice) and by the loss family's and restart methods'
Qwen2.5-Math-7B configs (`qwen25_math_7b_base`, on-policy DAPO that config/methods.py turns into
each method).

Every paper run uses the same recipe: batch 32 prompts x G 8, Thinking Seeds with ratio 0.3 and
T 8, the DAPO loss (clip 0.2 / 0.28, dual clip 10), AdamW lr 1e-6, bfloat16 activations with
float32 master weights, remat, 500 steps. A config file names only what is its own: the model,
the data, the sequence lengths and the target hardware (its `VARIANTS`, picked by `FILE:VARIANT`):

    VARIANTS = {"tpu": Slice("v5p-64", fsdp=32), "gpu": Slice("8xH100", fsdp=8)}

    def get_config(variant="tpu"):
        return paper_config(name="my_run", model_dir="/models/M", arch=ARCH,
                            data="dapo_math_17k:/data/x.parquet", template="qwen_math",
                            max_prompt_len=1024, max_response_len=3072,
                            variants=VARIANTS, variant=variant)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import ml_collections

from tseeds_jax.rl.config.schema import default_config


@dataclasses.dataclass(frozen=True)
class Slice:
    """Target hardware of one variant: accelerator name (`tseeds plan`'s table) and mesh."""

    accelerator: str
    data: int = 1
    fsdp: int = 1
    tensor: int = 1
    sampler_slots: int = 0  # 0: the sampler's default
    # "sharded": the sampler runs on the learner's sharded params (no full replica per host);
    # "decode": on a decode layout of its own (tensor-parallel replicas, sampling/layout.py),
    # what the paper-scale variants use: needed wherever a full replica plus KV cache does not
    # fit one chip, and faster than decoding on the learner's fsdp layout (docs/scale.md).
    sampler_placement: str = "replica"
    sampler_tensor: int = 0  # "decode": devices per tensor-parallel sampler replica (0: auto)
    grad_reduce: str = "micro_batch"  # optim.grad_reduce (rl/learn/grad_accum.py)

    @property
    def micro_batch_size(self) -> int:
        # One sequence per device of the batch axes per micro-step: sets memory, not the math.
        return self.data * self.fsdp


def paper_recipe(c: ml_collections.ConfigDict, *, model_dir: str, arch: Mapping, data: str,
                 template: str, max_prompt_len: int, max_response_len: int, data_size: int = 0,
                 reward: str = "math", seeds_variant: str = "state+action",
                 batch_prompts: int = 32, group_size: int = 8, ratio: float = 0.3,
                 refresh_interval: int = 8, loss: str = "dapo", method: str = ""):
    """Writes the paper recipe into `c` (a default_config()); returns `c`. Arguments as
    `paper_config`'s. The clip range is written out as the loss's own registered range (DAPO:
    0.2 / 0.28), so that the config shows it and no loss inherits another's."""
    c.method = method
    c.steps = 500  # the paper trains to convergence and keeps the best AIME24+25 checkpoint
    c.checkpoint_every = 20
    c.keep_checkpoints = 3

    c.model.init = f"hf:{model_dir}"
    c.model.arch = ml_collections.ConfigDict(dict(arch))
    c.model.param_dtype = "float32"  # master weights and AdamW moments in float32
    c.model.dtype = "bfloat16"
    c.model.remat = True
    c.model.sampler_dtype = "bfloat16"

    c.tokenizer = f"hf:{model_dir}"
    c.data.source = data
    c.data.params = ml_collections.ConfigDict({}, type_safe=False)
    c.data.template = template
    c.data.max_prompt_len = max_prompt_len
    c.data.size = data_size
    c.reward = reward

    c.rollout.batch_prompts = batch_prompts
    c.rollout.group_size = group_size
    c.rollout.max_response_len = max_response_len
    c.rollout.temperature = 1.0
    c.rollout.top_p = 1.0

    c.seeds.refresh_interval = refresh_interval
    c.seeds.truncation = "ratio"
    c.seeds.ratio = ratio
    c.seeds.top_k = 32  # entropy truncation's k (used with --config.seeds.truncation=entropy)
    c.seeds.variant = seeds_variant

    c.loss.name = loss
    from tseeds_jax.rl import losses  # local: the registry, for the loss's own clip range

    own = losses.get(loss).default_hparams
    c.loss.clip_low = getattr(own, "clip_low", None)
    c.loss.clip_high = getattr(own, "clip_high", None)
    c.loss.clip_c = 10.0
    c.loss.agg_mode = "token-mean"
    c.loss.kl_coef = 0.0

    c.optim.lr = 1e-6
    c.optim.warmup_steps = 10
    c.optim.weight_decay = 0.1
    c.optim.grad_clip = 1.0
    c.optim.mini_batches = 1  # one update per batch (paper)
    return c


def paper_config(*, name: str, model_dir: str, arch: Mapping, data: str, template: str,
                 max_prompt_len: int, max_response_len: int, variants: Mapping[str, Slice],
                 variant: str, **recipe) -> ml_collections.ConfigDict:
    """The paper recipe for one model / data set on `variants[variant]`.

    name: run name (run_dir `runs/NAME`). model_dir: the HF folder for weights and tokenizer
    (a placeholder in shipped configs). arch: the model's config.json architecture fields, so that
    `tseeds plan` works without the weights. data: `REGISTRY_NAME:FILE` (tseeds_jax/data/registry.py).
    template: by name. max_prompt_len / max_response_len: tokens. recipe: `paper_recipe`'s
    keywords where a run differs: data_size (a seeded random subset; 0: all), reward,
    seeds_variant ("state+action" or "state"), batch_prompts (B), group_size (G), ratio,
    refresh_interval (T), loss, method. Raises ValueError naming `variant` when it is not in
    `variants`.
    """
    if variant not in variants:
        raise ValueError(f"{name}: unknown variant {variant!r}; known: {sorted(variants)}")
    hw = variants[variant]
    c = paper_recipe(default_config(), model_dir=model_dir, arch=arch, data=data,
                     template=template, max_prompt_len=max_prompt_len,
                     max_response_len=max_response_len, **recipe)
    c.run_dir = f"runs/{name}"
    c.optim.micro_batch_size = hw.micro_batch_size
    c.optim.grad_reduce = hw.grad_reduce
    c.mesh = ml_collections.ConfigDict(dict(data=hw.data, fsdp=hw.fsdp, tensor=hw.tensor))
    c.hardware.accelerator = hw.accelerator
    c.hardware.sampler_slots = hw.sampler_slots
    c.hardware.sampler_placement = hw.sampler_placement
    c.hardware.sampler_tensor = hw.sampler_tensor
    return c


# Qwen/Qwen2.5-Math-7B config.json (architecture fields; `tseeds plan` works without weights)
QWEN25_MATH_7B = dict(model_type="qwen2", vocab_size=152064, hidden_size=3584,
                      intermediate_size=18944, num_hidden_layers=28, num_attention_heads=28,
                      num_key_value_heads=4, tie_word_embeddings=False,
                      max_position_embeddings=4096, rope_theta=10000.0, rms_norm_eps=1e-6)


def qwen25_math_7b_base() -> ml_collections.ConfigDict:
    """The paper recipe on Qwen2.5-Math-7B / DAPO-Math-17k as on-policy DAPO (T = 1), the base of
    the loss family's and restart methods' paper-scale configs (config/methods.py turns it into
    each method). No hardware slice: set --config.mesh.* and --config.optim.micro_batch_size for
    your hardware as configs/qwen25_math_7b_dapo17k.py's variants do.

    Paths are placeholders: override --config.model.init=hf:DIR --config.tokenizer=hf:DIR
    --config.data.source=dapo_math_17k:PATH.
    """
    c = paper_recipe(default_config(), model_dir="/models/Qwen2.5-Math-7B", arch=QWEN25_MATH_7B,
                     data="dapo_math_17k:/data/dapo-math-17k.parquet", template="qwen_math",
                     max_prompt_len=1024, max_response_len=3072, refresh_interval=1)
    c.optim.micro_batch_size = 8
    c.mesh.fsdp = -1
    return c
