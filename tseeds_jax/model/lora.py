"""LoRA on the transformer's projections: config, adapting a model, adapter-only state, merging.

Letters: D model width, H query heads, K kv heads, E head dim, F MLP width, R rank, I / O an
adapter's input / output features (the base weight's input / output dims, flattened).

    lcfg = LoraConfig(rank=16, alpha=32.0)                 # targets: all seven projections
    model = apply_lora(model, lcfg, seed=0)                # adds adapters in place, B = 0
    graphdef, adapters, base, rest = split_lora(model)     # trainable / frozen / other state
    # optimise `adapters` only: loss(adapters) = f(nnx.merge(graphdef, adapters, base, rest))
    merged = merge_lora(model)                             # a plain Transformer, W + s * A @ B

The adapters are Flax NNX's own LoRA modules (`lora_layer.LoraAdapter`, an `nnx.LoRA`); their
parameters are `nnx.LoRAParam`s, so `TRAINABLE` (= `nnx.LoRAParam`) selects exactly them and
`FROZEN` every other `nnx.Param`. A projection's adapter term is added to its output by
`lora_layer.adapted`; with B = 0 (initialisation) that term is exactly zero and the logits are the
base model's bit for bit.

Adapter pytree (`adapter_params`, `nnx.to_pure_dict` layout, what Orbax saves and PEFT maps):
{"layers": {i: {"attn" | "mlp": {"lora": {target: {"lora_a": a_IR, "lora_b": b_RO}}}}}}.
Sharding (`rules.LOGICAL_RULES`): a [I, R] takes the base weight's input axis name, b [R, O] its
output axis name, the rank "lora_rank" is replicated; see `TARGETS`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

import jax
import jax.numpy as jnp
from flax import nnx

from tseeds_jax.model.config import ModelConfig
from tseeds_jax.model.lora_layer import LoraAdapter, LoraDropoutKey
from tseeds_jax.model.transformer import Transformer, init_model

# Adapter target -> (submodule of a decoder layer, base parameter, input dims of the base weight,
# logical axis of the adapter's input, of its output). The names are the base weights' own
# logical axes (layers.py), so an adapter is split like the weight it adapts: q's B [R, H*E]
# over tensor along the heads (whole heads per shard when tensor divides H), o's A [H*E, R]
# likewise, every `embed` dim over fsdp.
TARGETS: dict[str, tuple[str, str, int, str, str]] = {
    "q": ("attn", "q", 1, "embed", "q_heads"),
    "k": ("attn", "k", 1, "embed", "kv_heads"),
    "v": ("attn", "v", 1, "embed", "kv_heads"),
    "o": ("attn", "o", 2, "q_heads", "embed"),
    "gate": ("mlp", "gate", 1, "embed", "mlp"),
    "up": ("mlp", "up", 1, "embed", "mlp"),
    "down": ("mlp", "down", 1, "mlp", "embed"),
}
ALL_TARGETS = tuple(TARGETS)
_DTYPES = ("float32", "bfloat16", "float16")

TRAINABLE = nnx.LoRAParam
FROZEN = nnx.All(nnx.Param, nnx.Not(nnx.LoRAParam))


@dataclasses.dataclass(frozen=True)
class LoraConfig:
    """Which projections get adapters and how they are shaped and scaled.

    rank: R, the adapters' inner dimension (16: the middle of the 8-64 range LoRA RL runs use).
    alpha: the term is scaled by alpha / rank (alpha / sqrt(rank) with `use_rslora`); 32 = 2 x
      the default rank, PEFT's common choice, so the effective step does not depend on rank.
    dropout: rate on each adapter's input during training (0: none). Off by default: a dropout
      mask would make the learner's log-prob passes of the same policy disagree (ratio != 1 on
      on-policy tokens) and the sampler never uses it.
    targets: projections to adapt, from ALL_TARGETS (default all seven, attention and MLP).
    use_rslora: scale by alpha / sqrt(rank) (rank-stabilised LoRA) instead of alpha / rank.
    param_dtype: the adapters' stored dtype (float32 by default, also under a bfloat16 base:
      they are small and are the trained weights); the term is computed in the model's
      compute dtype like the base projections.
    """

    rank: int = 16
    alpha: float = 32.0
    dropout: float = 0.0
    targets: tuple[str, ...] = ALL_TARGETS
    use_rslora: bool = False
    param_dtype: str = "float32"

    def __post_init__(self):
        if not isinstance(self.rank, int) or isinstance(self.rank, bool) or self.rank < 1:
            raise ValueError(f"LoraConfig.rank={self.rank!r}: must be a positive integer")
        if (not isinstance(self.alpha, (int, float)) or isinstance(self.alpha, bool)
                or not math.isfinite(self.alpha) or self.alpha <= 0):
            raise ValueError(f"LoraConfig.alpha={self.alpha!r}: must be a positive number")
        if (not isinstance(self.dropout, (int, float)) or isinstance(self.dropout, bool)
                or not 0.0 <= self.dropout < 1.0):
            raise ValueError(f"LoraConfig.dropout={self.dropout!r}: must be in [0, 1)")
        targets = (self.targets,) if isinstance(self.targets, str) else tuple(self.targets)
        unknown = [t for t in targets if t not in TARGETS]
        if not targets or unknown or len(set(targets)) != len(targets):
            raise ValueError(f"LoraConfig.targets={self.targets!r}: expected distinct names "
                             f"from {ALL_TARGETS}")
        object.__setattr__(self, "targets", tuple(t for t in ALL_TARGETS if t in targets))
        if not isinstance(self.use_rslora, bool):
            raise ValueError(f"LoraConfig.use_rslora={self.use_rslora!r}: must be a bool")
        if self.param_dtype not in _DTYPES:
            raise ValueError(f"LoraConfig.param_dtype={self.param_dtype!r}: expected one of "
                             f"{_DTYPES}")

    @property
    def scale(self) -> float:
        """The factor of every adapter term: alpha / rank, or alpha / sqrt(rank) (rsLoRA)."""
        return self.alpha / (math.sqrt(self.rank) if self.use_rslora else self.rank)


def adapter_features(cfg: ModelConfig, target: str) -> tuple[int, int]:
    """(I, O) of `target`'s adapter under `cfg`: the base weight's flattened input / output."""
    d, f = cfg.hidden_size, cfg.intermediate_size
    he, ke = cfg.num_attention_heads * cfg.head_size, cfg.num_key_value_heads * cfg.head_size
    return {"q": (d, he), "k": (d, ke), "v": (d, ke), "o": (he, d), "gate": (d, f),
            "up": (d, f), "down": (f, d)}[target]


def has_lora(model: Transformer) -> bool:
    return getattr(model, "lora_config", None) is not None


def lora_config_of(model: Transformer) -> LoraConfig:
    """The LoraConfig `apply_lora` used; ValueError for a model without adapters."""
    if not has_lora(model):
        raise ValueError("model has no LoRA adapters (call lora.apply_lora first)")
    return model.lora_config


def _check_model(model) -> None:
    if not isinstance(model, Transformer):
        raise TypeError(f"model must be a tseeds_jax Transformer, got {type(model).__name__}")


def apply_lora(model: Transformer, lora_cfg: LoraConfig, *, seed: int = 0) -> Transformer:
    """Adds adapters (A random, B = 0) to `model`'s targeted projections, in place; returns it.

    seed: A's initialisation (PEFT's uniform +-1/sqrt(I)) and the first dropout key. The base
    weights are untouched. A sharded model gets its adapters on the default device: place them
    with `sharding.shard_model(model, mesh)` (their rule is in the module doc).
    """
    _check_model(model)
    if not isinstance(lora_cfg, LoraConfig):
        raise TypeError(f"lora_cfg must be a LoraConfig, got {type(lora_cfg).__name__}")
    if has_lora(model):
        raise ValueError(f"model already has LoRA adapters ({model.lora_config}); apply once")
    cfg = model.cfg
    rngs = nnx.Rngs(params=seed)
    pd = jnp.dtype(lora_cfg.param_dtype)
    key = None
    if lora_cfg.dropout > 0:
        key = LoraDropoutKey(jax.random.PRNGKey(seed))
    index = 0
    for layer in model.layers:
        for sub in ("attn", "mlp"):
            adapters = {}
            for target in lora_cfg.targets:
                where, _, _, in_axis, out_axis = TARGETS[target]
                if where != sub:
                    continue
                i, o = adapter_features(cfg, target)
                adapters[target] = LoraAdapter(i, lora_cfg.rank, o, scale=lora_cfg.scale,
                                               dropout=lora_cfg.dropout, in_axis=in_axis,
                                               out_axis=out_axis, param_dtype=pd, rngs=rngs,
                                               index=index, dropout_key=key)
                index += 1
            if adapters:
                getattr(layer, sub).lora = nnx.Dict(adapters)
    model.lora_config = lora_cfg
    return model


def _adapters(model):
    return [node for _, node in nnx.iter_graph(model) if isinstance(node, LoraAdapter)]


def set_lora_dropout(model: Transformer, enabled: bool, key=None) -> None:
    """Turns the adapters' input dropout on (training) or off (default; sampling, evaluation),
    in place; `key` ([2] uint32, e.g. derived from (run seed, step, micro-batch)) sets the masks'
    key. Changes the graph (a static flag): jitted functions retrace once per setting. A no-op
    when the config's dropout is 0."""
    lora_config_of(model)
    for node in _adapters(model):
        if node.dropout_key is not None:
            node.deterministic = not enabled
            if key is not None:
                node.dropout_key[...] = jnp.asarray(key, jnp.uint32)


