"""A training run's checkpoint as a model: `open_run` (base, adapters, config, tokenizer) and
`load_run` (the trained model, a LoRA run's adapters merged in).

Everything that builds a model from a run folder goes through here: `tseeds eval`, relay,
LUFFY `run:` sources, `tseeds export`, `tseeds serve --run`. The checkpoint's meta says what
the model started from (rl/run/source.py); the base is rebuilt from that record and checked
against its hash, and a missing or changed base or tokenizer stops the load with an error
naming the checkpoint and what differs.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from typing import Any

import jax
import numpy as np
from etils import epath
from flax import nnx

from tseeds_jax.rl.config.schema import TrainConfig
from tseeds_jax.rl.run import run_files
from tseeds_jax.rl.run import source as source_lib

log = logging.getLogger(__name__)


@dataclasses.dataclass
class OpenRun:
    """A run checkpoint's parts. `model` is the trained `Transformer` (a LoRA run's: the base
    with its adapters attached, not merged); `base_source` the meta's model_source record."""

    run_dir: str
    step: int
    where: str  # RUN_DIR/ckpt/STEP
    cfg: TrainConfig
    tokenizer: Any
    model: Any
    meta: dict
    base_source: dict

    @property
    def is_lora(self) -> bool:
        return bool(self.cfg.lora.rank)

    def merged(self):
        """The trained model as a plain `Transformer` (LoRA: W + scale * A @ B)."""
        if not self.is_lora:
            return self.model
        from tseeds_jax.model import lora

        return lora.merge_lora(self.model)

    def base_ref(self) -> str | None:
        """The base's HF folder (an `hf:` init) as PEFT's base_model_name_or_path, else None."""
        if self.base_source.get("kind") == "hf":
            return self.base_source["path"]
        if self.base_source:
            return None
        kind, _, path = self.cfg.model.init.partition(":")
        return os.path.abspath(path) if kind == "hf" else None


def _base_model(cfg: TrainConfig, run_dir: str, recorded: dict, where: str, vocab_size: int):
    """The run's starting model per its recorded source (checked), or per `model.init` for a
    run written before sources were recorded."""
    from tseeds_jax.rl.builders import build_model

    if not cfg.lora.rank and recorded.get("kind") != "hf" and recorded.get("kind") != "orbax":
        # Every parameter is in the checkpoint: the base gives the model's structure only,
        # which config.model.arch describes (a base saved in the folder may be gone).
        return build_model(cfg, vocab_size)
    if not recorded:
        if cfg.lora.rank and cfg.model.init == "random":
            log.warning("%s: the checkpoint predates recorded model sources; its LoRA base is "
                        "rebuilt from model.init='random', which is the trained base only if "
                        "the run really started from a random model", where)
        return build_model(cfg, vocab_size)
    path = source_lib.check_base_exists(recorded, run_dir, where) \
        if recorded.get("kind") != "random" else None
    kind = recorded.get("kind")
    if kind == "saved":
        from tseeds_jax import hf

        local = path
        if run_files.is_remote(run_dir):  # the model checkpoint reader reads local folders
            run_files.pull(run_dir, source_lib.SAVED_BASE_DIR)
            local = os.path.join(run_files.local_dir(run_dir), source_lib.SAVED_BASE_DIR)
        # The stored dtype: the run trained the given model as it was (its hash says so).
        m = cfg.model
        model = hf.load_checkpoint_model(local, compute_dtype=m.dtype, **m.run_settings())
        now = source_lib.saved_source(hf.params_of(model))
        source_lib.check(recorded, now, where + " meta model_source", "base model")
        return model
    if kind in ("hf", "orbax"):
        if cfg.lora.rank:  # a full run's checkpoint overwrites every weight of the base
            now = source_lib.init_source(f"{kind}:{path}")
            source_lib.check(recorded, now, where + " meta model_source", "base model")
        cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model,
                                                                 init=f"{kind}:{path}"))
    return build_model(cfg, vocab_size)


