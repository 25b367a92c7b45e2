"""The run's data source, tokenizer and starting model from a validated `TrainConfig`
(`build_source`, `build_tokenizer`, `build_model`): what training (rl/setup.py) and loading a
run folder (rl/run/loaded.py) both build. `rl.setup` re-exports them."""

from __future__ import annotations

import os

import numpy as np

from tseeds_jax.model import init_model
from tseeds_jax.rl.config.errors import ConfigValueError
from tseeds_jax.rl.config.schema import TrainConfig
from tseeds_jax.rl.run import run_files


def build_source(cfg: TrainConfig):
    """An indexable example source: procedural (compact / reasoning-gym) or a registered file
    dataset `NAME:PATH` (built once into tfds array_record under data.data_dir)."""
    src = cfg.data.source
    kind, _, name = src.partition(":")
    params = dict(cfg.data.params)
    size = cfg.data.size
    if kind == "compact" and name == "chain_sum":
        from tseeds_jax.data.compact_arith import CompactChainSum

        return CompactChainSum(seed=cfg.seed, size=size, config=params)
    if kind == "reasoning_gym":
        from tseeds_jax.data.reasoning_gym_tasks import ReasoningGymSource

        return ReasoningGymSource(name, seed=cfg.seed, size=size, config=params)
    from tseeds_jax.data import registry, sources

    if kind in registry.list_datasets() and name:
        data_dir = cfg.data.data_dir or os.path.join(cfg.run_dir, "data")
        source = sources.make_source(kind, data_dir=data_dir, files=name, skip_invalid=True)
        if 0 < size < len(source):  # the paper trains on seeded random subsets (e.g. 4,608)
            keep = np.sort(np.random.default_rng([cfg.seed, 0x5B5E7]).choice(
                len(source), size, replace=False))
            return _Subset(source, keep)
        return source
    raise ConfigValueError(f"config.data.source={src!r}: expected 'compact:chain_sum', "
                           f"'reasoning_gym:TASK' or 'DATASET:PATH' with DATASET one of "
                           f"{registry.list_datasets()}")


class _Subset:
    def __init__(self, source, indices):
        self.source, self.indices = source, indices

    def __len__(self):
        return len(self.indices)

    def __getitem__(self, i):
        return self.source[int(self.indices[i])]


def build_tokenizer(cfg: TrainConfig, source):
    """`train:char` trains a character-level sentencepiece model on the task (cached in run_dir)."""
    from tseeds_jax.data.tokenizer import load_tokenizer
    from tseeds_jax.data.tokenizer_train import train_sentencepiece

    spec = cfg.tokenizer
    if spec.startswith("train:"):
        # sentencepiece reads and writes local files only: a gs:// run keeps it in its mirror.
        local = run_files.local_dir(cfg.run_dir)
        path = os.path.join(local, "tokenizer.model")
        found = (run_files.pull(cfg.run_dir, "tokenizer.model") if run_files.is_remote(cfg.run_dir)
                 else os.path.exists(path))
        if found:
            return load_tokenizer(path)
        texts = [source[i]["prompt"] for i in range(min(len(source), 2000))]
        if hasattr(source, "solution"):
            texts += [source.solution(i) for i in range(min(len(source), 2000))]
        if hasattr(source, "alphabet"):
            texts.append(source.alphabet())
        os.makedirs(local, exist_ok=True)
        tok = train_sentencepiece(texts, vocab_size=64, model_type=spec.split(":", 1)[1], out=path)
        run_files.push(cfg.run_dir, "tokenizer.model")
        return tok
    kind, _, path = spec.partition(":")
    if kind in ("spm", "hf"):
        return load_tokenizer(path)
    raise ConfigValueError(f"config.tokenizer={spec!r}: expected 'train:char', 'spm:PATH' or "
                           "'hf:PATH'")


def build_model(cfg: TrainConfig, vocab_size: int):
    m = cfg.model
    init = m.init
    # The run settings apply whatever the weights' source (`TrainModelConfig.run_settings`: the
    # programs `tseeds plan` / `tseeds compile` size are built with the same ones).
    run = m.run_settings()
    if init == "random":
        model = init_model(m.model_config(vocab_size=vocab_size, read_hf=False), seed=cfg.seed)
    elif init.startswith("hf:"):
        from tseeds_jax import hf

        model = hf.from_pretrained(init[3:], dtype=m.param_dtype, compute_dtype=m.dtype, **run)
    elif init.startswith("orbax:"):
        from tseeds_jax import hf

        model = hf.load_checkpoint_model(init[6:], dtype=m.param_dtype, compute_dtype=m.dtype,
                                         **run)
    else:
        raise ConfigValueError(f"config.model.init={init!r}: expected 'random', 'hf:DIR' or "
                               "'orbax:DIR'")
    if model.cfg.vocab_size < vocab_size:
        raise ConfigValueError(f"config.model: vocab_size={model.cfg.vocab_size} is smaller than "
                               f"the tokenizer's {vocab_size}")
    return model