def with_dropout_key(rest: nnx.State, key) -> nnx.State:
    """`rest` (the fourth part of `split_lora`) with the dropout key replaced by `key`: how a
    jitted step draws new masks per micro-batch without mutating anything."""
    key = jnp.asarray(key, jnp.uint32)
    return jax.tree.map(lambda v: v.replace(key) if isinstance(v, LoraDropoutKey) else v, rest,
                        is_leaf=lambda v: isinstance(v, nnx.Variable))


def split_lora(model: Transformer):
    """(graphdef, adapters, base, rest) = `nnx.split(model, TRAINABLE, FROZEN, ...)`: the
    adapters (`nnx.LoRAParam`, what an optimizer sees), the frozen base weights, and anything
    else (the shared dropout key when dropout > 0, see `with_dropout_key`; empty otherwise).
    `nnx.merge(graphdef, adapters, base, rest)` rebuilds the model."""
    lora_config_of(model)
    return nnx.split(model, TRAINABLE, FROZEN, ...)


def adapter_params(model: Transformer) -> dict:
    """The adapters as a nested dict of arrays (layout in the module doc)."""
    lora_config_of(model)
    return nnx.to_pure_dict(nnx.state(model, TRAINABLE))


def _leaf_shapes(tree) -> dict:
    flat, _ = jax.tree_util.tree_flatten_with_path(tree)
    return {jax.tree_util.keystr(p): tuple(x.shape) for p, x in flat}


