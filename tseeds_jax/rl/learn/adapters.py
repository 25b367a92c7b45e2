"""A LoRA run's two halves: the trained adapters and the frozen base they adapt (docs/lora.md).

The model is split once, when the run is built (`split`):
  * the adapters (`nnx.LoRAParam`, model/lora.py) are the train state's parameters: the only
    thing differentiated, the only optimizer state, what checkpoints and pi_b snapshots hold and
    what moves to the sampler at each step;
  * the base (every other weight) and the rest (the adapters' dropout key) are `Frozen`: built
    once from `model.init` (a resumed run rebuilds the same), never differentiated, never in the
    optimizer, an argument of every jitted learner function. The reference policy of a KL term
    is the base without adapters: the plain model's graph over the same arrays (no copy).

The sampler keeps its own copy of the base (in the sampler dtype and placement, made once) and
gets the adapters at each call (`SamplerWeights`): merged into its weights (W + scale A B, then
a plain decode step) or as low-rank terms of the decode step (`lora.sampler`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from tseeds_jax.model import lora
from tseeds_jax.rl.config.errors import ConfigValueError
from tseeds_jax.rl.rollout import streams


@dataclasses.dataclass
class Frozen:
    """The frozen part of an adapted model and the graphs that read it.

    graphdef: the adapted model, adapters deterministic (statistics passes, the sampler).
    train_graphdef: the same with adapter dropout on (the update), or `graphdef` without dropout.
    plain_graphdef: the model without adapters (reference policy, merged sampler weights).
    base, rest: the base weights (`lora.FROZEN`) and the other state (the dropout key).
    dropout_seed: the masks' key derives from it, the optimizer step and the micro-batch."""

    graphdef: Any
    train_graphdef: Any
    plain_graphdef: Any
    base: Any
    rest: Any
    lcfg: lora.LoraConfig
    dropout_seed: int = 0
    replica: Any = None  # `states` as a host-local replica, made at the first `like` needing it

    @property
    def states(self) -> tuple:
        """(base, rest): what `nnx.merge(graphdef, adapters, *states)` completes."""
        return (self.base, self.rest)

    def placed(self, base, rest) -> Frozen:
        return dataclasses.replace(self, base=base, rest=rest, replica=None)

    def like(self, params) -> tuple:
        """`states` placed where `params` are: the learner's arrays, or (parameters taken off
        the learner's mesh for a host-local sampler placement) a replica made once."""
        from tseeds_jax.sampling.placement import params_mesh

        if params_mesh(params) is None and params_mesh(self.states) is not None:
            if self.replica is None:
                from tseeds_jax.rl.run import hosts as hosts_lib

                self.replica = hosts_lib.local_replica(self.states)
            return self.replica
        return self.states


def lora_config(section, param_dtype: str = "float32") -> lora.LoraConfig:
    """The model's `LoraConfig` of a validated `config.lora` (rank > 0)."""
    return lora.LoraConfig(rank=section.rank, alpha=float(section.alpha),
                           dropout=float(section.dropout), targets=tuple(section.targets),
                           use_rslora=section.use_rslora, param_dtype=param_dtype)


def adapt(model, section, run_seed: int):
    """Adds `config.lora`'s adapters to `model` in place (A from the run seed, B = 0), then
    loads `lora.init`'s adapters when set; returns the model."""
    lcfg = lora_config(section)
    lora.apply_lora(model, lcfg, seed=streams.method_seed(run_seed, 0, streams.LORA_INIT))
    if section.init:
        from tseeds_jax.hf.peft_orbax import read_adapters

        path = section.init.partition(":")[2]
        got, adapters = read_adapters(path, model.cfg)
        for name in ("rank", "alpha", "targets", "use_rslora"):
            if getattr(got, name) != getattr(lcfg, name):
                raise ConfigValueError(
                    f"config.lora.{name}={getattr(lcfg, name)!r}: the adapters of "
                    f"config.lora.init={section.init!r} have {name}={getattr(got, name)!r}")
        lora.load_adapters(model, adapters)
    return model


def adapter_count(model_cfg, rank: int, targets) -> int:
    """Adapter parameters of rank `rank` on `targets` of a model of `model_cfg`: (I + O) R per
    target and layer."""
    return model_cfg.num_hidden_layers * rank * sum(
        sum(lora.adapter_features(model_cfg, t)) for t in targets)


def lora_shape(section, model_cfg):
    """The decode layout's view of a LoRA run (`decode_layout.LoraShape`), None when off."""
    if not section.rank:
        return None
    from tseeds_jax.decode_layout import LoraShape

    return LoraShape(adapter_count(model_cfg, section.rank, section.targets),
                     section.sampler == "merged")


