"""The sections of the training config: one frozen dataclass each, holding the one default and the
comment of every field. `config.default_config()` (the ConfigDict that configs/*.py override),
`--config.a.b=value` overrides and `TrainConfig.from_config` are all derived from these
(`config_fields.py`)."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from tseeds_jax.rl.config.fields import ConfigValueError, mapping, optional


@dataclasses.dataclass(frozen=True)
class TrainModelConfig:
    """`config.model`: where the weights come from and how the model runs (not the architecture
    itself: that is `tseeds_jax.model.ModelConfig`, built by `model_config`)."""

    init: str = "random"  # "random" | "orbax:DIR" (a tseeds checkpoint) | "hf:DIR" (HF folder)
    # used when init == "random"; HF config.json field names (vocab_size 0: the tokenizer's)
    arch: dict[str, Any] = mapping(dict(
        model_type="qwen2", vocab_size=0, hidden_size=64, intermediate_size=128,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        tie_word_embeddings=True, max_position_embeddings=512, rope_theta=10000.0))
    param_dtype: str = "float32"  # parameters and AdamW moments ("float32" | "bfloat16")
    dtype: str = "float32"  # compute dtype
    remat: bool = False  # rematerialise each decoder layer in the backward pass
    # Attention kernel: "auto" (splash on TPU, cuDNN on GPU for 16-bit inputs, XLA on CPU, chunked
    # XLA above 2,048 tokens) | "xla" (the reference) | "chunked" | "splash" | "cudnn".
    attention_impl: str = "auto"
    # The sampler's decode-step attention over the KV cache: "auto" (a ragged Pallas kernel that
    # reads only live cache blocks on TPU, XLA elsewhere) | "xla" (the reference) | "ragged".
    decode_attention_impl: str = "auto"
    # The sampler's KV cache: "auto" (the compute dtype) | "int8" (symmetric int8, one float32
    # scale per slot, kv head and position: about half the cache bytes of bfloat16).
    kv_cache_dtype: str = "auto"
    sampler_dtype: str = "float32"  # the sampler may cast the params pytree (e.g. bfloat16)

    def run_settings(self) -> dict[str, Any]:
        """How the model runs, whatever the weights' source: the trainer (rl/setup.build_model)
        and the programs `tseeds plan` / `tseeds compile` size are built with these."""
        return dict(remat=self.remat, attention_impl=self.attention_impl,
                    decode_attention_impl=self.decode_attention_impl,
                    kv_cache_dtype=self.kv_cache_dtype)

    def model_config(self, *, vocab_size: int = 0, read_hf: bool = True):
        """The `ModelConfig` this section trains: config.json of `init = "hf:DIR"` when
        read_hf and that file exists, else `arch` (vocab_size 0 there: `vocab_size`)."""
        from tseeds_jax.model.config import ModelConfig

        run = dict(param_dtype=self.param_dtype, dtype=self.dtype, **self.run_settings())
        if read_hf and self.init.startswith("hf:"):
            path = os.path.join(self.init[3:], "config.json")
            if os.path.exists(path):
                return ModelConfig.from_hf_file(path, **run)
        arch = dict(self.arch)
        if not arch.get("vocab_size"):
            if not vocab_size:
                raise ConfigValueError(
                    "config.model.arch.vocab_size=0: the vocabulary size is unknown (set "
                    "model.arch.vocab_size, or point model.init at an HF folder)")
            arch["vocab_size"] = vocab_size
        return ModelConfig.from_hf_dict(arch, source="config.model.arch", **run)


# The projections an adapter may target (model/lora.py ALL_TARGETS; repeated here so that the
# config stays importable without JAX).
LORA_TARGETS = ("q", "k", "v", "o", "gate", "up", "down")
LORA_SAMPLER_MODES = ("merged", "lowrank")  # model/lora.py DECODE_MODES


@dataclasses.dataclass(frozen=True)
class LoraTrainConfig:
    """`config.lora`: low-rank adapters on a frozen base (docs/lora.md). rank 0 (the default):
    off, every parameter is trained. rank R > 0: adapters A [in, R] (random from the run seed)
    and B [R, out] (zero) on `targets` of every layer; only they are trained and have optimizer
    state, and only they move to the sampler and into checkpoints and pi_b snapshots."""

    rank: int = 0  # R; 0: off (full-parameter training); LoRA RL runs use 8-64
    # the adapter term is scaled by alpha / rank (alpha / sqrt(rank) with use_rslora); 32 is
    # 2 x rank 16, PEFT's common choice
    alpha: float = 32.0
    # rate on each adapter's input in the learner's update (0: none). Off by default: a mask
    # makes two log-prob passes of one policy disagree (ratio != 1 on on-policy tokens)
    dropout: float = 0.0
    targets: tuple[str, ...] = LORA_TARGETS  # projections adapted, from LORA_TARGETS
    use_rslora: bool = False  # scale alpha / sqrt(rank) (rank-stabilised LoRA)
    # where the adapters start: "" new (A random, B = 0: the base's logits bit for bit) |
    # "peft:DIR" (an HF PEFT adapter folder) | "orbax:DIR" (a `tseeds convert` adapter checkpoint)
    init: str = ""
    # how the sampler gets the adapters each step: "merged" (folded into its copy of the
    # weights, W + scale A B, then a plain decode step) | "lowrank" (the decode step computes
    # the adapter terms); only adapter bytes move either way. Default from the compiled TPU
    # programs (docs/lora.md, "Which decode step").
    sampler: str = "merged"

    @property
    def on(self) -> bool:
        return bool(self.rank)


@dataclasses.dataclass(frozen=True)
class DataConfig:
    """`config.data`: the prompts."""

    source: str = "reasoning_gym:chain_sum"  # "reasoning_gym:NAME" | "DATASET_NAME:PATH" | ...
    # the task's parameters (procedural sources), any types
    params: dict[str, Any] = mapping({"min_terms": 3, "max_terms": 4, "min_digits": 1,
                                      "max_digits": 1}, type_safe=False)
    template: str = "plain"  # prompt template (tseeds_jax.data.templates): plain, raw, qwen_math...
    data_dir: str = ""  # where file datasets are built (tfds array_record); "": RUN_DIR/data
    max_prompt_len: int = 32  # tokens; longer prompts are skipped with a warning
    size: int = 100000  # number of procedural examples to draw from (files: 0 = all)


@dataclasses.dataclass(frozen=True)
class RolloutConfig:
    """`config.rollout`: what each training step samples."""

    batch_prompts: int = 4  # B: prompts per training batch
    group_size: int = 4  # G: responses per prompt
    max_response_len: int = 32  # R: tokens per response (seed + continuation)
    # Sampling temperature (> 0 for training rollouts); the learner's log-probs use it too.
    temperature: float = 1.0
    top_p: float = 1.0  # nucleus sampling mass (1: off; training refuses < 1, checks.sampling)
    top_k: int = 0  # top-k sampling (0: off; training refuses > 0, checks.sampling)
    # response lengths a step-time estimate assumes (`tseeds plan` / `tseeds compile`; not used
    # by training): "lognormal:median=M,sigma=S" (fractions of R) | "full" (rl/config/lengths.py)
    length_distribution: str = "lognormal:median=0.3,sigma=1.0"


@dataclasses.dataclass(frozen=True)
class SeedsConfig:
    """`config.seeds`: Thinking Seeds restarts (refresh cycle, truncation rule, adaptive seeds)."""

    refresh_interval: int = 1  # T: behavior snapshot every T steps; T=1 is on-policy DAPO
    # "ratio" | "entropy" | adaptive: "success_target", "mixture", "mixture_spread"
    # (docs/adaptive_seeds.md)
    truncation: str = "ratio"
    ratio: float = 0.5  # ratio truncation: keep round(|o| * ratio) tokens (at most |o|-1)
    top_k: int = 32  # entropy truncation: pick uniformly among the k highest-entropy positions
    variant: str = "state+action"  # "state+action": seed tokens in the loss; "state": context only
    snapshots: bool = True  # write each behavior snapshot pi_b as an Orbax historical checkpoint
    # success_target (adaptive seeds): restart where the estimated success rate is near `target`
    target: float = 0.5  # p*: the success rate a seeded group should have
    gamma: float = 1.0  # value-model shape before calibration: V = p + (r - p) (c / |o|)^gamma
    calibrate: bool = True  # pick gamma online from realised continuation success
    ema: float = 0.5  # weight of new evidence in the per-prompt success estimate p(x)
    fallback: str = "ratio"  # rule for groups with no rollout of the needed kind


@dataclasses.dataclass(frozen=True)
class RestartConfig:
    """`config.restart`: peer restart methods as baselines (rl/methods/prefix.py, branch.py;
    docs/restart_methods.md).

    "" off | "prefixrl" (prefixes of successful base-model traces, fixed pool) | "questa" (a
    partial reference solution as a prefix) | "fr3e" / "cure" (branches from high-entropy tokens of
    the step's own rollouts). Prefixes of prefixrl/questa are context only (seeds.variant "state")."""

    method: str = ""  # "" | "prefixrl" | "questa" | "fr3e" | "cure"
    prefix_share: float = 0.5  # prefixrl / questa: share of a batch's groups that get a prefix
    prefix_ratio: float = 0.5  # prefixrl: prefix = this share of the successful trace's tokens
    pool_prompts: int = 64  # prefixrl: prompts tried by rejection sampling (once per run)
    pool_budget: int = 8  # prefixrl: samples per pool prompt (the budget); first success kept
    hint_start: float = 0.5  # questa: hint = this share of the reference solution's tokens ...
    hint_end: float = 0.25  # ... and this share from step round(hint_switch * steps) on
    hint_switch: float = 0.5  # questa: where the hint share drops (a share of the steps)
    branch_base: int = 0  # fr3e / cure: first-pass rollouts per prompt (0: group_size // 2)
    branch_points: int = 2  # fr3e / cure: high-entropy anchors per group; the other G - base
    # samples of the group are split evenly over them (branch rollouts count in the step's batch)
    branch_top_k: int = 1  # anchor = a uniform pick among a rollout's k highest-entropy tokens
    value_beta: float = 1.0  # fr3e: branch advantages x exp(-beta (V(anchor) - V(prompt)))
    stage1_frac: float = 0.5  # cure: branching for this share of steps, then plain DAPO


@dataclasses.dataclass(frozen=True)
class LossConfig:
    """`config.loss`: the policy loss (a registered family member) and its hyperparameters."""

    name: str = "dapo"  # a registered loss (tseeds_jax.rl.losses.get)
    # None keeps the loss's own clip range (dapo 0.2/0.28, gspo 3e-4/4e-4; rl/config/family.py); a
    # number overrides it for every loss that has the field.
    clip_low: float | None = optional(float)  # ratio floor 1 - clip_low
    clip_high: float | None = optional(float)  # ratio ceiling 1 + clip_high
    clip_c: float = 10.0  # dual clip for negative advantages (DAPO recipe value)
    agg_mode: str = "token-mean"  # how token losses aggregate (config.LOSS_AGG_MODES)
    entropy_coef: float = 0.0  # entropy bonus weight
    kl_coef: float = 0.0  # KL to the initial (reference) policy; 0 disables the reference model
    kl_type: str = "k3"  # KL estimator
    params: dict[str, Any] = mapping({}, type_safe=False)  # loss-specific hparams by field name
    # seq-mean-token-sum-norm divisor after the row mean; 0: max_response_len
    loss_scale: float = 0.0


@dataclasses.dataclass(frozen=True)
class OffPolicyConfig:
    """`config.offpolicy`: LUFFY, 1 off-policy trace + G-1 on-policy responses per group."""

    source: str = ""  # "" off | "jsonl:PATH" | "task" | "model:hf:DIR|orbax:DIR|run:DIR"
    on_missing: str = "error"  # prompt without a trace: "error" | "on_policy" (G on-policy)


@dataclasses.dataclass(frozen=True)
class StaleConfig:
    """`config.stale`: training on stale rollouts: M2PO's fixed lag, or partial rollouts under a
    bounded staleness (docs/async.md); rollout correction."""

    steps: int = 0  # s: train step k on the batch generated at step k - s (0: on-policy)
    # s >= 1: generate batch k + s in a worker thread while the learner updates batch k (the
    # same batches and numbers as without; costs one copy of the parameters; docs/async.md)
    overlap: bool = False
    # Partial rollouts (docs/async.md, rl/rollout/pool.py): a step decodes at most `partial_tokens`
    # new tokens per response; unfinished responses are interrupted and continued by the next
    # policies as seeds. 0: off (every response runs to its end in the step that starts it).
    partial_tokens: int = 0
    max_staleness: int = 1  # partial rollouts: steps a trained group's oldest token may lag
    groups_in_flight: int = 0  # partial rollouts: groups decoding at once (0: B (max_staleness + 1))
    # partial rollouts: a call with due responses stops the others when the last due one ends
    # (they decode until then, not C tokens; sampling.generate(interruptible=...))
    partial_interrupt: bool = True
    # Rollout correction (rl/learn/correction.py): "off" | "token_mask" | "seq_mask" drop
    # tokens / rows whose sampler-vs-learner ratio leaves [1/t, t], t = correction_threshold.
    correction: str = "off"
    correction_threshold: float = 2.0  # t of the rollout correction's [1/t, t] band (> 1)


@dataclasses.dataclass(frozen=True)
class AdvantageConfig:
    """`config.advantage`: group-relative advantages and DAPO's filters."""

    norm_by_std: bool = True  # GRPO (True) or Dr.GRPO (False)
    filter_groups: bool = False  # DAPO dynamic sampling: drop all-equal groups, draw more
    max_gen_batches: int = 3  # cap on generation rounds per step when filtering
    overlong_buffer: int = 0  # DAPO soft overlong penalty buffer (tokens); 0 disables
    overlong_penalty: float = 1.0  # the penalty at the end of the buffer


@dataclasses.dataclass(frozen=True)
class OptimConfig:
    """`config.optim`: AdamW and how a batch is split into updates and micro-batches."""

    lr: float = 1e-5  # peak learning rate
    warmup_steps: int = 0  # linear warmup
    weight_decay: float = 0.0  # AdamW decoupled weight decay
    b1: float = 0.9  # Adam first-moment decay
    b2: float = 0.999  # Adam second-moment decay
    eps: float = 1e-8  # Adam epsilon
    grad_clip: float = 1.0  # global gradient norm clip
    mini_batches: int = 1  # optimizer updates per batch per epoch (paper default 1)
    epochs: int = 1  # passes over each batch
    micro_batch_size: int = 0  # sequences per micro-batch (0: the whole mini-batch)
    old_logp: str = "auto"  # "auto" | "shortcut" (continuation tokens) | "recompute"
    train_layers: str = "all"  # "all" | "head" (final norm + output head only)
    # Where micro-batch gradients are summed across devices: "micro_batch" (every micro-step,
    # gradients laid out like the parameters) | "update" (each device keeps its rows' gradient
    # unreduced in a full-size float32 buffer; one reduction per optimizer update: fewer
    # collective bytes by the number of micro-steps, more memory; rl/learn/grad_accum.py)
    grad_reduce: str = "micro_batch"

    @property
    def updates_per_batch(self) -> int:
        return self.mini_batches * self.epochs


@dataclasses.dataclass(frozen=True)
class HardwareConfig:
    """`config.hardware`: the target hardware, read by `tseeds plan` / `tseeds compile` to size
    and check a run, and where the sampler runs."""

    accelerator: str = ""  # "" | slice / host name: "v5p-64", "v6e-64", "8xH100", ...
    hbm_gib_per_device: float = 0.0  # 0: from the accelerator table (v5p 95, H100 80, ...)
    num_devices: int = 0  # 0: from the accelerator name (at run time: jax.device_count())
    sampler_slots: int = 0  # concurrent decode slots; 0: the sampler's default (<= 256)
    # Where sampling and the per-sequence statistics run: "replica" (a full parameter copy on one
    # device per host), "sharded" (the learner's sharded parameters and the whole mesh; on
    # several hosts data x fsdp must be a multiple of the host count) or "decode" (statistics as
    # "sharded"; sampling on a decode layout of its own over the same devices: tensor-parallel
    # replicas within a host, weights resharded at each sync, slots from memory;
    # sampling/layout.py). See docs/scale.md.
    sampler_placement: str = "replica"
    # "decode": devices per tensor-parallel replica (0: chosen by an HBM roofline, 1 on CPU).
    sampler_tensor: int = 0


@dataclasses.dataclass(frozen=True)
class LearnerConfig:
    """`config.learner`: how the update and the statistics passes lay sequences out in rows
    (rl/learn/layout.py; docs/decisions.md for the default)."""

    # "padded": one sequence per row at prompt width + response width; "packed": each
    # micro-batch's (and each statistics chunk's) sequences packed into rows, attention masked
    # to each sequence, positions restarting per sequence: the same numbers, fewer pad tokens.
    layout: str = "padded"
    # Packed rows' length in tokens (0: data.max_prompt_len + rollout.max_response_len, which
    # holds any sequence); never below that sum.
    packed_row_len: int = 0
