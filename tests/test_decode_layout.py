"""The sampler's decode layout (sampling/layout.py) and vocabulary-parallel sampling
(sampling/vocab_parallel.py) on the 8 emulated CPU devices of conftest.py: the same tokens as
the learner-layout sampler, no [slots, vocab] gather, the layout choice's arithmetic.
"""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from tseeds_jax import decode_layout as dl
from tseeds_jax.model import ModelConfig, init_model
from tseeds_jax.model import sharding as sh
from tseeds_jax.sampling import core, generate, layout, placement, strategies, vocab_parallel

ATOL = 1e-5  # float32 log-probs (natural log, |values| < ~20)

CFG = ModelConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=128)


@pytest.fixture(scope="module")
def split():
    graphdef, params = nnx.split(init_model(CFG, seed=0))
    # Larger weights than the default init so that distributions are far from uniform.
    return graphdef, jax.tree.map(lambda x: x * 8.0 if x.ndim > 1 else x, params)


@pytest.fixture(scope="module")
def learner(split):
    """The learner's layout: every weight split along embed over fsdp (8 devices)."""
    params = split[1]
    return split[0], jax.device_put(params, sh.param_shardings(params, sh.make_mesh({"fsdp": 8})))


def _prompts(n, seed, lo=1, hi=30):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, CFG.vocab_size, size=int(rng.integers(lo, hi))).tolist()
            for _ in range(n)]


def _assert_same(ref, got):
    for i, (a, b) in enumerate(zip(ref, got, strict=True)):
        assert b.tokens == a.tokens, f"request {i}"
        assert b.finish_reason == a.finish_reason, f"request {i}"
        np.testing.assert_allclose(b.logprobs, a.logprobs, rtol=0, atol=ATOL, err_msg=f"req {i}")


def test_decode_mesh_groups_devices_and_reshards_by_the_rules(learner):
    mesh = layout.decode_mesh(jax.devices(), 4)
    assert dict(mesh.shape) == {"data": 2, "fsdp": 1, "tensor": 4}
    params = layout.reshard(learner[1], mesh)
    for path, x in jax.tree_util.tree_leaves_with_path(params):
        spec = x.sharding.spec
        assert "fsdp" not in jax.tree.leaves(tuple(spec)), (path, spec)  # embed stays whole
    # A query projection [D, H, E]: heads over tensor, nothing else split.
    qs = [x for p, x in jax.tree_util.tree_leaves_with_path(params)
          if x.ndim == 3 and x.shape[1] == CFG.num_attention_heads and x.shape[0] == CFG.hidden_size]
    assert qs and all(tuple(x.sharding.spec)[:2] == (None, "tensor") for x in qs)
    with pytest.raises(ValueError, match="tensor=3"):
        layout.decode_mesh(jax.devices(), 3)


PROMPTS = _prompts(10, seed=0)
BUDGETS = [12, 3, 9, 12, 1, 7, 12, 5, 12, 10]


@pytest.fixture(scope="module")
def greedy_ref(learner):
    return generate(learner, PROMPTS, max_new_tokens=BUDGETS, temperature=0, num_slots=8)


@pytest.mark.parametrize("tensor", [1, 4])
def test_greedy_tokens_equal_learner_layout(learner, greedy_ref, tensor):
    mesh = layout.decode_mesh(jax.devices(), tensor)
    dec = layout.reshard(learner[1], mesh)
    got = generate((learner[0], dec), PROMPTS, max_new_tokens=BUDGETS, temperature=0,
                   num_slots=8)
    _assert_same(greedy_ref, got)
    # The decode state really lives on the decode mesh: slots over the replicas.
    st, _, _ = placement.SamplerShardings(mesh).init_buffers(CFG, 8, 64, 16)
    assert st.cache.k[0].sharding.spec[0] in ("data", ("data",))