def load_adapters(model: Transformer, adapters: Mapping) -> Transformer:
    """Replaces `model`'s adapter values with `adapters` (nested dict, `adapter_params` layout,
    each leaf cast to the adapters' param dtype), in place; returns the model. Every adapter
    must be given, with its shape."""
    lcfg = lora_config_of(model)
    state = nnx.state(model, TRAINABLE)
    want, got = _leaf_shapes(nnx.to_pure_dict(state)), _leaf_shapes(adapters)
    missing, extra = sorted(set(want) - set(got)), sorted(set(got) - set(want))
    if missing or extra:
        raise ValueError(f"adapters do not match the model's (rank {lcfg.rank}, targets "
                         f"{lcfg.targets}): missing {missing[:4]}, unexpected {extra[:4]}")
    bad = [f"{k} {got[k]} (expected {want[k]})" for k in want if got[k] != want[k]]
    if bad:
        raise ValueError(f"adapter shape(s) do not match the model's (rank {lcfg.rank}): "
                         + "; ".join(bad[:4]))
    pd = jnp.dtype(lcfg.param_dtype)
    nnx.replace_by_pure_dict(state, jax.tree.map(lambda x: jnp.asarray(x, pd), adapters))
    nnx.update(model, state)
    return model


def delta_weight(a_IR, b_RO, scale: float, shape) -> jax.Array:
    """scale * a @ b in float32 (full-precision matmul), reshaped to the base weight's `shape`."""
    prod = jnp.matmul(a_IR.astype(jnp.float32), b_RO.astype(jnp.float32),
                      precision=jax.lax.Precision.HIGHEST)
    return (prod * jnp.float32(scale)).reshape(shape)