def open_run(run_dir: str, step: int | None = None) -> OpenRun:
    """The checkpoint `step` (default: the latest) of the run folder `run_dir` (local or gs://)."""
    from tseeds_jax import checkpoint
    from tseeds_jax.rl.builders import build_source, build_tokenizer
    from tseeds_jax.rl.learn import adapters as adapters_lib

    run_dir = str(run_dir)
    ckpt_dir = os.path.join(run_dir, "ckpt")
    if not epath.Path(ckpt_dir).is_dir():  # local or gs://
        raise FileNotFoundError(f"{run_dir}: not a training run (no ckpt/ folder)")
    ckpts = checkpoint.Checkpoints(ckpt_dir, keep_last=None)
    steps = ckpts.steps()
    if not steps:
        raise FileNotFoundError(f"{ckpt_dir}: no checkpoints")
    step = steps[-1] if step is None else step
    if step not in steps:
        raise FileNotFoundError(f"{ckpt_dir}: no checkpoint for step {step}; available: {steps}")
    where = f"{ckpt_dir}/{step}"
    meta = ckpts.read_meta(step)
    if not meta.get("config"):
        raise ValueError(f"{where}: checkpoint meta has no 'config'")
    cfg = TrainConfig.from_config(meta["config"])
    tok = build_tokenizer(dataclasses.replace(cfg, run_dir=run_dir), build_source(cfg))
    if meta.get("tokenizer"):
        now = source_lib.tokenizer_source(cfg.tokenizer, run_dir, tok)
        source_lib.check(meta["tokenizer"], now, where + " meta tokenizer", "tokenizer")
    recorded = meta.get("model_source") or {}
    model = _base_model(cfg, run_dir, recorded, where, tok.vocab_size)
    raw, _ = ckpts.restore(step)
    if cfg.lora.rank:  # the checkpoint holds adapters: attached to the rebuilt base
        fresh = dataclasses.replace(cfg.lora, init="")  # its values are in the checkpoint
        graphdef, adapters, frozen = adapters_lib.split(
            adapters_lib.adapt(model, fresh, cfg.seed), cfg.seed)
        adapters = _fill(adapters, raw["train"]["params"], where)
        model = nnx.merge(graphdef, adapters, *frozen.states)
    else:
        graphdef, params = nnx.split(model)
        model = nnx.merge(graphdef, _fill(params, raw["train"]["params"], where))
    return OpenRun(run_dir, int(step), where, cfg, tok, model, meta, recorded)


def load_run(run_dir: str, step: int | None = None):
    """(graphdef, params, TrainConfig, tokenizer) of a training run's checkpoint (latest by
    default); a LoRA run's adapters are merged into its recorded base."""
    run = open_run(run_dir, step)
    graphdef, params = nnx.split(run.merged())
    return graphdef, params, run.cfg, run.tokenizer


def _fill(template, raw, where: str):
    """Copies restored leaves (nested dicts) into the structure of `template`."""
    leaves_t, treedef = jax.tree_util.tree_flatten(template)
    leaves_r = jax.tree_util.tree_leaves(raw)
    if len(leaves_t) != len(leaves_r):
        raise ValueError(f"{where}: checkpoint has {len(leaves_r)} parameter arrays, model "
                         f"expects {len(leaves_t)}")
    out = []
    for t, r in zip(leaves_t, leaves_r):
        if tuple(np.shape(r)) != tuple(np.shape(t)):
            raise ValueError(f"{where}: checkpoint array of shape {np.shape(r)} where the model "
                             f"expects {np.shape(t)}")
        # Orbax restores onto the devices it saved from; the model's arrays say where they
        # live (a base read onto one device, adapters saved from a run over several).
        out.append(jax.device_put(jax.numpy.asarray(r, dtype=t.dtype),
                                  getattr(t, "sharding", None)))
    return jax.tree_util.tree_unflatten(treedef, out)
