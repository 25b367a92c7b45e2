"""`tseeds plan` and `tseeds compile` of LoRA runs (scale/plan.py, plan_sampler.py,
compile_lora.py; decode_layout.LoraShape).

References: the bytes each of 8 CPU devices holds of a real adapted model placed by the rules
table (`sharding.param_shardings`), its adapters counted leaf by leaf; the full-parameter plan
of the same workload. The compile test builds the tiny LoRA config's programs with XLA's TPU
compiler for compile-only v5p devices (libtpu, no TPU).
"""

import dataclasses
import os

import jax
import numpy as np
import pytest

from tseeds_jax import decode_layout as dl
from tseeds_jax.model import ModelConfig, init_model, lora
from tseeds_jax.model import sharding as sh
from tseeds_jax.rl.learn import adapters as adapters_lib
from tseeds_jax.scale import plan

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = ModelConfig(model_type="qwen2", vocab_size=256, hidden_size=64, intermediate_size=128,
                   num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)
TARGETS = ("q", "k", "v", "o", "gate", "up", "down")
RANK = 8


def _workload(**kw):
    base = dict(model=TINY, mesh=(1, 8, 1), batch_prompts=4, group_size=4, prompt_len=16,
                response_len=48, kernel_impl="chunked", kl_coef=0.1)
    base.update(kw)
    return plan.Workload(**base)


def _terms(p) -> dict:
    return {(t.phase, t.name): t.bytes for t in p.terms}


def _device_bytes(tree) -> int:
    """Bytes device 0 holds of a placed tree (its shards)."""
    return sum(x.addressable_shards[0].data.nbytes for x in jax.tree.leaves(tree))


def test_plan_trains_the_adapters_only():
    """Resident: the base as placed, the float32 adapters and their two Adam moments (none for
    the base), no reference copy for the KL term; gradients adapter-sized."""
    mesh = sh.make_mesh(sh.MeshSpec(data=1, fsdp=8, tensor=1))
    model = lora.apply_lora(init_model(TINY, 0), lora.LoraConfig(rank=RANK, targets=TARGETS))
    _, adapters, frozen = adapters_lib.split(model, 0)
    adapters = jax.device_put(adapters, sh.param_shardings(adapters, mesh))
    base = jax.device_put(frozen.base, sh.param_shardings(frozen.base, mesh))
    want_ad, want_base = _device_bytes(adapters), _device_bytes(base)

    got = _terms(plan.estimate(_workload(lora_rank=RANK, lora_targets=TARGETS)))
    full = _terms(plan.estimate(_workload()))
    assert got[("resident", "LoRA adapters")] == want_ad
    assert got[("resident", "optimizer state")] == 2 * want_ad
    assert got[("resident", "parameters")] == want_base == full[("resident", "parameters")]
    assert ("resident", "reference parameters") not in got
    assert full[("resident", "reference parameters")] == want_base
    assert got[("learner", "gradient accumulator")] == want_ad
    assert full[("learner", "gradient accumulator")] == want_base
    n_ad = sum(x.size for x in jax.tree.leaves(adapters))
    assert adapters_lib.adapter_count(TINY, RANK, TARGETS) == n_ad


def test_plan_sampler_copies_by_mode():
    """A merged sampler holds a merged copy of the weights (replica: beside the base replica);
    a low-rank one reads the adapters beside the base itself."""
    kw = dict(lora_rank=RANK, lora_targets=TARGETS, mesh=(1, 1, 1), kl_coef=0.0)
    merged = _terms(plan.estimate(_workload(**kw, lora_sampler="merged")))
    low = _terms(plan.estimate(_workload(**kw, lora_sampler="lowrank")))
    n = TINY.num_params
    n_ad = adapters_lib.adapter_count(TINY, RANK, TARGETS)
    # one device: the learner's base is the sampler's replica (no copy), float32 everywhere
    assert merged[("sampler", "sampler parameters")] == n * 4 + n_ad * 4
    assert low[("sampler", "sampler parameters")] == n_ad * 4


