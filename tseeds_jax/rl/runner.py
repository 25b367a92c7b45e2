"""Assembles a ready-to-run `Trainer` (env, checkpointer, sharding) from a validated config."""

from __future__ import annotations

import dataclasses

from tseeds_jax.rl.config import TrainConfig
from tseeds_jax.rl.setup import build_env
from tseeds_jax.rl.state_io import RunCheckpointer
from tseeds_jax.rl.trainer import Trainer


def make_trainer(cfg: TrainConfig, *, config_json: dict | None = None, checkpoints: bool = True,
                 env_overrides: dict | None = None) -> Trainer:
    env, _ = build_env(cfg)
    if checkpoints:
        env.checkpointer = RunCheckpointer(cfg.run_dir, keep_last=cfg.keep_checkpoints,
                                           response_width=cfg.rollout.max_response_len,
                                           snapshots=cfg.seeds.snapshots,
                                           config_json=config_json or dataclasses.asdict(cfg))
    for k, v in (env_overrides or {}).items():
        setattr(env, k, v)
    return Trainer(cfg, env)
