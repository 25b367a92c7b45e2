"""XLA's own memory numbers for the real learner step and sampler decode call, compiled from
shapes only (no arrays).

Used to check the planner against the compiler: the learner's jitted update (`plan.learner_step`)
and the sampler's decode call `core.run_chunk` with parameters and decode state sharded over a
mesh of emulated CPU devices (`plan.sampler_decode_bytes`) are lowered with
`jax.ShapeDtypeStruct`s, compiled, and their `memory_analysis()` read (per device for a
partitioned program). Nothing is allocated or run.

Run as a module it prints one JSON line per case; it then switches XLA:CPU to its memory-minimising
scheduler *before* JAX starts (the default CPU scheduler favours concurrency and ignores memory, so
it keeps every layer's rematerialised activations alive at once; TPU and GPU schedulers do not):

    python tests/xla_measure.py '[{"hidden_size": 256, "num_hidden_layers": 2}]'
    python tests/xla_measure.py '[{"kind": "sampler", "mesh": [1, 2, 4]}]'

A test helper (tests/test_plan_xla.py), not part of the package.

Letters: B sequences, P prompt width, R response width, T = P + R.
"""

from __future__ import annotations

import json
import math
import os
import sys
from typing import Any

MEMORY_SCHEDULER_FLAG = "--xla_cpu_enable_concurrency_optimized_scheduler=false"

# Defaults of one measured case; every key may be overridden.
CASE_DEFAULTS: dict[str, Any] = dict(
    model_type="qwen2", vocab_size=8192, hidden_size=256, intermediate_size=768,
    num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True,
    param_dtype="float32", dtype="float32", remat=False,
    batch=8, prompt_len=32, response_len=224, mini_batches=1, micro_batch_size=0,
    kernel_impl="chunked",
)


# Sampler cases: the model keys above plus these (the decode call of the sharded sampler).
SAMPLER_DEFAULTS: dict[str, Any] = dict(mesh=(1, 8, 1), slots=64, prompt_len=32, response_len=224)
_MODEL_KEYS = ("model_type", "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
               "num_attention_heads", "num_key_value_heads", "tie_word_embeddings", "param_dtype",
               "dtype")


def case_parts(case: dict[str, Any]):
    """(ModelConfig, OptimConfig, LossConfig, B, P, R, kernel_impl) of a case dict."""
    from tseeds_jax.model import ModelConfig
    from tseeds_jax.rl.config import TrainConfig, default_config

    c = {**CASE_DEFAULTS, **case}
    unknown = set(c) - set(CASE_DEFAULTS)
    if unknown:
        raise ValueError(f"xla_measure case: unknown keys {sorted(unknown)}")
    mcfg = ModelConfig(model_type=c["model_type"], vocab_size=c["vocab_size"],
                       hidden_size=c["hidden_size"], intermediate_size=c["intermediate_size"],
                       num_hidden_layers=c["num_hidden_layers"],
                       num_attention_heads=c["num_attention_heads"],
                       num_key_value_heads=c["num_key_value_heads"],
                       tie_word_embeddings=c["tie_word_embeddings"],
                       param_dtype=c["param_dtype"], dtype=c["dtype"], remat=c["remat"])
    # Loss and optimizer sections from the validated defaults (DAPO, AdamW with the paper-scale
    # configs' values), so that new config fields keep their defaults here.
    cd = default_config()
    cd.optim.lr, cd.optim.warmup_steps, cd.optim.weight_decay = 1e-6, 10, 0.1
    cd.rollout.batch_prompts, cd.rollout.group_size = c["batch"], 1
    cd.rollout.max_response_len = c["response_len"]
    cd.optim.mini_batches, cd.optim.micro_batch_size = c["mini_batches"], c["micro_batch_size"]
    tcfg = TrainConfig.from_config(cd)
    ocfg, lcfg = tcfg.optim, tcfg.loss
    return mcfg, ocfg, lcfg, c["batch"], c["prompt_len"], c["response_len"], c["kernel_impl"]


