"""One entry point from a dataset name to a random-access source of examples."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from tseeds_jax.data.registry import RG_PREFIX, get_spec


def make_source(name: str, *, data_dir: str | os.PathLike | None = None, files=None,
                split: str = "train", seed: int = 0, size: int = 1000,
                config: Mapping[str, Any] | None = None, skip_invalid: bool = False,
                dedupe: bool = False):
    """`rg:<task>` -> ReasoningGymSource(task, seed=seed, size=size, config=config); any other
    registered name -> the built split under `data_dir`, building it first from `files` when
    given (a no-op when already built from the same files). Unknown names raise
    UnknownDatasetError."""
    spec = get_spec(name)
    if spec.format == "reasoning_gym":
        from tseeds_jax.data.reasoning_gym_tasks import ReasoningGymSource

        return ReasoningGymSource(name[len(RG_PREFIX):], seed=seed, size=size, config=config)
    if data_dir is None:
        raise ValueError(f"make_source({name!r}): data_dir is required for file datasets")
    import tseeds_jax.data.tfds_builder as tfds_builder

    if files is not None:
        tfds_builder.build_dataset(name, files, data_dir, skip_invalid=skip_invalid,
                                   dedupe=dedupe)
    return tfds_builder.load_source(name, data_dir, split)
