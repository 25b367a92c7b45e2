"""Device mesh, the logical-axis -> mesh-axis rules table, and sharded model initialisation.

Mesh axes (always all three, size 1 when unused):
  data    pure data parallelism (batch split, parameters replicated);
  fsdp    batch split *and* parameters split along their `embed` dimension (ZeRO-3 style);
  tensor  Megatron-style split of heads, MLP width and vocabulary.

Every parameter carries its logical axis names in the `axes` metadata of its `nnx.Param`
(see `tseeds_jax.model.layers`); activations and caches use the names in `LOGICAL_RULES` as well.
One table decides where everything lives, so changing the parallelism layout is a one-line edit.

The mesh is built with `AxisType.Auto` on every axis: `jax.make_mesh` defaults to Explicit axes
in this JAX, under which every op must agree on shardings by type; with Auto axes, `jax.jit`
with `in_shardings`/`out_shardings` (and `with_sharding_constraint` inside) lets the XLA
partitioner propagate layouts, which is what the learner and sampler rely on.

Letters: B batch, T sequence.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Mapping, Sequence

import jax
import numpy as np
from flax import nnx
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec

from tseeds_jax.model.config import ModelConfig
from tseeds_jax.model.rules import LOGICAL_RULES, MESH_AXES, MeshAxes, logical_to_pspec  # noqa: F401  (re-exported)
from tseeds_jax.model.transformer import Transformer, init_model

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class MeshSpec:
    """Mesh axis sizes; exactly one may be -1 (= all devices left after the others)."""

    data: int = 1
    fsdp: int = -1
    tensor: int = 1

    @classmethod
    def coerce(cls, spec: MeshSpec | Mapping[str, int] | None) -> MeshSpec:
        if spec is None:
            return cls()
        if isinstance(spec, MeshSpec):
            return spec
        if isinstance(spec, Mapping):
            unknown = set(spec) - set(MESH_AXES)
            if unknown:
                raise ValueError(f"mesh spec: unknown axes {sorted(unknown)}; expected {MESH_AXES}")
            return cls(**{k: int(v) for k, v in spec.items()})
        if dataclasses.is_dataclass(spec) or hasattr(spec, "data"):
            return cls(**{k: int(getattr(spec, k)) for k in MESH_AXES if hasattr(spec, k)})
        raise TypeError(f"mesh spec: expected MeshSpec, a mapping or None, got {type(spec).__name__}")

    def resolve(self, num_devices: int) -> tuple[int, int, int]:
        sizes = [getattr(self, a) for a in MESH_AXES]
        for axis, size in zip(MESH_AXES, sizes):
            if size == 0 or size < -1:
                raise ValueError(f"mesh spec: {axis}={size}; sizes must be positive or -1")
        fill = [i for i, s in enumerate(sizes) if s == -1]
        if len(fill) > 1:
            raise ValueError(f"mesh spec {self}: at most one axis may be -1")
        fixed = math.prod(s for s in sizes if s != -1)
        if fill:
            if num_devices % fixed:
                raise ValueError(f"mesh spec {self}: {num_devices} devices are not divisible by "
                                 f"the fixed axes' product {fixed}")
            sizes[fill[0]] = num_devices // fixed
        if math.prod(sizes) != num_devices:
            raise ValueError(f"mesh spec {self}: axis sizes multiply to {math.prod(sizes)} but "
                             f"{num_devices} devices are in use")
        return tuple(sizes)


def make_mesh(spec: MeshSpec | Mapping[str, int] | None = None, *,
              devices: Sequence[jax.Device] | None = None) -> Mesh:
    """A ("data", "fsdp", "tensor") mesh with Auto axis types over `devices` (default: all).

    `spec` is a `MeshSpec`, a dict like {"data": 2, "fsdp": -1, "tensor": 2}, or None (all
    devices on fsdp). Pass `devices=jax.devices()[:1]` for a single-device mesh.
    """
    spec = MeshSpec.coerce(spec)
    devices = list(jax.devices() if devices is None else devices)
    if not devices:
        raise ValueError("make_mesh: devices is empty")
    shape = spec.resolve(len(devices))
    return jax.make_mesh(shape, MESH_AXES, axis_types=(AxisType.Auto,) * len(MESH_AXES),
                         devices=devices)


def _is_var(x) -> bool:
    return isinstance(x, nnx.Variable)


def variable_pspec(x, mesh, rules: Mapping[str, MeshAxes] | None = None, *, what: str = "array",
                   warn: bool = True, taken: frozenset = frozenset()) -> PartitionSpec:
    """The rules-table PartitionSpec of one `nnx.Variable` (its `axes` metadata); replicated when
    it has no names, or a placeholder whose shape no longer matches them (e.g. the empty
    optimizer state of a frozen parameter). `taken`: mesh axes not to use (logical_to_pspec)."""
    axes = x.get_metadata().get("axes")
    shape = getattr(x.value, "shape", ())
    if axes is None or len(axes) != len(shape):
        return PartitionSpec()
    return logical_to_pspec(axes, rules, shape=shape, mesh=mesh, what=what, warn=warn,
                            taken=taken)


def param_shardings(abstract_state, mesh: Mesh, rules: Mapping[str, MeshAxes] | None = None):
    """NamedShardings with the structure of `abstract_state` (an `nnx.State` or any pytree).

    `nnx.Variable` leaves with `axes` metadata get the rules-table layout (Variables keep their
    type, with the sharding as value, as `jax.jit(out_shardings=...)` expects for NNX state);
    every other array-like leaf (optimizer counters, numpy metadata) is replicated.
    """
    def one(path, x):
        where = jax.tree_util.keystr(path) or "array"
        if _is_var(x):
            return x.replace(NamedSharding(mesh, variable_pspec(x, mesh, rules, what=where)))
        if hasattr(x, "shape"):
            return NamedSharding(mesh, PartitionSpec())
        return None

    return jax.tree_util.tree_map_with_path(one, abstract_state, is_leaf=_is_var)


def pure_shardings(abstract_state, mesh: Mesh, rules: Mapping[str, MeshAxes] | None = None):
    """Like `param_shardings`, as a plain nested dict (the layout `nnx.to_pure_dict` gives)."""
    return nnx.to_pure_dict(param_shardings(abstract_state, mesh, rules))


def abstract_model(cfg: ModelConfig) -> Transformer:
    """A `Transformer` whose parameters are `jax.ShapeDtypeStruct`s (no memory, no compute)."""
    return nnx.eval_shape(lambda: init_model(cfg, 0))


def sharded_init(cfg: ModelConfig, mesh: Mesh, seed: int = 0,
                 rules: Mapping[str, MeshAxes] | None = None) -> Transformer:
    """A randomly initialised `Transformer` whose parameters are created directly on `mesh`.

    eval_shape -> shardings -> jit(init, out_shardings): no device ever holds the full,
    unsharded parameter set.
    """
    if not isinstance(cfg, ModelConfig):
        raise TypeError(f"cfg must be a ModelConfig, got {type(cfg).__name__}")
    graphdef, abstract_state = nnx.split(abstract_model(cfg))
    shardings = param_shardings(abstract_state, mesh, rules)

    def init():
        return nnx.state(init_model(cfg, seed))

    state = jax.jit(init, out_shardings=shardings)()
    return nnx.merge(graphdef, state)


def shard_model(model: nnx.Module, mesh: Mesh, rules: Mapping[str, MeshAxes] | None = None):
    """Moves an existing model's parameters onto `mesh` per the rules table (in place); returns it."""
    state = nnx.state(model)
    shardings = param_shardings(state, mesh, rules)
    nnx.update(model, jax.device_put(state, shardings))
    return model


def batch_sharding(mesh: Mesh, shape: Sequence[int], axes: Sequence[str | None] | None = None,
                   rules: Mapping[str, MeshAxes] | None = None) -> NamedSharding:
    """Sharding of one batch array; default logical axes ("batch", None, ...)."""
    if axes is None:
        axes = ("batch",) + (None,) * (len(shape) - 1) if len(shape) else ()
    return NamedSharding(mesh, logical_to_pspec(axes, rules, shape=shape, mesh=mesh, what="batch"))


def shard_batch(batch, mesh: Mesh, rules: Mapping[str, MeshAxes] | None = None):
    """Places every array of a pytree `batch` on `mesh`, split along its leading (batch) dim.

    A batch size not divisible by data*fsdp is replicated instead (logged), never an error.
    Scalars are replicated.
    """
    def put(x):
        x = np.asarray(x) if not isinstance(x, jax.Array) else x
        return jax.device_put(x, batch_sharding(mesh, x.shape, rules=rules))

    return jax.tree.map(put, batch)
