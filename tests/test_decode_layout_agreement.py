"""The run, `tseeds plan` and `tseeds compile` choose the same decode layout (tensor width,
replicas, slots, and the slots memory holds) for the paper's TPU variants: all three call
`tseeds_jax.decode_layout.decide_for` with inputs derived from the same config, chip table and
compile-only devices (no program is compiled here)."""

import importlib.util
import os

import pytest

from tseeds_jax import decode_layout as dl
from tseeds_jax.rl.config import TrainConfig
from tseeds_jax.rl.setup import decode_sync
from tseeds_jax.scale import compile_programs as cp
from tseeds_jax.scale import compile_run, plan_cli, plan_sampler

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VARIANTS = ("qwen25_math_7b_dapo17k", "r1_distill_qwen_1p5b_openr1", "qwen3_4b_thinking_code")


def _config(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "configs", f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.get_config()


@pytest.mark.parametrize("name", VARIANTS)
def test_plan_compile_and_run_choose_one_layout(name):
    cd = _config(name)
    assert cd.hardware.sampler_placement == "decode"
    plan, acc = plan_cli.build_plan(cd)  # `tseeds plan`
    _, planned = plan_sampler.workload_decode_choice(plan.workload, acc.hbm_bytes)
    target = compile_run.make_target(cd)  # `tseeds compile` (compile-only TPU devices)
    compiled = cp.sampler_shapes(target)["choice"]
    cfg = TrainConfig.from_config(cd)  # the run, on the same devices
    devices = list(target.mesh.devices.flat)
    sync = decode_sync(cfg, cfg.model.model_config(),
                       cfg.data.max_prompt_len + cfg.rollout.max_response_len, devices=devices)
    run = sync.decide(devices)
    assert planned.record() == compiled.record() == run.record(), (planned, compiled, run)
    assert planned.layout.devices == len(devices)
    # the run refuses a layout that differs from the compiled record, and accepts the same one
    dl.check_recorded(run, compiled.record(), "manifest.json")
    other = dict(compiled.record(), slots_per_replica=compiled.slots + 1)
    with pytest.raises(ValueError, match="was compiled for"):
        dl.check_recorded(run, other, "manifest.json")
