"""Assembles a run from a validated `TrainConfig`: the env (tokenizer, prompt stream, model, sampler,
rewards), the mesh, the checkpointer and the `Trainer` (`make_trainer`)."""

from __future__ import annotations

import dataclasses
import logging
import math
import os
from typing import Any

import jax
import numpy as np
from flax import nnx

import tseeds_jax.rl.config.compat as compat
from tseeds_jax.data.loader import ExampleLoader
from tseeds_jax.model import ModelConfig, sharding
from tseeds_jax.rl.builders import build_model, build_source, build_tokenizer
from tseeds_jax.rl.config.errors import ConfigValueError
from tseeds_jax.rl.config.schema import TrainConfig
from tseeds_jax.rl.learn import adapters as adapters_lib
from tseeds_jax.rl.rollout import streams
from tseeds_jax.rl.run import run_files
from tseeds_jax.rl.run.state_io import RunCheckpointer
from tseeds_jax.rl.trainer import TrainEnv, Trainer

log = logging.getLogger(__name__)


class PromptStream:
    """The trainer's prompts: `take(n)` encodes the next n prompts of a `data.ExampleLoader`.

    The stream is global: every host draws the same batches (the trainer keeps its own slice,
    `SourceContext.local`), so the loader runs as one process. The order is reshuffled every epoch from
    `seed`; `get_state()` / `set_state()` resume it exactly. Over-long prompts are skipped (and
    counted) so that every drawn prompt fits the prompt width.
    """

    def __init__(self, source, encode, max_prompt_len: int, *, seed: int, encode_text=None):
        """encode: a prompt (template applied) -> ids; encode_text: plain text -> ids (QuestA's
        hints, rl/methods/prefix.py; None: `encode`)."""
        self.encode, self.max_len = encode, max_prompt_len
        self.encode_text = encode_text or encode
        # Its own random stream: the loader's [seed, epoch] would reuse streams drawn from [seed, k].
        order_seed = int(np.random.SeedSequence([seed, 0xDA7A]).generate_state(1)[0])
        self.loader = ExampleLoader(source, batch_size=1, seed=order_seed, process_index=0,
                                    process_count=1)
        self.skipped = 0

    def take(self, n: int) -> tuple[list[list[int]], list[Any]]:
        prompts, refs, in_a_row = [], [], 0
        # Skips in a row over two epochs' worth cover a whole epoch: no prompt fits. 1000 bounds
        # the wait on big sources.
        limit = min(1000, 2 * self.loader.num_examples_per_epoch)
        while len(prompts) < n:
            (ex,) = next(self.loader)
            ids = self.encode(ex["prompt"])
            if len(ids) > self.max_len:
                if not self.skipped:
                    log.warning("data: skipping prompts longer than data.max_prompt_len=%d tokens "
                                "(first: %d tokens, id %s)", self.max_len, len(ids), ex.get("id"))
                self.skipped += 1
                in_a_row += 1
                if in_a_row >= limit:
                    raise ValueError(f"data: the last {in_a_row} prompts drawn all exceed "
                                     f"data.max_prompt_len={self.max_len}")
                continue
            in_a_row = 0
            prompts.append(ids)
            refs.append(ex["reference"])
        return prompts, refs

    def get_state(self) -> dict[str, Any]:
        return {**self.loader.get_state(), "skipped": self.skipped}

    def set_state(self, state: dict[str, Any]) -> None:
        state = dict(state)
        self.skipped = int(state.pop("skipped", 0))
        if "version" not in state:  # {"position": p} from before the loader: its order is gone
            epoch, position = divmod(int(state["position"]), self.loader.num_examples_per_epoch)
            log.warning("data: the checkpoint predates the per-epoch data order; resuming at "
                        "epoch %d, offset %d of the new order", epoch, position)
            state = {**self.loader.get_state(), "epoch": epoch, "position": position}
        self.loader.set_state(state)