def test_topk_sampling_matches_learner_layout(learner):
    # (greedy, temperature and top-k draws on split logits: test_vocab_parallel_* below)
    prompts = _prompts(6, seed=1, hi=16)
    dec = layout.reshard(learner[1], layout.decode_mesh(jax.devices(), 4))
    knobs = dict(temperature=0.8, top_k=20, max_new_tokens=10, seed=[5, 6, 7, 8, 9, 10])
    _assert_same(generate(learner, prompts, **knobs), generate((learner[0], dec), prompts, **knobs))


def _vp(strategy, logits, keys, tensor):
    mesh = jax.make_mesh((8 // tensor, 1, tensor), ("data", "fsdp", "tensor"),
                         axis_types=(jax.sharding.AxisType.Auto,) * 3)
    x = jax.device_put(logits, jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(
        "data", "tensor")))
    return jax.jit(lambda a, k: vocab_parallel.sample(strategy, a, k, mesh))(x, keys)


@pytest.mark.parametrize("strategy", [strategies.Greedy(), strategies.Temperature(0.7),
                                      strategies.TopK(5, 1.3)])
def test_vocab_parallel_draws_equal_the_strategy(strategy):
    rng = np.random.default_rng(0)
    b, v = 64, 256
    logits = rng.normal(0, 3, (b, v)).astype(np.float32)
    logits[0, 7] = logits[0, 200] = 50.0  # a tie across shards: the first index wins
    logits[1, :] = -1e30
    logits[1, 130] = 0.0  # all mass on one entry of a later shard
    keys = np.asarray(jax.vmap(jax.random.PRNGKey)(jnp.arange(b)))
    want = np.asarray(strategy.sample(jnp.asarray(logits), keys))
    # float64 reference of the log-prob the sampler reports: the strategy's tempered
    # full-vocabulary distribution (temperature 1 for Greedy; sampling/strategies.py)
    x = logits.astype(np.float64) / getattr(strategy, "temperature", 1.0)
    lse = x.max(-1) + np.log(np.exp(x - x.max(-1, keepdims=True)).sum(-1))
    for tensor in (2, 4, 8):
        tok, lp = _vp(strategy, logits, keys, tensor)
        np.testing.assert_array_equal(np.asarray(tok), want, err_msg=f"tensor {tensor}")
        np.testing.assert_allclose(np.asarray(lp), x[np.arange(b), want] - lse, rtol=0,
                                   atol=1e-4)
    if isinstance(strategy, strategies.Greedy):
        assert want[0] == 7


def test_decode_step_gathers_no_logits(learner):
    """The compiled decode step on the tensor-parallel layout moves no [slots, vocab] array."""
    dec = layout.reshard(learner[1], layout.decode_mesh(jax.devices(), 4))
    mesh = placement.params_mesh(dec)
    place = placement.SamplerShardings(mesh)
    state, _, _ = place.init_buffers(CFG, 8, 64, 16)
    graphdef = core.ModelDef(learner[0])
    hlo = core.step.lower(graphdef, strategies.Temperature(1.0), (0,), dec,
                          state).compile().as_text()
    v = CFG.vocab_size
    for line in hlo.splitlines():
        if re.search(r"= \S+ (all-gather|all-reduce|all-to-all)\(", line):
            shape = line.split("=", 1)[1]
            assert not re.search(rf"\[\d+,{v}\]", shape), line.strip()[:200]


