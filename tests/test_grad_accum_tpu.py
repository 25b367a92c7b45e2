"""`optim.grad_reduce = "update"` in XLA's TPU compiler (libtpu, compile-only devices, no TPU).

A tiny config laid out as the R1-Distill-1.5B TPU variant is (v6e:8x8, fsdp 64, one sequence per
device per micro-step, 4 micro-steps): the default path reduces the weight gradients in every
micro-step, and on this topology libtpu writes each reduction as a full-size all-reduce plus a
slice (docs/scale.md, issue #24); "update" reduces them once per update. Counted loop by loop in
the optimized HLO (`hlo_cost`).
"""

import importlib.util
import os

import jax
import pytest

from tseeds_jax.scale import topology

REASON = topology.libtpu_available()
assert REASON is None, f"libtpu unavailable: {REASON}"

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = os.path.join(ROOT, "configs", "tiny_thinking_seeds.py")


def _collectives(mode: str) -> dict:
    from tseeds_jax.scale import compile_programs as cp
    from tseeds_jax.scale import compile_run, plan_common
    from tseeds_jax.scale.hlo_cost import hlo_cost

    spec = importlib.util.spec_from_file_location("tiny_ts_grad", CONFIG)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    cd = mod.get_config()
    # Weight matrices large enough that their gradients are most of the collectives, as at
    # paper scale (the tiny model's are not): 2 layers of width 512, head dim 128 (as
    # the paper models: splash wants a 128-lane head in bfloat16), 6.0 M parameters.
    cd.model.arch.update(hidden_size=512, intermediate_size=1536, num_attention_heads=4,
                         num_key_value_heads=2, vocab_size=512)
    cd.model.dtype = "bfloat16"  # the paper configs' compute dtype: gradients reduce in it
    cd.data.max_prompt_len, cd.rollout.max_response_len = 256, 256
    cd.rollout.batch_prompts, cd.rollout.group_size = 32, 8
    cd.mesh.data, cd.mesh.fsdp, cd.mesh.tensor = 1, 64, 1
    cd.optim.micro_batch_size = 64
    cd.optim.grad_reduce = mode
    t = compile_run.make_target(cd, topology="v6e:8x8")
    (prog,) = compile_run.programs_for(t, ("learner",))
    # conftest asks for "highest" float32 matmuls; Mosaic rejects that precision on the
    # splash kernel's bfloat16 dots ("Bad lhs type"), and a TPU run uses the default.
    with jax.default_matmul_precision("default"):
        lowered, _ = cp.lower(prog, t.family)
    cost = hlo_cost(lowered.compile().as_text(), num_devices=64)
    return cost.collective_bytes, plan_common.param_layout(t.mcfg, (1, 64, 1)).total


@pytest.mark.manual  # ~40 s of TPU compiles; test_grad_accum.py checks the same on XLA:CPU (CI time)
def test_update_reduction_moves_the_gradients_once_on_v6e_8x8():
    from tseeds_jax.rl.learn import learner

    learner._JITTED.clear()
    micro, n_params = _collectives("micro_batch")
    once, _ = _collectives("update")
    grads = lambda c: c.get("all-reduce", 0.0) + c.get("reduce-scatter", 0.0)  # noqa: E731
    # Four reductions per update become one: at least three bfloat16 all-reduces of every
    # gradient (2 x 2 B x (n-1)/n per parameter each) fewer. What stays in both (weights gathered
    # as update-slice + all-reduce, the loss's sums) is not the gradients'.
    one_all_reduce = 2 * 2 * n_params * 63 / 64
    assert grads(micro) - grads(once) >= 3 * one_all_reduce * 0.95, (micro, once, n_params)
    assert sum(once.values()) < sum(micro.values())
