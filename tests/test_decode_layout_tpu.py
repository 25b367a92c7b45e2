"""The decode layout compiled by XLA's TPU compiler (compile-only v5p devices, libtpu): the weight
sync is its own program with the collectives of the reshard; on a tensor-parallel layout the
decode step moves no [slots, vocab] array and its collectives are the per-layer all-reduces of
[slots, D]; the summary reports the layout, the live-context bound and the generation times.
"""

import importlib.util
import os
import re

import pytest

from tseeds_jax.scale import topology

REASON = topology.libtpu_available()
assert REASON is None, f"libtpu unavailable: {REASON}"

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VOCAB = 512


def _config(tensor: int):
    spec = importlib.util.spec_from_file_location(
        "tiny_ts", os.path.join(ROOT, "configs", "tiny_thinking_seeds.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    cd = mod.get_config()
    cd.model.arch.vocab_size = VOCAB
    cd.mesh.data, cd.mesh.fsdp, cd.mesh.tensor = 1, 4, 1
    cd.optim.micro_batch_size = 8
    cd.hardware.sampler_placement = "decode"
    cd.hardware.sampler_tensor = tensor
    return cd


@pytest.fixture(scope="module")
def compiled():
    from tseeds_jax.scale import compile_run

    return compile_run.compile_config(_config(2), topology="v5p:2x2x1", only=("sampler",),
                                      prefill_buckets="max", keep_executables=True)


def test_programs_and_summary(compiled):
    names = [c.name for c in compiled.compiled]
    assert names[0] == "sampler_reshard" and "sampler_decode_step" in names, names
    assert compiled.fits
    sync = compiled.by_name("sampler_reshard")
    # fsdp shards -> tensor-split replicas: every device receives weights it did not hold.
    assert sync.collective_bytes.get("all-gather", 0) + sync.collective_bytes.get(
        "all-to-all", 0) + sync.collective_bytes.get("collective-permute", 0) > 0, sync.to_dict()
    s = compiled.summary()
    assert s["decode_layout"]["tensor"] == 2 and s["decode_layout"]["replicas"] == 2
    assert s["decode_layout"]["slots_per_replica"] * 2 == 112  # rows x (T - 1) = 16 x 7 requests
    g = s["generation_s"]
    assert g["refresh_behavior"]["requests"] == 7 * g["on_policy"]["requests"] == 112
    # An on-policy call is sized to its 16 requests (8 per replica) and compiled on its own.
    on = compiled.by_name("sampler_decode_step_onpolicy")
    assert on is not None and g["on_policy"]["slots"] == 16 and g["refresh_behavior"]["slots"] == 112
    assert on.bytes_accessed < compiled.by_name("sampler_decode_step").bytes_accessed
    assert g["on_policy"]["sync_s"] > 0 and g["refresh_behavior"]["decode_s"] > 0


def test_decode_step_moves_no_logits(compiled):
    step = compiled.by_name("sampler_decode_step")
    hlo = step.executable.as_text()
    bad = [ln.strip()[:160] for ln in hlo.splitlines()
           if re.search(r"= \S+ (all-gather|all-reduce|all-to-all|reduce-scatter)(-start)?\(", ln)
           and re.search(rf"\[\d+,{VOCAB}\]|\[{VOCAB},", ln.split("(")[0])]
    assert not bad, bad
    # What moves: per layer two all-reduces of the replica's [slots, D] activations (f32 or
    # bf16) and per-row scalars of the vocabulary-parallel draw.
    cfg = compiled.target.mcfg
    slots = compiled.summary()["decode_layout"]["slots_per_replica"]
    per_layer = 2 * 2 * slots * cfg.hidden_size * 4 * (2 - 1) / 2  # ring all-reduce, f32
    assert step.ici_bytes <= 1.5 * cfg.num_hidden_layers * per_layer + 1e5, step.to_dict()
