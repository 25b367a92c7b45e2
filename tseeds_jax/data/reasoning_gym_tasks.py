"""reasoning-gym procedural tasks as a random-access source of examples.

Entry `i` of task `name` with `seed` and `config` is a pure function of those (reasoning-gym seeds
each item with `seed + i`), so sources are deterministic per seed and can be sharded and resumed
like file datasets. The example's `reference` is the entry itself made JSON-safe (tuples ->
lists); `score_answer(answer, entry)` scores through the task's own verifier.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Mapping
from typing import Any

from tseeds_jax.data.errors import UnknownDatasetError
from tseeds_jax.data.formats import Example


def _registry() -> dict:
    from reasoning_gym.factory import DATASETS

    return DATASETS


def check_task(name: str) -> None:
    """UnknownDatasetError if `name` is not a registered reasoning-gym task."""
    tasks = _registry()
    if name not in tasks:
        raise UnknownDatasetError(f"unknown reasoning-gym task {name!r}; "
                                  f"{len(tasks)} known, e.g. {sorted(tasks)[:12]}")


def to_json_safe(value: Any, where: str = "entry") -> Any:
    """A copy of `value` made of dict/list/str/int/float/bool/None only; TypeError naming the
    offending key path otherwise (a reference must survive the JSON round trip of the dataset
    files and of the reward workers)."""
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise TypeError(f"{where}: non-finite float {value!r} is not JSON-safe")
        return value
    if isinstance(value, Mapping):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise TypeError(f"{where}: non-string key {k!r}")
            out[k] = to_json_safe(v, f"{where}.{k}")
        return out
    if isinstance(value, (list, tuple)):
        return [to_json_safe(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if hasattr(value, "item") and callable(value.item):  # numpy scalars
        return to_json_safe(value.item(), where)
    raise TypeError(f"{where}: {type(value).__name__} value {value!r:.60} is not JSON-safe")


class ReasoningGymSource:
    """`len(src)` examples of reasoning-gym task `task`, generated on access.

    `config` holds the task's config fields (e.g. {"min_terms": 2, "max_terms": 4}); `seed` and
    `size` are reasoning-gym's own. Examples follow `formats.EXAMPLE_KEYS` with
    reward_name "reasoning_gym".
    """

    def __init__(self, task: str, *, seed: int = 0, size: int = 1000,
                 config: Mapping[str, Any] | None = None):
        import reasoning_gym

        check_task(task)
        if not isinstance(size, int) or size <= 0:
            raise ValueError(f"reasoning-gym {task}: size must be a positive int, got {size!r}")
        if not isinstance(seed, int):
            raise TypeError(f"reasoning-gym {task}: seed must be int, got {seed!r}")
        config = dict(config or {})
        for reserved in ("seed", "size"):
            if reserved in config:
                raise ValueError(f"reasoning-gym {task}: pass {reserved!r} as an argument, not "
                                 "inside config")
        try:
            self._ds = reasoning_gym.create_dataset(task, seed=seed, size=size, **config)
        except (TypeError, AssertionError, ValueError) as e:
            raise ValueError(f"reasoning-gym {task}: bad config {config}: {e}") from e
        self.task, self.seed, self.size, self.config = task, seed, size, config

    def __len__(self) -> int:
        return self.size

    def entry(self, index: int) -> dict[str, Any]:
        """The raw reasoning-gym entry (question, answer, metadata), JSON-safe."""
        if not 0 <= index < self.size:
            raise IndexError(f"reasoning-gym {self.task}: index {index} outside [0, {self.size})")
        return to_json_safe(self._ds[index], f"{self.task}[{index}]")

    def __getitem__(self, index: int) -> Example:
        index = int(index)
        entry = self.entry(index)
        return {"id": f"rg:{self.task}/{self.seed}/{index}", "prompt": entry["question"],
                "reference": entry, "source": f"rg:{self.task}", "reward_name": "reasoning_gym",
                "meta": {"config": json.loads(json.dumps(self.config, default=str))}}

    def __getitems__(self, indices) -> list[Example]:
        return [self[i] for i in indices]

    def score_answer(self, answer: str | None, entry: Mapping[str, Any]) -> float:
        """This source's verifier (same config as the entries were made with)."""
        return float(self._ds.score_answer(answer, dict(entry)))


@functools.cache
def _default_scorer(task: str):
    import reasoning_gym

    return reasoning_gym.get_score_answer_fn(task)


def score_answer(answer: str | None, entry: Mapping[str, Any]) -> float:
    """Score `answer` against a reasoning-gym `entry` (an example's reference) with the task's own
    verifier, found from `entry["metadata"]["source_dataset"]`. Returns a float in [0, 1]."""
    try:
        task = entry["metadata"]["source_dataset"]
    except (KeyError, TypeError) as e:
        raise ValueError("reasoning-gym entry lacks metadata.source_dataset") from e
    check_task(task)
    return float(_default_scorer(task)(answer, dict(entry)))
