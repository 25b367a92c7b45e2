"""Training configuration: the ml_collections defaults and their validated, frozen form.

`configs/*.py` start from `default_config()` and override fields; `TrainConfig.from_config(cd)`
checks every value before any work starts and turns the ConfigDict into frozen dataclasses that
the rest of the trainer reads (nothing below this module sees a ConfigDict).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import ml_collections
from ml_collections import config_dict

LOSS_AGG_MODES = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")
# seed selectors (seeds/selection.py)
TRUNCATIONS = ("ratio", "entropy", "success_target", "mixture", "mixture_spread")
VARIANTS = ("state+action", "state")
OLD_LOGP_MODES = ("auto", "shortcut", "recompute")
GRAD_REDUCE = ("micro_batch", "update")  # optim.grad_reduce (rl/grad_accum.py)
OFFPOLICY_MISSING = ("error", "on_policy")
SAMPLER_PLACEMENTS = ("replica", "sharded", "decode")


class ConfigValueError(ValueError):
    """An invalid config value; the message names the dotted field and the value."""


def default_config() -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict()
    c.seed = 0  # run seed: data order, sampling and truncation all derive from it
    c.method = ""  # run label in metrics/reports ("" derives it: loss name, +seeds, +stale<s>)
    c.run_dir = "runs/default"  # checkpoints, metrics.jsonl, TensorBoard events
    c.steps = 20  # training steps (one step = one batch of B prompts x G responses)

    c.model = ml_collections.ConfigDict()
    c.model.init = "random"  # "random" | "orbax:DIR" (a tseeds checkpoint) | "hf:DIR" (HF folder)
    c.model.arch = ml_collections.ConfigDict(dict(  # used when init == "random"; HF field names
        model_type="qwen2", vocab_size=0, hidden_size=64, intermediate_size=128,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        tie_word_embeddings=True, max_position_embeddings=512, rope_theta=10000.0))
    c.model.param_dtype = "float32"
    c.model.dtype = "float32"  # compute dtype
    c.model.remat = False
    # Attention kernel: "auto" (splash on TPU, cuDNN on GPU for 16-bit inputs, XLA on CPU, chunked
    # XLA above 2,048 tokens) | "xla" (the reference) | "chunked" | "splash" | "cudnn".
    c.model.attention_impl = "auto"
    # The sampler's decode-step attention over the KV cache: "auto" (a ragged Pallas kernel that
    # reads only live cache blocks on TPU, XLA elsewhere) | "xla" (the reference) | "ragged".
    c.model.decode_attention_impl = "auto"
    # The sampler's KV cache: "auto" (the compute dtype) | "int8" (symmetric int8, one float32
    # scale per slot, kv head and position: about half the cache bytes of bfloat16).
    c.model.kv_cache_dtype = "auto"
    c.model.sampler_dtype = "float32"  # the sampler may cast the params pytree (e.g. bfloat16)

    c.tokenizer = "char"  # "char" (built-in character vocabulary) | "spm:MODEL" | "hf:DIR"

    c.data = ml_collections.ConfigDict()
    c.data.source = "reasoning_gym:chain_sum"  # "reasoning_gym:NAME" | "DATASET_NAME:PATH"
    c.data.params = ml_collections.ConfigDict({"min_terms": 3, "max_terms": 4, "min_digits": 1,
                                               "max_digits": 1}, type_safe=False)
    c.data.template = "plain"  # prompt template (tseeds_jax.data.templates): plain, raw, qwen_math...
    c.data.data_dir = ""  # where file datasets are built (tfds array_record); "": RUN_DIR/data
    c.data.max_prompt_len = 32  # tokens; longer prompts are skipped with a warning
    c.data.size = 100000  # number of procedural examples to draw from

    c.reward = "reasoning_gym"  # a registered reward name (tseeds_jax.rewards)
    # Code reward sandbox (docs/sandbox.md). Off by default: grading refuses to run (and the run
    # stops before its first step) unless the allowlisted root and the user, network, pid and
    # mount namespaces are all active; True grades with weaker isolation, recorded in each result.
    c.sandbox_allow_weak_isolation = False
    c.sandbox_extra_binds = ()  # host paths the programs may read (bound read-only), e.g. task files

    c.rollout = ml_collections.ConfigDict()
    c.rollout.batch_prompts = 4  # B: prompts per training batch
    c.rollout.group_size = 4  # G: responses per prompt
    c.rollout.max_response_len = 32  # R: tokens per response (seed + continuation)
    c.rollout.temperature = 1.0
    c.rollout.top_p = 1.0
    c.rollout.top_k = 0

    c.seeds = ml_collections.ConfigDict()
    c.seeds.refresh_interval = 1  # T: behavior snapshot every T steps; T=1 is on-policy DAPO
    # "ratio" | "entropy" | adaptive: "success_target", "mixture", "mixture_spread" (docs/adaptive_seeds.md)
    c.seeds.truncation = "ratio"
    c.seeds.ratio = 0.5  # ratio truncation: keep round(|o| * ratio) tokens (at most |o|-1)
    c.seeds.top_k = 32  # entropy truncation: pick uniformly among the k highest-entropy positions
    c.seeds.variant = "state+action"  # "state+action": seed tokens in the loss; "state": context only
    c.seeds.snapshots = True  # write each behavior snapshot pi_b as an Orbax historical checkpoint
    # success_target (adaptive seeds): restart where the estimated success rate is near `target`
    c.seeds.target = 0.5  # p*: the success rate a seeded group should have
    c.seeds.gamma = 1.0  # value-model shape before calibration: V = p + (r - p) (c / |o|)^gamma
    c.seeds.calibrate = True  # pick gamma online from realised continuation success
    c.seeds.ema = 0.5  # weight of new evidence in the per-prompt success estimate p(x)
    c.seeds.fallback = "ratio"  # rule for groups with no rollout of the needed kind

    c.loss = ml_collections.ConfigDict()
    c.loss.name = "dapo"  # a registered loss (tseeds_jax.rl.losses.get)
    # None keeps the loss's own clip range (dapo 0.2/0.28, gspo 3e-4/4e-4; rl/family.py); a number
    # overrides it for every loss that has the field.
    c.loss.clip_low = config_dict.placeholder(float)
    c.loss.clip_high = config_dict.placeholder(float)
    c.loss.clip_c = 10.0  # dual clip for negative advantages (DAPO recipe value)
    c.loss.agg_mode = "token-mean"
    c.loss.entropy_coef = 0.0
    c.loss.kl_coef = 0.0  # KL to the initial (reference) policy; 0 disables the reference model
    c.loss.kl_type = "k3"
    c.loss.params = ml_collections.ConfigDict({}, type_safe=False)  # loss-specific hparams by field
    c.loss.loss_scale = 0.0  # seq-mean-token-sum-norm divisor after the row mean; 0: max_response_len

    c.offpolicy = ml_collections.ConfigDict()  # LUFFY: 1 off-policy trace + G-1 on-policy per group
    c.offpolicy.source = ""  # "" off | "jsonl:PATH" | "task" | "model:hf:DIR|orbax:DIR|run:DIR"
    c.offpolicy.on_missing = "error"  # prompt without a trace: "error" | "on_policy" (G on-policy)

    c.stale = ml_collections.ConfigDict()  # M2PO: train on stale rollouts
    c.stale.steps = 0  # s: train step k on the batch generated at step k - s (0: on-policy)

    c.advantage = ml_collections.ConfigDict()
    c.advantage.norm_by_std = True  # GRPO (True) or Dr.GRPO (False)
    c.advantage.filter_groups = False  # DAPO dynamic sampling: drop all-equal groups, draw more
    c.advantage.max_gen_batches = 3  # cap on generation rounds per step when filtering
    c.advantage.overlong_buffer = 0  # DAPO soft overlong penalty buffer (tokens); 0 disables
    c.advantage.overlong_penalty = 1.0

    c.optim = ml_collections.ConfigDict()
    c.optim.lr = 1e-5
    c.optim.warmup_steps = 0
    c.optim.weight_decay = 0.0
    c.optim.b1 = 0.9
    c.optim.b2 = 0.999
    c.optim.eps = 1e-8
    c.optim.grad_clip = 1.0
    c.optim.mini_batches = 1  # optimizer updates per batch per epoch (paper default 1)
    c.optim.epochs = 1
    c.optim.micro_batch_size = 0  # sequences per micro-batch (0: the whole mini-batch)
    c.optim.old_logp = "auto"  # "auto" | "shortcut" (continuation tokens) | "recompute"
    c.optim.train_layers = "all"  # "all" | "head" (final norm + output head only)
    # Where micro-batch gradients are summed across devices: "micro_batch" (every micro-step,
    # gradients laid out like the parameters) | "update" (each device keeps its rows' gradient
    # unreduced in a full-size float32 buffer; one reduction per optimizer update: fewer
    # collective bytes by the number of micro-steps, more memory; rl/grad_accum.py)
    c.optim.grad_reduce = "micro_batch"

    c.mesh = ml_collections.ConfigDict(dict(data=1, fsdp=-1, tensor=1))

    # Target hardware: read by `tseeds plan` (tseeds_jax.scale) to size and check a run.
    c.hardware = ml_collections.ConfigDict()
    c.hardware.accelerator = ""  # "" | slice / host name: "v5p-64", "v6e-64", "8xH100", ...
    c.hardware.hbm_gib_per_device = 0.0  # 0: from the accelerator table (v5p 95, H100 80, ...)
    c.hardware.num_devices = 0  # 0: from the accelerator name (at run time: jax.device_count())
    c.hardware.sampler_slots = 0  # concurrent decode slots; 0: the sampler's default (<= 256)
    # Where sampling and the per-sequence statistics run: "replica" (a full parameter copy on one
    # device per host), "sharded" (the learner's sharded parameters and the whole mesh; on
    # several hosts data x fsdp must be a multiple of the host count) or "decode" (statistics as
    # "sharded"; sampling on a decode layout of its own over the same devices: tensor-parallel
    # replicas within a host, weights resharded at each sync, slots from memory;
    # sampling/layout.py). See docs/scale.md.
    c.hardware.sampler_placement = "replica"
    # "decode": devices per tensor-parallel replica (0: chosen by an HBM roofline, 1 on CPU).
    c.hardware.sampler_tensor = 0

    c.checkpoint_every = 0  # 0: only at exit (and on SIGTERM / SIGINT, rl/preemption.py)
    # Also checkpoint when host 0 last saved this many minutes ago (0 disables): bounds the work
    # a preemption without notice (SIGKILL, a lost VM) can cost, whatever the step time.
    c.checkpoint_every_minutes = 15.0
    # Orbax writes each checkpoint in the background while the next steps run (checkpoint.py).
    c.checkpoint_async = True
    # Continuous checkpointing: also checkpoint when no write is running and host 0 last saved
    # this many seconds ago (0 disables); bounds what a 30-s preemption notice loses.
    c.checkpoint_continuous_s = 120.0
    # Seconds between a preemption notice (SIGTERM, GCE metadata) and the stop (Spot: ~30): a
    # final checkpoint is written at the next step boundary only if it fits (rl/preemption.py).
    c.preemption_window_s = 30.0
    c.keep_checkpoints = 2
    c.log_every = 1
    c.progress = True
    return c


def tiny_config() -> ml_collections.ConfigDict:
    """The tiny default task: compact chain sums, a character tokenizer and a ~0.1M-param model.

    Shared by configs/tiny_*.py (CI smoke runs) and the demo; every field can be overridden.
    """
    c = default_config()
    c.data.source = "compact:chain_sum"
    c.data.params = ml_collections.ConfigDict({"min_terms": 3, "max_terms": 4, "min_digits": 1,
                                               "max_digits": 1}, type_safe=False)
    c.data.max_prompt_len = 16
    c.data.template = "raw"  # the compact prompt as is ("4-1-7:")
    c.reward = "compact_arith"
    c.tokenizer = "train:char"
    c.rollout.batch_prompts = 4
    c.rollout.group_size = 4
    c.rollout.max_response_len = 32
    c.optim.lr = 1e-4
    c.steps = 8
    return c


@dataclasses.dataclass(frozen=True)
class RolloutConfig:
    batch_prompts: int
    group_size: int
    max_response_len: int
    temperature: float
    top_p: float
    top_k: int


@dataclasses.dataclass(frozen=True)
class SeedsConfig:
    refresh_interval: int
    truncation: str
    ratio: float
    top_k: int
    variant: str
    snapshots: bool = True
    target: float = 0.5
    gamma: float = 1.0
    calibrate: bool = True
    ema: float = 0.5
    fallback: str = "ratio"


@dataclasses.dataclass(frozen=True)
class LossConfig:
    name: str
    clip_low: float | None  # None: the loss's own default (rl/family.py)
    clip_high: float | None
    clip_c: float
    agg_mode: str
    entropy_coef: float
    kl_coef: float
    kl_type: str
    params: dict[str, Any] = dataclasses.field(default_factory=dict)  # loss-specific hparams
    loss_scale: float = 0.0  # sum-norm constant; 0: max_response_len


@dataclasses.dataclass(frozen=True)
class OffPolicyConfig:
    source: str = ""  # LUFFY trace source ("" off)
    on_missing: str = "error"


@dataclasses.dataclass(frozen=True)
class StaleConfig:
    steps: int = 0  # M2PO stale-rollout lag s


@dataclasses.dataclass(frozen=True)
class AdvantageConfig:
    norm_by_std: bool
    filter_groups: bool
    max_gen_batches: int
    overlong_buffer: int
    overlong_penalty: float


@dataclasses.dataclass(frozen=True)
class OptimConfig:
    lr: float
    warmup_steps: int
    weight_decay: float
    b1: float
    b2: float
    eps: float
    grad_clip: float
    mini_batches: int
    epochs: int
    micro_batch_size: int
    old_logp: str
    train_layers: str
    grad_reduce: str = "micro_batch"

    @property
    def updates_per_batch(self) -> int:
        return self.mini_batches * self.epochs


@dataclasses.dataclass(frozen=True)
class HardwareConfig:
    """Target hardware for `tseeds plan`; 0 / "" mean "derive it" (see default_config)."""

    accelerator: str = ""
    hbm_gib_per_device: float = 0.0
    num_devices: int = 0
    sampler_slots: int = 0
    sampler_placement: str = "replica"
    sampler_tensor: int = 0


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    seed: int
    run_dir: str
    steps: int
    model: dict[str, Any]
    tokenizer: str
    data: dict[str, Any]
    reward: str
    rollout: RolloutConfig
    seeds: SeedsConfig
    loss: LossConfig
    advantage: AdvantageConfig
    optim: OptimConfig
    mesh: dict[str, int]
    checkpoint_every: int
    keep_checkpoints: int
    log_every: int
    progress: bool
    method: str = ""  # run label ("" derived; see `method_label`)
    sandbox_allow_weak_isolation: bool = False
    sandbox_extra_binds: tuple[str, ...] = ()
    offpolicy: OffPolicyConfig = OffPolicyConfig()
    stale: StaleConfig = StaleConfig()
    hardware: HardwareConfig = HardwareConfig()
    checkpoint_every_minutes: float = 0.0
    checkpoint_async: bool = False
    checkpoint_continuous_s: float = 0.0
    preemption_window_s: float = 30.0

    @property
    def method_label(self) -> str:
        from tseeds_jax.rl.family import derived_method

        return self.method or derived_method(self)

    @property
    def seeded(self) -> bool:
        return self.seeds.refresh_interval > 1

    @classmethod
    def from_config(cls, cd: ml_collections.ConfigDict | dict) -> TrainConfig:
        d = cd.to_dict() if isinstance(cd, ml_collections.ConfigDict) else dict(cd)
        cfg = cls(
            seed=d["seed"], run_dir=d["run_dir"], steps=d["steps"], model=d["model"],
            tokenizer=d["tokenizer"], data=d["data"], reward=d["reward"],
            rollout=RolloutConfig(**d["rollout"]), seeds=SeedsConfig(**d["seeds"]),
            loss=LossConfig(**d["loss"]), advantage=AdvantageConfig(**d["advantage"]),
            optim=OptimConfig(**d["optim"]), mesh=dict(d["mesh"]),
            checkpoint_every=d["checkpoint_every"], keep_checkpoints=d["keep_checkpoints"],
            log_every=d["log_every"], progress=d["progress"], method=d.get("method", ""),
            sandbox_allow_weak_isolation=d.get("sandbox_allow_weak_isolation", False),
            sandbox_extra_binds=tuple(d.get("sandbox_extra_binds") or ()),
            offpolicy=OffPolicyConfig(**d.get("offpolicy", {})),
            stale=StaleConfig(**d.get("stale", {})),
            hardware=HardwareConfig(**d.get("hardware", {})),
            checkpoint_every_minutes=d.get("checkpoint_every_minutes", 0.0),
            checkpoint_async=d.get("checkpoint_async", False),
            checkpoint_continuous_s=d.get("checkpoint_continuous_s", 0.0),
            preemption_window_s=d.get("preemption_window_s", 30.0))
        cfg.validate()
        return cfg

    def validate(self) -> None:
        def bad(field, value, why):
            raise ConfigValueError(f"config.{field}={value!r}: {why}")

        def positive_int(field, value):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                bad(field, value, "must be an integer >= 1")

        positive_int("steps", self.steps)
        if not isinstance(self.sandbox_allow_weak_isolation, bool):
            bad("sandbox_allow_weak_isolation", self.sandbox_allow_weak_isolation, "must be True or False")
        for p in self.sandbox_extra_binds:
            if not isinstance(p, str) or not p.startswith("/"):
                bad("sandbox_extra_binds", self.sandbox_extra_binds, f"{p!r} is not an absolute path")
        m = self.checkpoint_every_minutes
        if isinstance(m, bool) or not isinstance(m, int | float) or not m >= 0:
            bad("checkpoint_every_minutes", m, "must be a number >= 0 (0 disables)")
        if not isinstance(self.checkpoint_async, bool):
            bad("checkpoint_async", self.checkpoint_async, "must be True or False")
        m = self.checkpoint_continuous_s
        if isinstance(m, bool) or not isinstance(m, int | float) or not m >= 0:
            bad("checkpoint_continuous_s", m, "must be a number of seconds >= 0 (0 disables)")
        m = self.preemption_window_s
        if isinstance(m, bool) or not isinstance(m, int | float) or not m > 0:
            bad("preemption_window_s", m, "must be a number of seconds > 0")
        r, s, lo, a, o = self.rollout, self.seeds, self.loss, self.advantage, self.optim
        positive_int("rollout.batch_prompts", r.batch_prompts)
        positive_int("rollout.group_size", r.group_size)
        positive_int("rollout.max_response_len", r.max_response_len)
        if r.temperature <= 0:
            bad("rollout.temperature", r.temperature, "training rollouts need temperature > 0")
        if not 0 < r.top_p <= 1:
            bad("rollout.top_p", r.top_p, "must be in (0, 1]")
        if r.top_k < 0:
            bad("rollout.top_k", r.top_k, "must be >= 0 (0 disables top-k)")
        positive_int("seeds.refresh_interval", s.refresh_interval)
        if s.truncation not in TRUNCATIONS:
            bad("seeds.truncation", s.truncation, f"unknown truncation; known: {TRUNCATIONS}")
        if not 0 <= s.ratio < 1:
            bad("seeds.ratio", s.ratio, "must be in [0, 1)")
        positive_int("seeds.top_k", s.top_k)
        if not 0 < s.target < 1:
            bad("seeds.target", s.target, "must be in (0, 1)")
        if not s.gamma > 0:
            bad("seeds.gamma", s.gamma, "must be > 0")
        if not 0 < s.ema <= 1:
            bad("seeds.ema", s.ema, "must be in (0, 1]")
        if s.fallback not in ("ratio", "entropy"):
            bad("seeds.fallback", s.fallback, "must be a fixed rule: 'ratio' or 'entropy'")
        if s.variant not in VARIANTS:
            bad("seeds.variant", s.variant, f"unknown variant; known: {VARIANTS}")
        from tseeds_jax.rl import losses  # local: keeps config importable without JAX work

        if lo.name not in losses.names():
            bad("loss.name", lo.name, f"unknown loss; registered: {sorted(losses.names())}")
        if lo.agg_mode not in LOSS_AGG_MODES:
            bad("loss.agg_mode", lo.agg_mode, f"unknown mode; known: {LOSS_AGG_MODES}")
        if lo.clip_low is not None and not 0 <= lo.clip_low < 1:
            bad("loss.clip_low", lo.clip_low, "must be in [0, 1) (or None: the loss's default)")
        if lo.clip_high is not None and lo.clip_high < 0:
            bad("loss.clip_high", lo.clip_high, "must be >= 0 (or None: the loss's default)")
        if lo.clip_c <= 1:
            bad("loss.clip_c", lo.clip_c, "dual-clip constant must be > 1")
        if lo.kl_type not in ("k1", "k2", "k3", "abs", "kl", "mse", "low_var_kl"):
            bad("loss.kl_type", lo.kl_type, "unknown KL estimator")
        self._validate_family()
        self._validate_hardware()
        positive_int("advantage.max_gen_batches", a.max_gen_batches)
        if a.overlong_buffer < 0 or a.overlong_buffer >= r.max_response_len:
            bad("advantage.overlong_buffer", a.overlong_buffer,
                f"must be in [0, rollout.max_response_len={r.max_response_len})")
        if o.lr <= 0:
            bad("optim.lr", o.lr, "must be > 0")
        positive_int("optim.mini_batches", o.mini_batches)
        positive_int("optim.epochs", o.epochs)
        if o.old_logp not in OLD_LOGP_MODES:
            bad("optim.old_logp", o.old_logp, f"known: {OLD_LOGP_MODES}")
        if o.old_logp == "shortcut" and o.updates_per_batch > 1:
            bad("optim.old_logp", o.old_logp,
                "the on-policy shortcut is only exact with one update per batch")
        if o.train_layers not in ("all", "head"):
            bad("optim.train_layers", o.train_layers, "known: ('all', 'head')")
        if o.grad_reduce not in GRAD_REDUCE:
            bad("optim.grad_reduce", o.grad_reduce, f"known: {GRAD_REDUCE}")
        n = r.batch_prompts * r.group_size
        if n % o.mini_batches:
            bad("optim.mini_batches", o.mini_batches,
                f"must divide the batch of {n} sequences (batch_prompts x group_size)")
        mini = n // o.mini_batches
        if o.micro_batch_size < 0 or (o.micro_batch_size and mini % o.micro_batch_size):
            bad("optim.micro_batch_size", o.micro_batch_size,
                f"must divide the mini-batch of {mini} sequences (or be 0)")
        if self.data.get("max_prompt_len", 1) < 1:
            bad("data.max_prompt_len", self.data.get("max_prompt_len"), "must be >= 1")
        for axis in ("data", "fsdp", "tensor"):
            v = self.mesh.get(axis)
            if not isinstance(v, int) or (v < 1 and v != -1):
                bad(f"mesh.{axis}", v, "must be a positive integer or -1 (fill)")

    def _validate_family(self) -> None:
        """Loss hparams, method label, LUFFY trace source and M2PO stale mode (rl/family.py)."""
        from tseeds_jax.rl import family

        def bad(field, value, why):
            raise ConfigValueError(f"config.{field}={value!r}: {why}")

        lo, op, st = self.loss, self.offpolicy, self.stale
        if not isinstance(lo.params, dict):
            bad("loss.params", lo.params, "must be a dict of the loss's hparams")
        family.from_loss_config(lo)  # raises ConfigValueError naming the field
        if not isinstance(lo.loss_scale, (int, float)) or lo.loss_scale < 0:
            bad("loss.loss_scale", lo.loss_scale, "must be >= 0 (0: max_response_len)")
        if not isinstance(self.method, str):
            bad("method", self.method, "must be a string label")
        if not isinstance(op.source, str):
            bad("offpolicy.source", op.source, "must be a string")
        if op.source:
            ok = op.source == "task" or (op.source.startswith(("jsonl:", "model:"))
                                         and op.source.split(":", 1)[1] != "")
            if not ok:
                bad("offpolicy.source", op.source, "expected 'jsonl:PATH', 'task' or "
                    "'model:hf:DIR' / 'model:orbax:DIR' / 'model:run:DIR'")
            if lo.name != "luffy":
                bad("offpolicy.source", op.source,
                    f"off-policy traces have no behavior log-probs; they need loss.name='luffy' "
                    f"(got {lo.name!r})")
            if self.rollout.group_size < 2:
                bad("rollout.group_size", self.rollout.group_size,
                    "LUFFY groups need >= 2 samples (1 off-policy + G-1 on-policy)")
        if op.on_missing not in OFFPOLICY_MISSING:
            bad("offpolicy.on_missing", op.on_missing, f"known: {OFFPOLICY_MISSING}")
        if not isinstance(st.steps, int) or isinstance(st.steps, bool) or st.steps < 0:
            bad("stale.steps", st.steps, "must be an integer >= 0")
        if st.steps:
            if self.seeds.refresh_interval > 1:
                bad("stale.steps", st.steps,
                    "stale rollouts and Thinking Seeds refreshes do not combine (set "
                    "seeds.refresh_interval=1)")
            if self.optim.old_logp == "shortcut":
                bad("optim.old_logp", self.optim.old_logp,
                    "stale rollouts need the generation-time log-probs ('auto' or 'recompute')")
        if lo.name == "sis" and lo.params.get("scope") == "seed" and self.seeds.refresh_interval < 2:
            bad("loss.params.scope", "seed", "SIS on seed tokens needs seeds.refresh_interval > 1")

    def _validate_hardware(self) -> None:
        def bad(field, value, why):
            raise ConfigValueError(f"config.hardware.{field}={value!r}: {why}")

        hw = self.hardware
        if not isinstance(hw.accelerator, str):
            bad("accelerator", hw.accelerator, "must be a string like 'v5p-64' or '8xH100'")
        hbm = hw.hbm_gib_per_device
        if isinstance(hbm, bool) or not isinstance(hbm, (int, float)) or hbm < 0:
            bad("hbm_gib_per_device", hbm, "must be >= 0 (0: from the accelerator)")
        for name in ("num_devices", "sampler_slots", "sampler_tensor"):
            v = getattr(hw, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                bad(name, v, "must be an integer >= 0 (0: automatic)")
        if hw.sampler_placement not in SAMPLER_PLACEMENTS:
            bad("sampler_placement", hw.sampler_placement, f"known: {SAMPLER_PLACEMENTS}")
        if hw.accelerator:
            from tseeds_jax.scale.hardware import parse_accelerator  # local; imports no JAX

            try:
                acc = parse_accelerator(hw.accelerator, hbm_gib=hbm or None)
            except ValueError as e:
                bad("accelerator", hw.accelerator, str(e))
            if hw.num_devices and acc.devices and hw.num_devices != acc.devices:
                bad("num_devices", hw.num_devices,
                    f"{hw.accelerator} has {acc.devices} JAX devices")