def workload_for_case(case: dict[str, Any]):
    """The planner's `Workload` for the same shapes (one device, no sampler, no seeds)."""
    from tseeds_jax.scale.plan import Workload

    mcfg, ocfg, _, b, p, r, impl = case_parts(case)
    return Workload(model=mcfg, mesh=(1, 1, 1), batch_prompts=b, group_size=1, prompt_len=p,
                    response_len=r, mini_batches=ocfg.mini_batches,
                    micro_batch_size=ocfg.micro_batch_size, kernel_impl=impl)


def sampler_case_parts(case: dict[str, Any]):
    """(ModelConfig, mesh (data, fsdp, tensor), slots, P, R) of a sampler case dict."""
    from tseeds_jax.model import ModelConfig

    c = {**{k: CASE_DEFAULTS[k] for k in _MODEL_KEYS}, **SAMPLER_DEFAULTS,
         **{k: v for k, v in case.items() if k != "kind"}}
    unknown = set(c) - set(_MODEL_KEYS) - set(SAMPLER_DEFAULTS)
    if unknown:
        raise ValueError(f"xla_measure sampler case: unknown keys {sorted(unknown)}")
    mcfg = ModelConfig(**{k: c[k] for k in _MODEL_KEYS})
    return mcfg, tuple(int(x) for x in c["mesh"]), c["slots"], c["prompt_len"], c["response_len"]


def sampler_workload_for_case(case: dict[str, Any]):
    """The planner's `Workload` of a sampler case: the sharded sampler, sampler dtype = params."""
    from tseeds_jax.scale.plan import Workload

    mcfg, mesh, slots, p, r = sampler_case_parts(case)
    return Workload(model=mcfg, mesh=mesh, batch_prompts=slots, group_size=1, prompt_len=p,
                    response_len=r, sampler_dtype=mcfg.param_dtype, sampler_slots=slots,
                    sampler_placement="sharded")


def compiled_sampler_memory(case: dict[str, Any]) -> dict[str, int]:
    """Compiles `core.run_chunk` (the decode while-loop) with parameters sharded by the rules
    table and the decode state placed as the driver places it; returns the per-device memory
    analysis like `compiled_learner_memory`. Needs prod(mesh) devices."""
    import functools

    import jax
    from flax import nnx

    from tseeds_jax.model import init_model
    from tseeds_jax.model import sharding as shd
    from tseeds_jax.sampling import core
    from tseeds_jax.sampling.placement import SamplerShardings
    from tseeds_jax.sampling.strategies import make_strategy

    mcfg, mesh_sizes, slots, p, r = sampler_case_parts(case)
    mesh = shd.make_mesh(dict(zip(shd.MESH_AXES, mesh_sizes)),
                         devices=jax.devices()[:math.prod(mesh_sizes)])
    graphdef, params = nnx.split(nnx.eval_shape(lambda: init_model(mcfg, 0)))

    def sds(x, sharding):
        return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding)

    params = jax.tree.map(sds, params, shd.param_shardings(params, mesh))
    place = SamplerShardings(mesh)
    n_out = max(16, 1 << (r - 1).bit_length())  # the driver's output buffer length
    init = functools.partial(core.init_buffers, mcfg, place.round_rows(slots),
                             core.cache_bucket(p + r), n_out)
    state, out_t, out_lp = jax.eval_shape(init)
    state = jax.tree.map(sds, state, place.state_shardings(state))
    out_t, out_lp = (sds(x, place.rows(x.shape, "output buffer")) for x in (out_t, out_lp))
    m = core.run_chunk.lower(graphdef, make_strategy(1.0, 0, 1.0), (), params, state, out_t,
                             out_lp, n_out + 1, True).compile().memory_analysis()
    return _memory_dict(m)


def _memory_dict(m) -> dict[str, int]:
    out = dict(argument=int(m.argument_size_in_bytes), output=int(m.output_size_in_bytes),
               alias=int(m.alias_size_in_bytes), temp=int(m.temp_size_in_bytes))
    out["footprint"] = out["argument"] + out["output"] - out["alias"] + out["temp"]
    return out