def split(model, run_seed: int):
    """(graphdef, adapters, Frozen) of an adapted model."""
    lcfg = lora.lora_config_of(model)
    train_graphdef = None
    if lcfg.dropout > 0:
        lora.set_lora_dropout(model, True)
        train_graphdef = lora.split_lora(model)[0]
        lora.set_lora_dropout(model, False)
    graphdef, adapters, base, rest = lora.split_lora(model)
    frozen = Frozen(graphdef=graphdef, train_graphdef=train_graphdef or graphdef,
                    plain_graphdef=lora.base_graphdef(model.cfg), base=base, rest=rest,
                    lcfg=lcfg,
                    dropout_seed=streams.method_seed(run_seed, 0, streams.LORA_DROPOUT))
    return graphdef, adapters, frozen


def with_dropout(frozen: Frozen, states: tuple, step, micro) -> tuple:
    """(base, rest) `states` with the dropout key of update `step` (int32, the optimizer's
    count) and micro-batch `micro`: masks are a function of (run seed, update, micro-batch), so
    a resumed run draws the same ones."""
    key = jax.random.fold_in(jax.random.fold_in(jax.random.PRNGKey(frozen.dropout_seed), step),
                             micro)
    base, rest = states
    return base, lora.with_dropout_key(rest, key)


def nbytes(tree) -> int:
    """Bytes of the arrays of `tree` (whole arrays, not one device's shards)."""
    return int(sum(x.size * jnp.dtype(x.dtype).itemsize for x in jax.tree_util.tree_leaves(tree)))


def _cast(tree, dtype: str):
    if dtype in (None, "float32"):
        return tree
    dt = jnp.dtype(dtype)
    return jax.tree_util.tree_map(
        lambda x: x.astype(dt) if jnp.issubdtype(x.dtype, jnp.floating) else x, tree)


def merged_weights(adapters, base, lcfg: lora.LoraConfig, dtype: str):
    """The plain model's State: each adapted weight W + scale A B (summed in float32), every
    weight then in the sampler `dtype` (what a full-parameter run's cast gives its sampler)."""
    pure = lora.merge_params(nnx.to_pure_dict(base), nnx.to_pure_dict(adapters), lcfg)
    out = jax.tree_util.tree_map(lambda x: x, base)
    nnx.replace_by_pure_dict(out, pure)
    return _cast(out, dtype)


class SamplerWeights:
    """The sampler's weights of a LoRA run: the base once, the adapters at every call.

    `__call__(adapters, mesh=None)` -> (graphdef, params) for `sampling.generate`: "lowrank" the
    adapted graph over the adapters and the sampler's base; "merged" the plain graph over
    merged weights (one jitted merge per new adapters object: the calls of one step share it).
    The base is placed like the adapters it meets (a decode layout's `mesh`, a host-local
    replica when they left the learner's mesh, else the learner's arrays) and cast to the
    sampler dtype, once per placement (`base_on`). Only adapter bytes reach the sampler after
    that (`take_bytes`)."""

    def __init__(self, frozen: Frozen, mode: str, sampler_dtype: str):
        if mode not in lora.DECODE_MODES:
            raise ValueError(f"mode={mode!r}: expected one of {lora.DECODE_MODES}")
        self.mode, self.dtype = mode, sampler_dtype
        self._merge = jax.jit(merged_weights, static_argnums=(2, 3))
        self.synced_bytes = 0
        self.use(frozen)

    def use(self, frozen: Frozen) -> None:
        """Reads the base from `frozen` from now on (the run placed it on its mesh)."""
        self.frozen = frozen
        self._base: dict = {}  # placement -> the base there (one at a time)
        self._src = self._dst = None

    def base_on(self, adapters, mesh=None) -> tuple:
        """The frozen (base, rest) where `adapters` live (see the class doc)."""
        from tseeds_jax.rl.run import hosts as hosts_lib
        from tseeds_jax.sampling import layout
        from tseeds_jax.sampling.placement import params_mesh

        states = self.frozen.states
        device = None
        if mesh is None and params_mesh(adapters) is None and params_mesh(states) is not None:
            device = next(iter(jax.tree_util.tree_leaves(adapters)[0].devices()))
        key = (mesh, device)
        if key not in self._base:
            self._base = {}  # drop the previous placement first
            if mesh is not None:
                states = layout.reshard(states, mesh)
            elif device is not None:
                states = hosts_lib.local_replica(states, device)
            self._base[key] = _cast(states, self.dtype) if self.mode == "lowrank" else states
        return self._base[key]

    def __call__(self, adapters, mesh=None):
        if self._src is adapters:
            return self._dst
        base, rest = self.base_on(adapters, mesh)
        self._src = self._dst = None  # drop the previous weights before making the next
        if self.mode == "lowrank":
            out = (self.frozen.graphdef, nnx.merge_state(adapters, base, rest))
        else:
            out = (self.frozen.plain_graphdef, self._merge(adapters, base, self.frozen.lcfg,
                                                           self.dtype))
        self.synced_bytes += nbytes(adapters)
        self._src, self._dst = adapters, out
        return out

    def take_bytes(self) -> int:
        """Adapter bytes given to the sampler since the last call."""
        n, self.synced_bytes = self.synced_bytes, 0
        return n
