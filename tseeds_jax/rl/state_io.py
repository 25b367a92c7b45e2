"""Checkpoints of a training run: train state, seed cache and data position, resumed exactly.

    RUN_DIR/ckpt/<step>/...                 TrainState + seed-cache arrays; meta: data position,
                                            seed-cache prompts/references, run config
    RUN_DIR/ckpt/historical/behavior-<step> behavior-policy snapshot of each refresh (pi_b)
    RUN_DIR/ckpt/historical/nan-<step>      the state at a non-finite loss, for inspection
"""

from __future__ import annotations

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