def make_sample_fn(cfg: TrainConfig, graphdef, stop_tokens, max_prefill: int, model_cfg=None,
                   frozen=None):
    """The run's sampler: sample_fn(params, requests, budgets, seed, interruptible=None).
    frozen: a LoRA run's `adapters.Frozen` (`params` are then the adapters; the sampler keeps
    its own base, `adapters.SamplerWeights`)."""
    from tseeds_jax import sampling

    r = cfg.rollout
    sync = decode_sync(cfg, model_cfg, max_prefill) \
        if cfg.hardware.sampler_placement == "decode" else None
    weights = (None if frozen is None else
               adapters_lib.SamplerWeights(frozen, cfg.lora.sampler, cfg.model.sampler_dtype))

    def sample_fn(params, requests, budgets, seed, interruptible=None):
        # seed = (stream seed, global index of the first request): every request's random stream
        # depends only on its global position, whatever the host count, slot count or batching.
        # (`where` may also list each request's global index explicitly.)
        stream, where = seed if isinstance(seed, tuple) else (seed, 0)
        index = range(where, where + len(requests)) if isinstance(where, int) else where
        if len(index) != len(requests):
            raise ValueError(f"sample_fn: {len(index)} request indices for {len(requests)} requests")
        seeds = [streams.request_seed(stream, i) for i in index]
        slots = cfg.hardware.sampler_slots or None
        if sync is not None:
            params = sync(params)  # a LoRA run's adapters only
            slots = slots or sync.slots(len(requests))
        model = (graphdef, params) if weights is None else weights(
            params, None if sync is None else sync.mesh)
        results = sampling.generate(model, requests, max_new_tokens=budgets,
                                    temperature=r.temperature, top_p=r.top_p, top_k=r.top_k,
                                    seed=seeds, stop_tokens=stop_tokens,
                                    max_prefill_length=max_prefill, num_slots=slots,
                                    interruptible=interruptible)  # partial rollouts
        out = []
        for res in results:
            if res.finish_reason == "error":
                raise RuntimeError(f"sampler rejected a training request: {res.error}")
            out.append((res.tokens, res.logprobs, res.finish_reason))
        return out

    sample_fn.weight_sync = sync
    sample_fn.lora_weights = weights
    return sample_fn


def decode_sync(cfg: TrainConfig, model_cfg: ModelConfig, max_prefill: int, devices=None):
    """The decode layout's weight sync for this run (`sampling.layout.WeightSync`), sized for
    the run's largest sampler call (a refresh's behavior requests, else a step's rows) on
    `devices` (default: all of them): the inputs `tseeds plan` and `tseeds compile` give the
    same decision (tseeds_jax/decode_layout.py)."""
    from tseeds_jax import chips
    from tseeds_jax.decode_layout import decode_requests
    from tseeds_jax.sampling import core, layout

    if model_cfg is None:
        raise ValueError("hardware.sampler_placement='decode' needs the model config")
    chip = chips.chip_of_devices(devices or jax.devices())
    r = cfg.rollout
    return layout.WeightSync(
        model_cfg, sampler_dtype=cfg.model.sampler_dtype,
        requests=decode_requests(r.batch_prompts, r.group_size, cfg.seeds.refresh_interval),
        cache_len=core.cache_bucket(max_prefill), tensor=cfg.hardware.sampler_tensor, chip=chip,
        hbm_bytes=chips.hbm_bytes(chip.family if chip else None, cfg.hardware.hbm_gib_per_device),
        lora=adapters_lib.lora_shape(cfg.lora, model_cfg))


def make_reward_fn(name: str):
    from tseeds_jax import rewards  # noqa: F401  (registers the built-in rewards)
    from tseeds_jax.rewards import compact  # noqa: F401
    from tseeds_jax.rewards.registry import score_batch

    def reward_fn(texts, refs):
        return [(res.score, res.reason) for res in score_batch(name, texts, refs)]

    return reward_fn