def test_decode_layout_counts_the_lora_state():
    """The learner's resident state: the base without Adam moments, the float32 adapters with
    theirs; a merged sampler keeps its base beside the merged weights (fewer slots fit)."""
    cfg = dataclasses.replace(TINY, param_dtype="bfloat16", dtype="bfloat16")
    n_ad = adapters_lib.adapter_count(cfg, RANK, TARGETS)
    merged, low = dl.LoraShape(n_ad, True), dl.LoraShape(n_ad, False)
    assert dl.learner_state_bytes(cfg, 4, merged) == (cfg.num_params * 2 + n_ad * 12) // 4
    assert dl.learner_state_bytes(cfg, 4) == cfg.num_params * 10 // 4
    m_m, m_l = dl.DecodeModel.of(cfg, "bfloat16", merged), dl.DecodeModel.of(cfg, "bfloat16", low)
    assert m_m.held_bytes == cfg.num_params * 2 and m_m.weight_bytes == cfg.num_params * 2
    assert m_l.held_bytes == 0 and m_l.weight_bytes == cfg.num_params * 2 + n_ad * 4
    hbm = 64 << 20
    fits = [dl.decide_for(cfg, sampler_dtype="bfloat16", chip=None, devices=4, per_host=4,
                          requests=4096, hbm_bytes=hbm, cache_len=512, tensor=1, lora=x).fit
            for x in (merged, low)]
    assert 0 < fits[0] < fits[1]


@pytest.mark.slow  # ~60 s: libtpu compiles of a tiny model
# merged (the default) in CI; the low-rank sampler's compiled programs on request (~30 s)
@pytest.mark.parametrize("mode", ["merged", pytest.param("lowrank", marks=pytest.mark.manual)])
def test_compiled_lora_programs_sync_adapters_only(mode):
    """The tiny LoRA config on v5p:2x2x1 (data 2 x fsdp 2, the decode layout): the update's
    trained state is the adapters' (the base an argument); the weight sync moves the adapters
    only; a merged sampler has its merge program."""
    from tseeds_jax.scale import compile_run, topology

    assert topology.libtpu_available() is None
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "tiny_lora", os.path.join(ROOT, "configs", "tiny_lora_seeds.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    cd = mod.get_config()
    cd.model.arch.vocab_size = 512
    cd.mesh.data, cd.mesh.fsdp, cd.mesh.tensor = 2, 2, 1
    cd.optim.micro_batch_size = 8
    cd.hardware.sampler_placement = "decode"
    cd.lora.sampler = mode
    res = compile_run.compile_config(cd, topology="v5p:2x2x1", only=("learner", "sampler"),
                                     prefill_buckets="max", keep_executables=True)
    assert res.fits and not res.failures
    names = {c.name for c in res.compiled}
    assert ("lora_merge" in names) == (mode == "merged")
    mcfg = res.target.mcfg
    rank = cd.lora.rank
    n_ad = adapters_lib.adapter_count(mcfg, rank, tuple(cd.lora.targets))
    # the weight sync's arguments: the float32 adapters (A [I, R], B [R, O]), nothing else
    args = jax.tree.leaves(res.by_name("sampler_reshard").executable.args_info)
    assert sum(int(np.prod(a.shape)) for a in args) == n_ad
    assert all(rank in a.shape and a.dtype == np.float32 for a in args)
    # the update: the adapters' state (params + two Adam moments) and the frozen base
    upd = jax.tree.leaves(res.by_name("learner_update").executable.args_info)
    sizes = sorted(int(np.prod(a.shape)) for a in upd)
    assert sum(sizes) < mcfg.num_params + 3 * n_ad + 64 * 32 * 48 * 4  # + the batch
    assert sum(s for s in sizes if s >= mcfg.hidden_size * mcfg.vocab_size) \
        == mcfg.hidden_size * mcfg.vocab_size  # one embedding, never a moment of it
