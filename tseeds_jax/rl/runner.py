"""Assembles a ready-to-run `Trainer` (env, mesh, checkpointer) from a validated config."""

from __future__ import annotations

import dataclasses
import math

import jax

from tseeds_jax.model import sharding
from tseeds_jax.rl.config import ConfigValueError, TrainConfig
from tseeds_jax.rl.learner import LearnerBatch
from tseeds_jax.rl.setup import build_env
from tseeds_jax.rl.state_io import RunCheckpointer
from tseeds_jax.rl.trainer import Trainer


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


def learner_batch_shardings(cfg: TrainConfig, mesh) -> LearnerBatch:
    n = cfg.rollout.batch_prompts * cfg.rollout.group_size
    t = cfg.data.max_prompt_len + cfg.rollout.max_response_len
    r = cfg.rollout.max_response_len

    def s(*shape):
        return sharding.batch_sharding(mesh, shape)

    return LearnerBatch(tokens_BT=s(n, t), attn_mask_BT=s(n, t), resp_mask_BR=s(n, r),
                        seed_mask_BR=s(n, r), behavior_logp_BR=s(n, r), sampler_logp_BR=s(n, r),
                        old_logp_BR=s(n, r), ref_logp_BR=s(n, r), advantages_B=s(n))


def make_trainer(cfg: TrainConfig, *, config_json: dict | None = None, checkpoints: bool = True,
                 env_overrides: dict | None = None) -> Trainer:
    mesh = build_mesh(cfg)
    env, _ = build_env(cfg)
    if checkpoints:
        env.checkpointer = RunCheckpointer(cfg.run_dir, keep_last=cfg.keep_checkpoints,
                                           response_width=cfg.rollout.max_response_len,
                                           snapshots=cfg.seeds.snapshots,
                                           config_json=config_json or dataclasses.asdict(cfg))
    for k, v in (env_overrides or {}).items():
        setattr(env, k, v)
    batch_shardings = None
    if math.prod(mesh.devices.shape) > 1:
        env.params = jax.device_put(env.params, sharding.param_shardings(env.params, mesh))
        batch_shardings = learner_batch_shardings(cfg, mesh)
    trainer = Trainer(cfg, env, batch_sharding=batch_shardings)
    if batch_shardings is not None:
        # Optimizer moments follow their parameters; counters are replicated. Placing the whole
        # state (not only params) makes restored checkpoints land on the same layout.
        trainer.state = jax.device_put(trainer.state,
                                       sharding.param_shardings(trainer.state, mesh))
    trainer.mesh = mesh
    return trainer
