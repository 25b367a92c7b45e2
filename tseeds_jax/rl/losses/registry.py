"""Registry of named policy losses with one calling convention.

Every registered loss is called the same way:

    spec = losses.get("dapo")                      # LossSpec
    hp = spec.default_hparams                      # a frozen dataclass of type spec.hparams_cls
    out = spec(inputs, hp, denominators=dens)      # -> LossOutput

where `inputs` is a `LossInputs` for the rows of one micro-batch and `dens = agg_denominators(
mask_BT_of_the_whole_minibatch)`. Hyper-parameters are static (hashable): close over them or pass
them as a static argument under `jax.jit`.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable
from typing import Any, Protocol

from tseeds_jax.rl.losses.base import Denominators, LossInputs, LossOutput
from tseeds_jax.rl.losses.needs import NONE, LossNeeds


class LossName(str, enum.Enum):
    """Names of the built-in losses (`get` also accepts the plain string)."""

    DAPO = "dapo"
    GRPO = "grpo"
    M2PO = "m2po"
    LUFFY = "luffy"
    GSPO = "gspo"
    GSPO_TOKEN = "gspo_token"
    CTPO = "ctpo"
    CTPO_LA = "ctpo_la"
    SIS = "sis"
    STARE = "stare"


class LossFn(Protocol):
    def __call__(
        self, inputs: LossInputs, hparams: Any, *, denominators: Denominators
    ) -> LossOutput: ...


@dataclasses.dataclass(frozen=True)
class LossSpec:
    """A registered loss: its function, hyper-parameter type, defaults and needs (needs.py)."""

    name: str
    fn: LossFn
    hparams_cls: type
    default_hparams: Any
    needs: LossNeeds = NONE

    def __call__(
        self, inputs: LossInputs, hparams: Any = None, *, denominators: Denominators
    ) -> LossOutput:
        hparams = self.default_hparams if hparams is None else hparams
        if not isinstance(hparams, self.hparams_cls):
            raise TypeError(f"loss {self.name!r} expects hparams of type "
                            f"{self.hparams_cls.__name__}, got {type(hparams).__name__}")
        if not isinstance(denominators, Denominators):
            raise TypeError(f"loss {self.name!r}: denominators must be Denominators (from "
                            f"agg_denominators), got {type(denominators).__name__}")
        return self.fn(inputs, hparams, denominators=denominators)


_REGISTRY: dict[str, LossSpec] = {}


def _key(name: LossName | str) -> str:
    if isinstance(name, LossName):
        return name.value
    if not isinstance(name, str) or not name:
        raise TypeError(f"loss name must be a non-empty str or LossName, got {name!r}")
    return name


def register(
    name: LossName | str, hparams_cls: type, default_hparams: Any = None, *,
    needs: LossNeeds = NONE,
) -> Callable[[LossFn], LossFn]:
    """Decorator: registers `fn(inputs, hparams, *, denominators) -> LossOutput` under `name`.

    `default_hparams` defaults to `hparams_cls()`; `needs` declares what the learner and the
    trainer must provide beyond one micro-batch's inputs (needs.py). Registering a taken name
    raises ValueError.
    """
    key = _key(name)
    if not dataclasses.is_dataclass(hparams_cls):
        raise TypeError(f"register({key!r}): hparams_cls must be a dataclass, got {hparams_cls!r}")
    defaults = hparams_cls() if default_hparams is None else default_hparams
    if not isinstance(defaults, hparams_cls):
        raise TypeError(f"register({key!r}): default_hparams must be a {hparams_cls.__name__}")
    if not isinstance(needs, LossNeeds):
        raise TypeError(f"register({key!r}): needs must be a LossNeeds, got {needs!r}")

    def deco(fn: LossFn) -> LossFn:
        if key in _REGISTRY:
            raise ValueError(f"loss {key!r} is already registered")
        _REGISTRY[key] = LossSpec(key, fn, hparams_cls, defaults, needs)
        return fn

    return deco


def get(name: LossName | str) -> LossSpec:
    """The registered loss `name`; ValueError lists the known names otherwise."""
    key = _key(name)
    try:
        return _REGISTRY[key]
    except KeyError:
        raise ValueError(f"unknown loss {key!r}; registered: {', '.join(names())}") from None


def names() -> tuple[str, ...]:
    """Registered loss names, sorted."""
    return tuple(sorted(_REGISTRY))
