"""No [.., T, T] score buffer on TPU: a tiny Thinking Seeds config (T = 64 + 192 = 256) compiled
by XLA's TPU compiler for compile-only v5p devices (libtpu, no TPU; data x fsdp = 2 x 2 over
v5p:2x2x1), the optimized HLO of the learner update, the statistics pass and the sampler's
largest prefill read for float32 / bfloat16 buffers whose two minor dimensions are [T, T].

The check is shown to bite: with the XLA reference attention forced (what the model ran before
splash) the statistics pass holds f32[.., 256, 256] scores (measured: the update and the prefill
too, f32[2,2,2,256,256] and f32[32,2,2,256,256]).
"""

import os
import re

import pytest

from tseeds_jax.model import attention
from tseeds_jax.scale import topology

# libtpu (XLA's TPU compiler) is a pinned test package (requirements-test.txt): fail, never skip.
REASON = topology.libtpu_available()
assert REASON is None, f"libtpu unavailable: {REASON}"

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = os.path.join(ROOT, "configs", "tiny_thinking_seeds.py")
P_LEN, R_LEN = 64, 192
T = P_LEN + R_LEN
CHECKED = ("learner_update", "stats_forward", "sampler_prefill_")


def _programs():
    import importlib.util

    from tseeds_jax.scale import compile_run

    spec = importlib.util.spec_from_file_location("tiny_ts_attn", CONFIG)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    cd = mod.get_config()
    cd.model.arch.vocab_size = 512
    cd.data.max_prompt_len, cd.rollout.max_response_len = P_LEN, R_LEN
    cd.mesh.data, cd.mesh.fsdp, cd.mesh.tensor = 2, 2, 1
    cd.optim.micro_batch_size = 8
    cd.hardware.sampler_placement = "sharded"
    t = compile_run.make_target(cd, topology="v5p:2x2x1")
    progs = compile_run.programs_for(t, ("learner", "stats", "sampler"), prefill_buckets="max")
    return t, [p for p in progs if p.name.startswith(CHECKED)]


def _score_buffers(prog, family) -> set[str]:
    from tseeds_jax.scale import compile_programs as cp

    lowered, _ = cp.lower(prog, family)
    hlo = lowered.compile().as_text()
    t = int(prog.name.rsplit("_", 1)[1]) if prog.name.startswith("sampler_prefill_") else T
    return set(re.findall(rf"(?:f32|bf16)\[[0-9,]*\b{t},{t}\]", hlo))


@pytest.mark.slow  # three TPU compiles (~1 min on 2 busy cores)
def test_no_square_score_buffer_in_update_stats_or_prefill():
    t, progs = _programs()
    names = sorted(p.name for p in progs)
    assert len(names) == 3 and names[0].startswith("learner_update"), names
    found = {p.name: _score_buffers(p, t.family) for p in progs}
    assert found == {name: set() for name in found}, found


@pytest.mark.slow
def test_the_check_finds_the_reference_attentions_scores(monkeypatch):
    from tseeds_jax.rl.learn import learner

    monkeypatch.setattr(attention, "resolve_impl", lambda impl, t, *arrays: "xla")
    monkeypatch.setattr(learner, "_JITTED", {})  # no jitted function traced with splash reused
    t, progs = _programs()
    stats = [p for p in progs if p.name.startswith("stats_forward")]
    assert stats and _score_buffers(stats[0], t.family)
