"""Checkpoints of a training run: train state, seed cache and data position, resumed exactly.

    RUN_DIR/ckpt/<step>/...                 TrainState + seed-cache arrays; meta: data position,
                                            seed-cache prompts/references, run config
    RUN_DIR/ckpt/historical/behavior-<step> behavior-policy snapshot of each refresh (pi_b)
    RUN_DIR/ckpt/historical/nan-<step>      the state at a non-finite loss, for inspection
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import jax
import numpy as np

from tseeds_jax import checkpoint
from tseeds_jax.seeds import SeedCache


class RunCheckpointer:
    def __init__(self, run_dir: str, *, keep_last: int = 2, response_width: int,
                 snapshots: bool = True, config_json: dict | None = None):
        self.ckpts = checkpoint.Checkpoints(os.path.join(run_dir, "ckpt"), keep_last=keep_last)
        self.response_width = response_width
        self.snapshots = snapshots
        self.config_json = config_json or {}

    def _tree(self, state, cache: SeedCache):
        return {"train": state, "seed_cache": cache.to_pytree(self.response_width)}

    def save(self, step: int, state, cache: SeedCache, prompts, *, tag: str = "") -> str:
        tree = self._tree(state, cache)
        meta = {"step": step, "data": prompts.get_state(), "seed_cache": cache.to_json(),
                "tag": tag, "config": self.config_json}
        if tag == "nan":
            name = f"nan-{step:08d}"
            self.ckpts.save_historical(name, tree, meta, overwrite=True)
            return str(self.ckpts.directory / checkpoint.HISTORICAL_DIR / name)
        if step not in self.ckpts.steps():
            self.ckpts.save(step, tree, meta)
        self.ckpts.wait()
        return str(self.ckpts.directory / str(step))

    def save_behavior_snapshot(self, step: int, params) -> None:
        if self.snapshots:
            self.ckpts.save_historical(f"behavior-{step:08d}", params, {"step": step},
                                       overwrite=True)

    def restore_latest(self, state_template) -> tuple[int, Any, SeedCache, dict] | None:
        """(step, TrainState, SeedCache, data position) of the latest checkpoint, or None."""
        step = self.ckpts.latest_step()
        if step is None:
            return None
        meta = self.ckpts.read_meta(step)
        # The seed-cache arrays have data-dependent shapes: read them without a target.
        raw, _ = self.ckpts.restore(step)
        target = {"train": checkpoint.abstract_target(state_template),
                  "seed_cache": jax.tree_util.tree_map(np.asarray, raw["seed_cache"])}
        tree, _ = self.ckpts.restore(step, target=target)
        cache = SeedCache.from_state(tree["seed_cache"], meta["seed_cache"])
        return int(meta["step"]), tree["train"], cache, meta["data"]


def load_run(run_dir: str, step: int | None = None):
    """(graphdef, params, TrainConfig, tokenizer) of a training run's checkpoint (latest by default).

    The run's config is read from the checkpoint's meta, so evaluation needs only the folder.
    """
    from flax import nnx

    from tseeds_jax.rl.config import TrainConfig
    from tseeds_jax.rl.setup import build_model, build_source, build_tokenizer

    ckpt_dir = os.path.join(run_dir, "ckpt")
    if not os.path.isdir(ckpt_dir):
        raise FileNotFoundError(f"{run_dir}: not a training run (no ckpt/ folder)")
    ckpts = checkpoint.Checkpoints(ckpt_dir, keep_last=None)
    steps = ckpts.steps()
    if not steps:
        raise FileNotFoundError(f"{ckpt_dir}: no checkpoints")
    step = steps[-1] if step is None else step
    meta = ckpts.read_meta(step)
    if not meta.get("config"):
        raise ValueError(f"{ckpt_dir}/{step}: checkpoint meta has no 'config'")
    cfg = TrainConfig.from_config(meta["config"])
    tok = build_tokenizer(dataclasses.replace(cfg, run_dir=run_dir), build_source(cfg))
    model = build_model(cfg, tok.vocab_size)
    graphdef, params = nnx.split(model)
    raw, _ = ckpts.restore(step)
    params = _fill(params, raw["train"]["params"])
    return graphdef, params, cfg, tok


def _fill(template, raw):
    """Copies restored leaves (nested dicts) into the structure of `template`."""
    leaves_t, treedef = jax.tree_util.tree_flatten(template)
    leaves_r = jax.tree_util.tree_leaves(raw)
    if len(leaves_t) != len(leaves_r):
        raise ValueError(f"checkpoint has {len(leaves_r)} parameter arrays, model expects "
                         f"{len(leaves_t)}")
    out = []
    for t, r in zip(leaves_t, leaves_r):
        if tuple(np.shape(r)) != tuple(np.shape(t)):
            raise ValueError(f"checkpoint array of shape {np.shape(r)} where the model expects "
                             f"{np.shape(t)}")
        out.append(jax.numpy.asarray(r, dtype=t.dtype))
    return jax.tree_util.tree_unflatten(treedef, out)