def build_env(cfg: TrainConfig, *, checkpointer=None, model=None) -> tuple[TrainEnv, Any]:
    """(env, tokenizer). model: the run's starting `Transformer` instead of `config.model.init`
    (the demo's base policies, already in memory; a LoRA run adapts it)."""
    from tseeds_jax.rewards import health, sandbox

    sandbox.configure(allow_weak_isolation=cfg.sandbox_allow_weak_isolation,
                      extra_binds=cfg.sandbox_extra_binds)
    if cfg.reward == "code":
        health.preflight()  # a sandbox that refuses to grade stops the run before its first step
    source = build_source(cfg)
    tok = build_tokenizer(cfg, source)
    if model is None:
        model = build_model(cfg, tok.vocab_size)
    elif model.cfg.vocab_size < tok.vocab_size:
        raise ConfigValueError(f"the given model's vocab_size={model.cfg.vocab_size} is smaller "
                               f"than the tokenizer's {tok.vocab_size}")
    frozen = None
    if cfg.lora.rank:  # adapters on the loaded base; the train state holds only them
        graphdef, params, frozen = adapters_lib.split(
            adapters_lib.adapt(model, cfg.lora, cfg.seed), cfg.seed)
    else:
        graphdef, params = nnx.split(model)
    from tseeds_jax.data.templates import encode_prompt, stop_token_ids

    max_prompt = cfg.data.max_prompt_len
    template = cfg.data.template
    stream = PromptStream(source, lambda text: encode_prompt(tok, template, text), max_prompt,
                          seed=cfg.seed, encode_text=tok.encode)
    stops = stop_token_ids(tok, template)
    sample_fn = make_sample_fn(cfg, graphdef, stops, max_prompt + cfg.rollout.max_response_len,
                               model_cfg=model.cfg, frozen=frozen)
    env = TrainEnv(graphdef=graphdef, params=params, sample_fn=sample_fn,
                   reward_fn=make_reward_fn(cfg.reward),
                   decode=lambda ids: tok.decode(ids, skip_special_tokens=True),
                   prompts=stream, pad_id=int(tok.pad_id), checkpointer=checkpointer,
                   # a LoRA run's reference is its frozen base without adapters (no copy)
                   ref_params=params if cfg.loss.kl_coef and frozen is None else None,
                   frozen=frozen)
    if cfg.offpolicy.source:  # LUFFY traces; errors name the file / field (rl/methods/traces.py)
        from tseeds_jax.rl.methods.traces import build_trace_source

        env.offpolicy = build_trace_source(cfg, tok, encode_prompt=stream.encode,
                                           build_model=build_model, load_run=load_run,
                                           source=source)
    return env, tok


def load_run(run_dir: str, step: int | None = None):
    """(graphdef, params, TrainConfig, tokenizer) of a training run's checkpoint (latest by
    default), its model rebuilt from what the checkpoint records it started from
    (tseeds_jax/rl/run/loaded.py; a LoRA run's adapters merged into its base)."""
    from tseeds_jax.rl.run.loaded import load_run as _load_run

    return _load_run(run_dir, step)


def record_model_source(cfg: TrainConfig, model=None) -> dict:
    """The checkpoint meta field that says what the run's model started from
    (rl/run/source.py). model: the starting model given in memory, before any adapters; it is
    saved as RUN_DIR/base_model (a run with checkpoints of another base there is refused)."""
    from tseeds_jax.rl.run import source as source_lib

    out = {}
    if model is None:
        out["model_source"] = source_lib.init_source(cfg.model.init)
        return out
    from tseeds_jax import hf

    rec = source_lib.saved_source(hf.params_of(model))
    out["model_source"] = rec
    name = source_lib.SAVED_BASE_DIR
    remote = run_files.is_remote(cfg.run_dir)
    if remote:
        run_files.pull(cfg.run_dir, name)
    local = os.path.join(run_files.local_dir(cfg.run_dir), name)
    if os.path.isdir(local):
        have = source_lib.saved_source(hf.params_of(hf.load_checkpoint_model(local)))
        if have["sha256"] == rec["sha256"]:
            return out
        from tseeds_jax import checkpoint

        ckpt = os.path.join(cfg.run_dir, "ckpt")
        if epath_dir(ckpt) and checkpoint.Checkpoints(ckpt, keep_last=None).steps():
            raise source_lib.RunSourceError(
                f"{local}: the run's saved base model differs from the model given now "
                f"(sha256 {have['sha256'][:16]}... vs {rec['sha256'][:16]}...) and {ckpt} holds "
                "checkpoints trained on the saved one; use another run_dir")
    if jax.process_index() == 0:  # one writer; every host reads the same folder
        hf.save_checkpoint_model(model, local, overwrite=True)
        if remote:
            run_files.push(cfg.run_dir, name)
    return out


