"""Training configuration: the typed schema, its ml_collections defaults and its validated form.

`TrainConfig` and its sections (`sections.py`) hold the one default and the comment of
every field. `default_config()` is the ConfigDict derived from them, which `configs/*.py` start
from and `--config.a.b=value` overrides; `TrainConfig.from_config(cd)` checks every value before
any work starts and turns the ConfigDict into the frozen dataclasses that the rest of the trainer
reads (nothing below this module sees a ConfigDict).
"""

from __future__ import annotations

import dataclasses

import ml_collections

import tseeds_jax.rl.config.checks as checks
import tseeds_jax.rl.config.compat as compat
import tseeds_jax.rl.config.lengths as lengths
from tseeds_jax.rl.config.fields import ConfigValueError, build, mapping, section, to_config_dict
from tseeds_jax.rl.config.sections import (
    AdvantageConfig,
    DataConfig,
    HardwareConfig,
    LearnerConfig,
    LoraTrainConfig,
    LossConfig,
    OffPolicyConfig,
    OptimConfig,
    RestartConfig,
    RolloutConfig,
    SeedsConfig,
    StaleConfig,
    TrainModelConfig,
)

__all__ = ["AdvantageConfig", "ConfigValueError", "DataConfig", "HardwareConfig",
           "LearnerConfig", "LoraTrainConfig", "LossConfig",
           "OffPolicyConfig", "OptimConfig", "RestartConfig", "RolloutConfig", "SeedsConfig",
           "StaleConfig", "TrainConfig", "TrainModelConfig", "default_config", "tiny_config"]

LOSS_AGG_MODES = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")
# seed selectors (seeds/selection.py)
TRUNCATIONS = ("ratio", "entropy", "success_target", "mixture", "mixture_spread")
VARIANTS = ("state+action", "state")
OLD_LOGP_MODES = ("auto", "shortcut", "recompute")
GRAD_REDUCE = ("micro_batch", "update")  # optim.grad_reduce (rl/learn/grad_accum.py)
OFFPOLICY_MISSING = ("error", "on_policy")
SAMPLER_PLACEMENTS = ("replica", "sharded", "decode")


