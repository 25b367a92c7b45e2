"""Registry of dataset names -> (record format, reward name, options).

File datasets are built once into array_record files by the tfds builder (`tfds_builder.py`);
`rg:<task>` names are reasoning-gym procedural tasks (`reasoning_gym_tasks.py`) and need no files.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from tseeds_jax.data.errors import UnknownDatasetError
from tseeds_jax.data.formats import FORMATS, REWARD_NAMES

RG_PREFIX = "rg:"


@dataclasses.dataclass(frozen=True)
class DatasetSpec:
    """`format`: a key of `formats.FORMATS` or "reasoning_gym"; `options`: keyword arguments of
    that format's normaliser; `template`: the prompt template the paper used with it (a hint for
    configs, not enforced)."""

    name: str
    format: str
    reward_name: str
    description: str = ""
    options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    template: str | None = None

    def __post_init__(self):
        if self.format not in FORMATS and self.format != "reasoning_gym":
            raise ValueError(f"dataset {self.name!r}: format {self.format!r} not in "
                             f"{sorted(FORMATS) + ['reasoning_gym']}")
        if self.reward_name not in REWARD_NAMES:
            raise ValueError(f"dataset {self.name!r}: reward_name {self.reward_name!r} not in "
                             f"{REWARD_NAMES}")


DATASETS: dict[str, DatasetSpec] = {}


def register_dataset(spec: DatasetSpec, *, overwrite: bool = False) -> DatasetSpec:
    if not overwrite and spec.name in DATASETS:
        raise ValueError(f"dataset {spec.name!r} already registered")
    if spec.name.startswith(RG_PREFIX):
        raise ValueError(f"dataset names starting with {RG_PREFIX!r} are reasoning-gym tasks")
    DATASETS[spec.name] = spec
    return spec


def _builtin(name, fmt, reward, description, template, **options):
    register_dataset(DatasetSpec(name, fmt, reward, description, options, template))


_builtin("dapo_math_17k", "verl", "math", "BytedTsinghua-SIA/DAPO-Math-17k parquet; its 'Answer:' "
         "instruction stripped so the template's \\boxed{} instruction applies", "qwen_math",
         strip_dapo_instruction=True)
_builtin("dapo_math_17k_verbatim", "verl", "math", "DAPO-Math-17k with its own instruction kept",
         "qwen_math")
_builtin("openr1_math_46k", "verl", "math", "Elliott/Openr1-Math-46k-8192 (verl format)",
         "r1_distill")
_builtin("openr1_math", "math", "math", "open-r1/OpenR1-Math-220k (problem, answer, solution, "
         "uuid)", "r1_distill")
_builtin("math500", "math", "math", "HuggingFaceH4/MATH-500 (problem, solution, answer, subject, "
         "level, unique_id)", "qwen_math")
_builtin("aime", "math", "math", "AIME, any year (problem|question, answer, id, year)", "qwen_math")
_builtin("aime24", "math", "math", "AIME 2024", "qwen_math")
_builtin("aime25", "math", "math", "AIME 2025", "qwen_math")
_builtin("amc", "math", "math", "AMC (problem|question, answer, id)", "qwen_math")
_builtin("amc23", "math", "math", "AMC 2023", "qwen_math")
_builtin("minerva", "math", "math", "Minerva Math (question|problem, answer or boxed solution)",
         "qwen_math")
_builtin("olympiadbench", "math", "math", "OlympiadBench (question, final_answer list, ...)",
         "qwen_math")
_builtin("code", "code", "code", "code with unit tests: question|problem + stdin/stdout pairs "
         "and/or asserts", "qwen3_thinking")


def get_spec(name: str) -> DatasetSpec:
    """Spec of a registered dataset, or of `rg:<task>` for a reasoning-gym task; an unknown name
    raises UnknownDatasetError listing the known ones."""
    if not isinstance(name, str):
        raise TypeError(f"dataset name must be str, got {type(name).__name__}")
    if name.startswith(RG_PREFIX):
        from tseeds_jax.data.reasoning_gym_tasks import check_task

        task = name[len(RG_PREFIX):]
        check_task(task)
        return DatasetSpec(name, "reasoning_gym", "reasoning_gym",
                           f"reasoning-gym task {task!r}", {}, "plain")
    if name not in DATASETS:
        raise UnknownDatasetError(f"unknown dataset name {name!r}; known: {sorted(DATASETS)} "
                                  f"or '{RG_PREFIX}<reasoning-gym task>'")
    return DATASETS[name]


def list_datasets() -> list[str]:
    return sorted(DATASETS)
