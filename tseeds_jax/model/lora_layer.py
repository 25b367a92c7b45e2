"""One LoRA adapter (Flax NNX's `nnx.LoRA`) and the hook the projections call.

Letters: N rows (flattened batch x tokens), I input features, O output features, R rank.

An adapter adds `scale * dropout(x_NI) @ a_IR @ b_RO` to a projection's output; `a` and `b`
are `nnx.LoRAParam`s (an `nnx.Param` subclass, so every Param filter still sees them and
`nnx.LoRAParam` alone selects them). The product runs in the input's dtype (the model's compute
dtype), like the base weights, which the projections also cast to it. The adapters of a module
live in its `lora` attribute, an `nnx.Dict` keyed by projection name, which exists only on a
model that `tseeds_jax.model.lora.apply_lora` adapted: a model without it runs exactly the code
and holds exactly the parameters it had before LoRA existed.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

# The rank dimension of every adapter; replicated by the rules table (`rules.LOGICAL_RULES`).
RANK_AXIS = "lora_rank"


def a_initializer():
    """PEFT's default for A (torch `kaiming_uniform_(a=sqrt(5))` on its [R, I] weight):
    uniform in +-1/sqrt(I), with I the fan-in here too."""
    return jax.nn.initializers.variance_scaling(1.0 / 3.0, "fan_in", "uniform", in_axis=0,
                                                out_axis=1)


class LoraDropoutKey(nnx.Variable):
    """The key [2] uint32 of every adapter's dropout masks (one Variable shared by the adapters of
    a model; adapter k folds in its own index). Not a parameter: `lora.split_lora` puts it in
    the "rest" state, and a training step sets a new value per micro-batch instead of a hidden
    counter advancing (nothing is mutated inside a traced step, so remat and jax.grad of the
    adapters alone work, and masks are a function of the key the trainer derives)."""


class LoraAdapter(nnx.LoRA):
    """`nnx.LoRA` without a base module, plus the LoRA scale and input dropout.

    a [I, R] carries the logical axes (in_axis, "lora_rank"), b [R, O] ("lora_rank", out_axis):
    A is laid out like the base weight's input dimension, B like its output dimension, and the
    rank is replicated. With `dropout` > 0, `dropout_key` (a shared `LoraDropoutKey`) and
    `index` (this adapter's number in the model) make the masks; they apply only while
    `deterministic` is False (`lora.set_lora_dropout`).
    """

    def __init__(self, in_features: int, rank: int, out_features: int, *, scale: float,
                 dropout: float, in_axis: str | None, out_axis: str | None, param_dtype,
                 rngs: nnx.Rngs, index: int = 0, dropout_key: LoraDropoutKey | None = None):
        super().__init__(in_features, rank, out_features, param_dtype=param_dtype,
                         a_initializer=a_initializer(), rngs=rngs,
                         a_metadata={"axes": (in_axis, RANK_AXIS)},
                         b_metadata={"axes": (RANK_AXIS, out_axis)})
        if dropout > 0 and dropout_key is None:
            raise ValueError(f"LoraAdapter: dropout={dropout} needs a dropout_key")
        self.scale = float(scale)
        self.rate = float(dropout)
        self.index = int(index)
        self.deterministic = True
        self.dropout_key = dropout_key if dropout > 0 else None

    def _dropout(self, x_NI):
        if self.dropout_key is None or self.deterministic:
            return x_NI
        key = jax.random.fold_in(self.dropout_key[...], self.index)
        keep_NI = jax.random.bernoulli(key, 1.0 - self.rate, x_NI.shape)
        return jnp.where(keep_NI, x_NI / jnp.asarray(1.0 - self.rate, x_NI.dtype), 0).astype(x_NI.dtype)

    def __call__(self, x_NI):
        """scale * dropout(x) @ a @ b [N, O] in x's dtype."""
        x_NI = self._dropout(x_NI)
        dt = x_NI.dtype
        y_NO = (x_NI @ self.lora_a[...].astype(dt)) @ self.lora_b[...].astype(dt)
        return y_NO * jnp.asarray(self.scale, dt)


def adapted(module: nnx.Module, name: str, y, x):
    """`y` (a projection's output, any shape with N = x's rows) plus adapter `name`'s term of
    the projection's input `x` ([..., I]), when `module` carries one; `y` itself otherwise."""
    adapters = getattr(module, "lora", None)
    if adapters is None or name not in adapters:
        return y
    delta = adapters[name](x.reshape(-1, x.shape[-1]))
    return y + delta.reshape(y.shape)
