"""Shared builders for the trainer tests: a very small model on the compact chain-sum task."""

from __future__ import annotations

from tseeds_jax.rl.config import TrainConfig, tiny_config
from tseeds_jax.rl.setup import make_trainer


def parity_reward(texts, refs):
    """A reward with variance inside groups (the task's own reward is ~0 for a random model)."""
    return [(float(len(t) % 2), "parity") for t in texts]


def set_fields(c, overrides: dict) -> None:
    """Sets dotted config fields ("rollout.group_size": 4) of the ConfigDict `c` in place."""
    for key, value in overrides.items():
        node = c
        *path, last = key.split(".")
        for p in path:
            node = node[p]
        node[last] = value


def tiny_cd(run_dir, **overrides):
    c = tiny_config()
    c.run_dir = str(run_dir)
    c.steps = 4
    c.progress = False
    c.model.arch.hidden_size = 32
    c.model.arch.intermediate_size = 64
    c.model.arch.num_hidden_layers = 1
    c.model.arch.num_attention_heads = 2
    c.model.arch.num_key_value_heads = 1
    c.rollout.batch_prompts = 2
    c.rollout.group_size = 4
    c.rollout.max_response_len = 20
    c.optim.lr = 3e-3
    c.seeds.snapshots = False
    set_fields(c, overrides)
    return c


def tiny_trainer(run_dir, *, checkpoints=False, **overrides):
    cfg = TrainConfig.from_config(tiny_cd(run_dir, **overrides))
    return make_trainer(cfg, checkpoints=checkpoints, env_overrides={"reward_fn": parity_reward})