def epath_dir(path: str) -> bool:
    from etils import epath

    return epath.Path(path).is_dir()


def build_mesh(cfg: TrainConfig):
    """The training mesh over all devices; checks the batch against the mesh before any work."""
    try:
        mesh = sharding.make_mesh(cfg.mesh)
    except ValueError as e:
        raise ConfigValueError(f"config.mesh={cfg.mesh}: {e}") from None
    rows = cfg.rollout.batch_prompts * cfg.rollout.group_size
    split = mesh.shape["data"] * mesh.shape["fsdp"]
    if rows % split:
        raise ConfigValueError(
            f"config.rollout.batch_prompts={cfg.rollout.batch_prompts} x group_size="
            f"{cfg.rollout.group_size} = {rows} sequences is not divisible by the mesh's batch "
            f"axes data x fsdp = {split} (config.mesh={cfg.mesh})")
    if cfg.rollout.batch_prompts % jax.process_count():
        raise ConfigValueError(
            f"config.rollout.batch_prompts={cfg.rollout.batch_prompts} is not divisible by the "
            f"{jax.process_count()} processes")
    return mesh


def make_trainer(cfg: TrainConfig, *, config_json: dict | None = None, checkpoints: bool = True,
                 env_overrides: dict | None = None, lag: int | None = None,
                 model=None) -> Trainer:
    """A ready-to-run `Trainer`. lag: M2PO's lag machinery with this many steps instead of
    `stale.steps` (tests run it with lag 0). model: the starting `Transformer` (`build_env`)."""
    compat.check(cfg, hosts=jax.process_count())  # the combination table, with the hosts
    mesh = build_mesh(cfg)
    # The base is recorded before build_env attaches a LoRA run's adapters to `model`.
    sources = record_model_source(cfg, model) if checkpoints else None
    env, tok = build_env(cfg, model=model)
    if checkpoints:
        from tseeds_jax.rl.run.source import tokenizer_source

        sources["tokenizer"] = tokenizer_source(cfg.tokenizer, cfg.run_dir, tok)
        env.checkpointer = RunCheckpointer(cfg.run_dir, keep_last=cfg.keep_checkpoints,
                                           response_width=cfg.rollout.max_response_len,
                                           snapshots=cfg.seeds.snapshots,
                                           config_json=config_json or dataclasses.asdict(cfg),
                                           run_meta=sources)
    for k, v in (env_overrides or {}).items():
        setattr(env, k, v)
    several = math.prod(mesh.devices.shape) > 1
    if several:
        env.params = jax.device_put(env.params, sharding.param_shardings(env.params, mesh))
        if env.frozen is not None:  # a LoRA run's base: sharded as full training shards it
            states = env.frozen.states
            env.frozen = env.frozen.placed(*jax.device_put(
                states, sharding.param_shardings(states, mesh)))
            if getattr(env.sample_fn, "lora_weights", None) is not None:
                env.sample_fn.lora_weights.use(env.frozen)
    trainer = Trainer(cfg, env, mesh=mesh, lag=lag)
    if several:
        # Optimizer moments follow their parameters; counters are replicated. Placing the whole
        # state (not only params) makes restored checkpoints land on the same layout.
        trainer.state = jax.device_put(trainer.state,
                                       sharding.param_shardings(trainer.state, mesh))
    return trainer