def merge_params(base: Mapping, adapters: Mapping, lora_cfg: LoraConfig) -> dict:
    """Base parameters (nested dict, `hf.params_of` layout, no adapters) with each adapted
    weight replaced by W + scale * A @ B (summed in float32, stored in W's dtype). Pure and
    jittable: the sampler's "merged" weights. `adapters`: `adapter_params` layout."""
    out = jax.tree.map(lambda x: x, dict(base))  # new containers, same arrays
    for i, layer in adapters["layers"].items():
        for sub, mods in layer.items():
            for target, ab in mods["lora"].items():
                _, name, _, _, _ = TARGETS[target]
                w = out["layers"][i][sub][name]
                delta = delta_weight(ab["lora_a"], ab["lora_b"], lora_cfg.scale, w.shape)
                out["layers"][i][sub][name] = (w.astype(jnp.float32) + delta).astype(w.dtype)
    return out


def base_graphdef(cfg: ModelConfig) -> nnx.GraphDef:
    """The GraphDef of a plain `Transformer` of `cfg` (no adapters, nothing allocated)."""
    return nnx.graphdef(nnx.eval_shape(lambda: init_model(cfg, 0)))


def base_params(model: Transformer) -> dict:
    """The base weights of `model` (adapted or not) as a nested dict, without the adapters."""
    return nnx.to_pure_dict(nnx.state(model, FROZEN))


def strip_lora(model: Transformer) -> Transformer:
    """A plain `Transformer` over the same base arrays (nothing copied), without adapters: the
    reference policy of a LoRA run."""
    _check_model(model)
    graphdef = base_graphdef(model.cfg)
    state = nnx.state(nnx.eval_shape(lambda: init_model(model.cfg, 0)))
    nnx.replace_by_pure_dict(state, base_params(model))
    return nnx.merge(graphdef, state)


def merge_lora(model: Transformer) -> Transformer:
    """A plain `Transformer` whose adapted weights are W + scale * A @ B (new arrays; `model`
    is left as it is). Its logits equal the adapted model's within float rounding."""
    lcfg = lora_config_of(model)
    merged = jax.jit(merge_params, static_argnums=2)(base_params(model), adapter_params(model),
                                                     lcfg)
    plain = strip_lora(model)
    state = nnx.state(plain)
    nnx.replace_by_pure_dict(state, merged)
    nnx.update(plain, state)
    return plain


DECODE_MODES = ("merged", "lowrank")


def decode_variant(model: Transformer, mode: str) -> Transformer:
    """The model a sampler decodes with: "lowrank" = the adapted model itself (the adapter terms
    computed in every decode step, only adapter bytes change between syncs); "merged" =
    `merge_lora(model)` (a plain model, a plain decode step, every adapted weight rewritten at
    each sync). benchmarks/bench_lora.py times both."""
    if mode not in DECODE_MODES:
        raise ValueError(f"mode={mode!r}: expected one of {DECODE_MODES}")
    lora_config_of(model)
    return model if mode == "lowrank" else merge_lora(model)