def compiled_learner_memory(case: dict[str, Any]) -> dict[str, int]:
    """Compiles the learner's update for `case` (single device) and returns its memory analysis
    in bytes: argument, output, alias, temp, and `footprint` = argument + output - alias + temp
    (outputs written into donated inputs are counted once)."""
    import jax
    import jax.numpy as jnp
    from flax import nnx

    from tseeds_jax.model import init_model
    from tseeds_jax.rl.learn.batch import LearnerBatch
    from tseeds_jax.rl.learn.learner import Learner

    mcfg, ocfg, lcfg, b, p, r, impl = case_parts(case)
    graphdef, params = nnx.split(nnx.eval_shape(lambda: init_model(mcfg, 0)))
    learner = Learner(graphdef, params, lcfg, ocfg, variant="state+action", old_logp_mode="auto",
                      kernel_impl=impl)
    state = jax.eval_shape(learner.init_state, params)
    sds = jax.ShapeDtypeStruct
    f32 = lambda *shape: sds(shape, jnp.float32)  # noqa: E731
    batch = LearnerBatch(tokens_BT=sds((b, p + r), jnp.int32), attn_mask_BT=sds((b, p + r), jnp.int32),
                         resp_mask_BR=f32(b, r), seed_mask_BR=f32(b, r), behavior_logp_BR=f32(b, r),
                         sampler_logp_BR=f32(b, r), old_logp_BR=f32(b, r), ref_logp_BR=f32(b, r),
                         advantages_B=f32(b))
    rng = jax.eval_shape(lambda: jax.random.PRNGKey(0))
    m = learner.update_pass.lower(state, batch, rng, learner.initial_controller_state()).compile() \
        .memory_analysis()
    return _memory_dict(m)


def compiled_memory(case: dict[str, Any]) -> dict[str, int]:
    """`compiled_sampler_memory` for cases with "kind": "sampler", else the learner's."""
    if case.get("kind", "learner") == "sampler":
        return compiled_sampler_memory(case)
    return compiled_learner_memory(case)


def measure_in_subprocess(cases: list[dict[str, Any]], *, memory_scheduler: bool = True,
                          timeout: float = 600, devices: int = 1) -> list[dict[str, int]]:
    """Runs `compiled_memory` for each case in a fresh CPU process with `devices` emulated
    devices (sampler cases need prod(mesh))."""
    import subprocess

    env = dict(os.environ)
    flags = [f for f in env.get("XLA_FLAGS", "").split()
             if "xla_force_host_platform_device_count" not in f
             and "concurrency_optimized_scheduler" not in f]
    if devices > 1:
        flags.append(f"--xla_force_host_platform_device_count={devices}")
    if memory_scheduler:
        flags.append(MEMORY_SCHEDULER_FLAG)
    env["XLA_FLAGS"] = " ".join(flags)
    env["JAX_PLATFORMS"] = "cpu"
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--no-scheduler-flag",
                           json.dumps(cases)],
                          env=env, capture_output=True, text=True, timeout=timeout, check=False)
    if proc.returncode:
        raise RuntimeError(f"xla_measure subprocess failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def main(argv: list[str]) -> int:
    args = list(argv)
    set_flag = "--no-scheduler-flag" not in args
    args = [a for a in args if a != "--no-scheduler-flag"]
    if len(args) != 1:
        print("usage: python tests/xla_measure.py [--no-scheduler-flag] JSON_CASES",
              file=sys.stderr)
        return 2
    if set_flag and "jax" not in sys.modules:
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + MEMORY_SCHEDULER_FLAG)
    cases = json.loads(args[0])
    if isinstance(cases, dict):
        cases = [cases]
    if set_flag and "jax" not in sys.modules and any(c.get("kind") == "sampler" for c in cases):
        need = max(math.prod(sampler_case_parts(c)[1]) for c in cases if c.get("kind") == "sampler")
        os.environ["XLA_FLAGS"] += f" --xla_force_host_platform_device_count={need}"
    for case in cases:
        print(json.dumps(compiled_memory(case)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