def default_config() -> ml_collections.ConfigDict:
    """The ConfigDict of `TrainConfig`'s defaults (what configs/*.py start from)."""
    return to_config_dict(TrainConfig())


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
class TrainConfig:
    """The whole training config; every field's one default is here or in its section."""

    seed: int = 0  # run seed: data order, sampling and truncation all derive from it
    method: str = ""  # run label in metrics/reports ("" derives it: loss name, +seeds, +stale<s>)
    run_dir: str = "runs/default"  # checkpoints, metrics.jsonl, TensorBoard events
    steps: int = 20  # training steps (one step = one batch of B prompts x G responses)
    model: TrainModelConfig = section(TrainModelConfig)
    lora: LoraTrainConfig = section(LoraTrainConfig)  # low-rank adapters (rank 0: off)
    tokenizer: str = "char"  # "char" (built-in character vocabulary) | "spm:MODEL" | "hf:DIR"
    data: DataConfig = section(DataConfig)
    reward: str = "reasoning_gym"  # a registered reward name (tseeds_jax.rewards)
    # Code reward sandbox (docs/sandbox.md). Off by default: grading refuses to run (and the run
    # stops before its first step) unless the allowlisted root and the user, network, pid and
    # mount namespaces are all active; True grades with weaker isolation, recorded in each result.
    sandbox_allow_weak_isolation: bool = False
    sandbox_extra_binds: tuple[str, ...] = ()  # host paths the programs may read (read-only)
    rollout: RolloutConfig = section(RolloutConfig)
    seeds: SeedsConfig = section(SeedsConfig)
    loss: LossConfig = section(LossConfig)
    offpolicy: OffPolicyConfig = section(OffPolicyConfig)
    stale: StaleConfig = section(StaleConfig)
    restart: RestartConfig = section(RestartConfig)  # peer restart methods (rl/methods/prefix.py)
    advantage: AdvantageConfig = section(AdvantageConfig)
    optim: OptimConfig = section(OptimConfig)
    learner: LearnerConfig = section(LearnerConfig)  # the learner's row layout (packing)
    # devices per mesh axis; -1 fills with the devices left (model/sharding.py MeshSpec)
    mesh: dict[str, int] = mapping(dict(data=1, fsdp=-1, tensor=1))
    hardware: HardwareConfig = section(HardwareConfig)
    checkpoint_every: int = 0  # 0: only at exit (and on SIGTERM / SIGINT, rl/run/preemption.py)
    # Also checkpoint when host 0 last saved this many minutes ago (0 disables): bounds the work
    # a preemption without notice (SIGKILL, a lost VM) can cost, whatever the step time.
    checkpoint_every_minutes: float = 15.0
    # Orbax writes each checkpoint in the background while the next steps run (checkpoint.py).
    checkpoint_async: bool = True
    # Continuous checkpointing: also checkpoint when no write is running and host 0 last saved
    # this many seconds ago (0 disables); bounds what a 30-s preemption notice loses.
    checkpoint_continuous_s: float = 120.0
    # Seconds between a preemption notice (SIGTERM, GCE metadata) and the stop (Spot: ~30): a
    # final checkpoint is written at the next step boundary only if it fits (rl/run/preemption.py).
    preemption_window_s: float = 30.0
    keep_checkpoints: int = 2  # checkpoints kept on disk (older ones are deleted)
    log_every: int = 1  # steps between metric lines
    progress: bool = True  # a progress bar on stdout

    @property
    def method_label(self) -> str:
        from tseeds_jax.rl.config.family import derived_method

        return self.method or derived_method(self)

    @property
    def seeded(self) -> bool:
        return self.seeds.refresh_interval > 1

    @classmethod
    def from_config(cls, cd: ml_collections.ConfigDict | dict) -> TrainConfig:
        """The validated config of a ConfigDict or a (nested) dict such as a checkpoint's meta;
        a field it lacks takes the schema's default."""
        d = cd.to_dict() if isinstance(cd, ml_collections.ConfigDict) else dict(cd)
        cfg = build(cls, d)
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
        lengths.parse(r.length_distribution)  # read by the step-time estimates only
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
        if self.data.max_prompt_len < 1:
            bad("data.max_prompt_len", self.data.max_prompt_len, "must be >= 1")
        for axis in ("data", "fsdp", "tensor"):
            v = self.mesh.get(axis)
            if not isinstance(v, int) or (v < 1 and v != -1):
                bad(f"mesh.{axis}", v, "must be a positive integer or -1 (fill)")

    def _validate_family(self) -> None:
        """Loss hparams, method label, LUFFY trace source (family.py), then the stale, restart and
        combination checks (checks.py, compat.py)."""
        import tseeds_jax.rl.config.family as family

        def bad(field, value, why):
            raise ConfigValueError(f"config.{field}={value!r}: {why}")

        lo, op = self.loss, self.offpolicy
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
            if self.rollout.group_size < 2:
                bad("rollout.group_size", self.rollout.group_size,
                    "LUFFY groups need >= 2 samples (1 off-policy + G-1 on-policy)")
        if op.on_missing not in OFFPOLICY_MISSING:
            bad("offpolicy.on_missing", op.on_missing, f"known: {OFFPOLICY_MISSING}")
        family.check_run(lo, refresh_interval=self.seeds.refresh_interval, offpolicy_source=op.source)
        checks.sampling(self)  # no top-k / top-p truncation for training rollouts
        checks.stale(self)  # stale.* values and what each of its features needs
        checks.restart(self)
        checks.lora(self)
        checks.learner(self)
        compat.check(self)  # which features combine (one table)

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
            from tseeds_jax.chips import parse_accelerator

            try:
                acc = parse_accelerator(hw.accelerator, hbm_gib=hbm or None)
            except ValueError as e:
                bad("accelerator", hw.accelerator, str(e))
            if hw.num_devices and acc.devices and hw.num_devices != acc.devices:
                bad("num_devices", hw.num_devices,
                    f"{hw.accelerator} has {acc.devices} JAX devices")
