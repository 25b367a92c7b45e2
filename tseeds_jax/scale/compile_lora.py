"""`tseeds compile` of a LoRA run (config.lora.rank > 0; rl/learn/adapters.py): the learner's
programs take the adapters' train state and the frozen base as their last argument; the sampler
decodes with the adapters merged into a copy of its weights (plus the `lora_merge` program, run
once per sync) or as low-rank terms of the decode step; the weight sync (`sampler_reshard` on the
decode layout) moves the adapters only, the base being placed there once.

Everything is abstract (`jax.ShapeDtypeStruct`s with the run's shardings), as in
compile_programs.py (the helpers of compile_common.py).
"""

from __future__ import annotations

import functools

import jax
from flax import nnx
from jax.sharding import SingleDeviceSharding

from tseeds_jax.model import sharding as shd
from tseeds_jax.scale import compile_common as cp


def make_learner(t, kernel_impl: str):
    """(Learner, abstract sharded TrainState of the adapters) with the abstract sharded frozen
    base as `learner.frozen`, as `rl.setup.make_trainer` builds them."""
    from tseeds_jax.model import init_model, lora
    from tseeds_jax.rl.learn import adapters as adapters_lib
    from tseeds_jax.rl.learn.hooks import old_logp_mode
    from tseeds_jax.rl.learn.learner import Learner

    cfg = t.cfg
    lcfg = adapters_lib.lora_config(cfg.lora)
    model = nnx.eval_shape(lambda: lora.apply_lora(init_model(t.mcfg, 0), lcfg, seed=0))
    graphdef, adapters, frozen = adapters_lib.split(model, cfg.seed)
    adapters = cp.abstract(adapters, shd.param_shardings(adapters, t.mesh))
    frozen = frozen.placed(*cp.abstract(frozen.states, shd.param_shardings(frozen.states, t.mesh)))
    learner = Learner(graphdef, adapters, cfg.loss, cfg.optim, variant=cfg.seeds.variant,
                      old_logp_mode=old_logp_mode(cfg), kernel_impl=kernel_impl, frozen=frozen,
                      temperature=cfg.rollout.temperature)
    state = jax.eval_shape(learner.init_state, adapters)
    return learner, cp.abstract(state, shd.param_shardings(state, t.mesh))


def frozen_args(learner) -> tuple:
    """The jitted learner functions' last argument: none, or (the frozen states,)."""
    return () if getattr(learner, "frozen", None) is None else (learner.frozen.states,)


def frozen_bytes(learner) -> int:
    """Bytes one device holds of the frozen base (0 without LoRA)."""
    args = frozen_args(learner)
    return cp.device_bytes(args) if args else 0


def on_one_device(tree, device):
    one = SingleDeviceSharding(device)
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=one), tree)


def sampler_weights(t, learner, state, sdt: str, where: str, mesh=None, device=None):
    """The sampler's (ModelDef, params, separate bytes, held bytes, programs) of a LoRA run.

    where: "decode" (the decode layout on `mesh`), "sharded" (the learner's mesh) or "replica"
    (one `device`). separate: bytes of `params` that are not the learner's own arrays; held:
    bytes alive beside them (a merged sampler's base on the decode layout or replica)."""
    from tseeds_jax.rl.learn import adapters as adapters_lib
    from tseeds_jax.sampling import core, layout

    f = learner.frozen
    merged = t.cfg.lora.sampler == "merged"
    adapters = state.params
    base, rest = f.states
    progs = []
    if where == "decode":
        ad_sh = layout.param_shardings(adapters, mesh)
        progs.append(cp.Program(
            "sampler_reshard", "sampler", "the weight sync: the float32 adapters from the "
            "learner's layout into the decode layout (the base is placed there once)",
            functools.partial(jax.jit(lambda x: x, out_shardings=ad_sh).lower, adapters),
            extra_live=cp.device_bytes(state) + frozen_bytes(learner)))
        adapters = cp.abstract(adapters, ad_sh)
        base, rest = cp.abstract((base, rest), layout.param_shardings((base, rest), mesh))
    elif where == "replica":
        adapters, base, rest = on_one_device((adapters, base, rest), device)
    own = where == "sharded"  # the learner's own base arrays
    if not merged:
        cast = cp.cast_tree(base, sdt)
        separate = cp.device_bytes(cast) if (not own or sdt != t.mcfg.param_dtype) else 0
        params = nnx.merge_state(adapters, cast, rest)
        return core.ModelDef(f.graphdef), params, separate, 0, progs
    plain = jax.eval_shape(functools.partial(adapters_lib.merged_weights, lcfg=f.lcfg, dtype=sdt),
                           adapters, base)
    out_sh = jax.tree.map(lambda x: x.sharding, base)
    params = cp.abstract(plain, out_sh)
    held = 0 if own else cp.device_bytes(base)
    merge = jax.jit(adapters_lib.merged_weights, static_argnums=(2, 3), out_shardings=out_sh)
    progs.append(cp.Program(
        "lora_merge", "sampler", f"the sampler's weights at a sync: W + scale A B of every "
        f"adapted weight ({where}), in {sdt}",
        functools.partial(merge.lower, adapters, base, f.lcfg, sdt),
        extra_live=cp.device_bytes(state) + frozen_bytes(learner) * (where != "sharded")))
    return core.ModelDef(f.plain_graphdef), params, cp.device_bytes(params), held, progs