def test_choose_by_roofline_and_memory():
    m = dl.DecodeModel(weight_bytes=15_000_000_000, kv_bytes_per_token=57_344, hidden=3584,
                           layers=28, kv_heads=4, heads=28)
    assert dl.tensor_candidates(m, 32, 4) == [1, 2, 4]
    c = dl.choose_tensor(m, devices=32, per_host=4, requests=1792, free_bytes=90e9, cache_len=4096,
                      hbm_bw=2.7e12, ici_bw=1.2e12)
    # Hand count for tensor 4: 8 replicas of 224 slots; per device per step the weights / 4 and
    # 224 x 4096 x 57,344 / 4 bytes of cache, two all-reduces of [224, 3584] bf16 per layer.
    hbm = (15e9 + 224 * 4096 * 57344) / 4 / 2.7e12
    ici = 2 * 28 * 2 * 224 * 3584 * 2 * 0.75 / 1.2e12
    assert c.layout == dl.DecodeLayout(4, 8) and c.slots == 224
    assert c.tokens_per_s_per_device == pytest.approx(56 / (hbm + ici), rel=1e-9)
    # Memory bounds the slots: 12 GB free leaves (0.85 x 12e9 - 15e9/4) / (4096 x 57344 / 4).
    small = dl.choose_tensor(m, devices=32, per_host=4, requests=1792, free_bytes=12e9,
                          cache_len=4096, hbm_bw=2.7e12, ici_bw=1.2e12, tensor=4)
    fit = int((0.85 * 12e9 - 15e9 / 4) // (4096 * 57344 / 4))
    assert small.fit == fit == 109
    # 224 requests per replica in the fewest waves of at most 109, spread evenly: 3 x 75.
    assert small.slots == 75
    assert [dl.balanced_slots(n, 83) for n in (83, 84, 112, 166, 167)] == [83, 42, 56, 83, 56]
    with pytest.raises(ValueError, match="no tensor width"):
        dl.choose_tensor(m, devices=32, per_host=4, requests=64, free_bytes=1e9, cache_len=4096)


def test_weight_sync_reshards_once_per_params_and_sizes_slots(learner):
    sync = layout.WeightSync(CFG, sampler_dtype="float32", requests=24, cache_len=64, tensor=2)
    a = sync(learner[1])
    assert sync(learner[1]) is a and sync.count == 1
    assert dict(placement.params_mesh(a).shape) == {"data": 4, "fsdp": 1, "tensor": 2}
    assert sync.slots(24) == 24 and sync.slots(5) == 8  # whole slots per replica
    assert sync.take_seconds() > 0 and sync.take_seconds() == 0


def test_weight_sync_keeps_single_device_params_on_their_device(split):
    # A one-device learner (CPU runs): the decode layout is that device, tensor 1 (no chip table).
    sync = layout.WeightSync(CFG, sampler_dtype="float32", requests=4, cache_len=64)
    out = sync(split[1])
    assert sync.mesh.size == 1 and sync.choice.layout == dl.DecodeLayout(1, 1)
    assert {d for x in jax.tree.leaves(out) for d in x.devices()} == {jax.devices()[0]}
    assert sync.slots(4) == 4


def test_weight_sync_refuses_a_layout_other_than_the_compiled_one(learner, tmp_path):
    """`tseeds train --compiled DIR`: the manifest's decode layout is read back, and the first
    weight sync refuses to decode on another one (here 4 replicas x tensor 2 on 8 devices)."""
    import json

    manifest = tmp_path / "manifest.json"
    compiled = {"tensor": 2, "replicas": 4, "slots_per_replica": 6, "fit_slots_per_replica": 9}
    manifest.write_text(json.dumps({"programs": {}, "decode_layout": compiled}))
    path, recorded = dl.read_recorded(str(tmp_path))
    assert path == str(manifest) and recorded == compiled
    ok = layout.WeightSync(CFG, sampler_dtype="float32", requests=24, cache_len=64, tensor=2)
    ok.expect_compiled(recorded, path)
    ok(learner[1])  # 24 requests over 4 replicas: 6 slots each, as compiled
    other = layout.WeightSync(CFG, sampler_dtype="float32", requests=24, cache_len=64, tensor=4)
    other.expect_compiled(recorded, path)
    with pytest.raises(ValueError, match=r"tensor 4 x 2 replicas.*compiled for tensor 2 x 4"):
        other(learner[1])
    (tmp_path / "bad").mkdir()
    with pytest.raises(ValueError, match="no manifest"):
        dl.read_recorded(str(tmp_path / "bad"))
