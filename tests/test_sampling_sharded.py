"""The offline driver with parameters sharded over a multi-device mesh: same tokens and log-probs
as the unsharded model, and the decode state really split by the rules table.

Runs on the 8 emulated CPU devices of conftest.py.
"""

import logging

import jax
import numpy as np
import pytest
from flax import nnx

from tseeds_jax.model import KVCache, ModelConfig, init_model
from tseeds_jax.model import sharding as sh
from tseeds_jax.sampling import core, generate, placement

ATOL = 1e-5  # float32 log-probs (natural log, |values| < ~20)

CFG = ModelConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)


@pytest.fixture(scope="module")
def split():
    graphdef, params = nnx.split(init_model(CFG, seed=0))
    # Larger weights than the default init so that distributions are far from uniform.
    return graphdef, jax.tree.map(lambda x: x * 8.0 if x.ndim > 1 else x, params)


def _on_mesh(params, spec):
    return jax.device_put(params, sh.param_shardings(params, sh.make_mesh(spec)))


@pytest.fixture(scope="module")
def sharded(split):
    return split[0], _on_mesh(split[1], {"data": 2, "fsdp": 2, "tensor": 2})


def _prompts(n, seed, lo=1, hi=40):
    # Lengths 1..39: prefill buckets 16, 32 and 64 in one call.
    rng = np.random.default_rng(seed)
    return [rng.integers(0, CFG.vocab_size, size=int(rng.integers(lo, hi))).tolist()
            for _ in range(n)]


def _assert_same(ref, got):
    for i, (a, b) in enumerate(zip(ref, got, strict=True)):
        assert b.tokens == a.tokens, f"request {i}"
        assert b.finish_reason == a.finish_reason, f"request {i}"
        np.testing.assert_allclose(b.logprobs, a.logprobs, rtol=0, atol=ATOL, err_msg=f"req {i}")


def test_params_mesh_only_for_split_params(split, sharded):
    _, params = split
    assert placement.params_mesh(params) is None  # default device
    replicated = jax.device_put(params, jax.sharding.NamedSharding(
        sh.make_mesh({"data": 8, "fsdp": 1}), jax.sharding.PartitionSpec()))
    assert placement.params_mesh(replicated) is None  # runs exactly as unsharded
    assert dict(placement.params_mesh(sharded[1]).shape) == {"data": 2, "fsdp": 2, "tensor": 2}


def test_greedy_with_stops_and_continuous_batching_matches_unsharded(split, sharded):
    # 11 requests of mixed lengths and budgets through 3 slots (rounded up to 4 = data x fsdp):
    # slots are refilled while requests wait.
    prompts = _prompts(11, seed=0)
    budgets = [12, 3, 9, 12, 1, 7, 12, 5, 12, 10, 2]
    free = generate(split, prompts, max_new_tokens=budgets, temperature=0, num_slots=3)
    stop = free[0].tokens[4]
    ref = generate(split, prompts, max_new_tokens=budgets, temperature=0, num_slots=3,
                   stop_tokens=[stop])
    assert {r.finish_reason for r in ref} == {"stop", "length"}
    got = generate(sharded, prompts, max_new_tokens=budgets, temperature=0, num_slots=3,
                   stop_tokens=[stop])
    _assert_same(ref, got)


def test_temperature_sampling_with_fixed_seeds_is_identical(split, sharded):
    prompts = _prompts(6, seed=1, hi=16)  # one prefill bucket: fewer compilations
    knobs = dict(temperature=0.8, top_k=20, max_new_tokens=10, seed=[5, 6, 7, 8, 9, 10],
                 num_slots=4)
    ref = generate(split, prompts, **knobs)
    got = generate(sharded, prompts, **knobs)
    _assert_same(ref, got)
    assert len({tuple(r.tokens) for r in got}) > 1


def test_decode_state_is_split_by_the_rules(sharded, monkeypatch):
    seen = []
    real = core.run_chunk

    def spy(graphdef, strategy, stops, params, state, *rest):
        seen.append(state)
        return real(graphdef, strategy, stops, params, state, *rest)

    monkeypatch.setattr(core, "run_chunk", spy)
    # 9 requests through 8 slots: the state of the second decode call comes out of run_chunk
    # and insert, so the layout must survive the jitted core, not only the driver's placement.
    generate(sharded, _prompts(9, seed=2, hi=16), max_new_tokens=[4] * 8 + [2], temperature=0,
             num_slots=8)
    assert len(seen) >= 2
    # Slots over data x fsdp (4), kv heads over tensor (2); the other dims whole. The expected
    # shard shape is read off the cache's own logical axes, whatever its layout.
    per_axis = {"cache_batch": 4, "cache_kv_heads": 2}
    for state in seen:
        for arrays, axes in ((state.cache.k, KVCache.k_axes), (state.cache.v, KVCache.v_axes)):
            for x in arrays:
                assert not x.sharding.is_fully_replicated
                want = tuple(n // per_axis.get(a, 1) for n, a in zip(x.shape, axes))
                assert x.sharding.shard_shape(x.shape) == want
        assert state.token_B.shape == (8,)
        assert state.token_B.sharding.shard_shape((8,)) == (2,)


def test_indivisible_dims_are_replicated(split, caplog):
    # tensor=4 does not divide the 2 kv heads: the cache keeps them whole (logged); fsdp=2
    # still splits the 5 -> 6 slots.
    params = _on_mesh(split[1], {"data": 1, "fsdp": 2, "tensor": 4})
    prompts = _prompts(5, seed=3, hi=16)
    ref = generate(split, prompts, max_new_tokens=6, temperature=0, num_slots=5)
    with caplog.at_level(logging.WARNING, logger=sh.__name__):
        got = generate((split[0], params), prompts, max_new_tokens=6, temperature=0, num_slots=5)
    _assert_same(ref, got)
    assert "sampler KV cache" in caplog.text


# ---- the trainer with hardware.sampler_placement = "sharded" ----

TRAINER_METRICS = ("loss", "reward", "grad_norm", "response_length", "seed_length",
                   "entropy/all", "ratio_mean/cont", "ratio_mean/seed")


def test_trainer_sharded_sampler_matches_replica(tmp_path, monkeypatch):
    from tests.trainer_utils import tiny_trainer

    split_cache = []  # per decode call: is the KV cache split over devices?
    real = core.run_chunk

    def spy(graphdef, strategy, stops, params, state, *rest):
        split_cache.append(not state.cache.k[0].sharding.is_fully_replicated)
        return real(graphdef, strategy, stops, params, state, *rest)

    monkeypatch.setattr(core, "run_chunk", spy)

    # A refresh at step 0 (behavior rollouts + the statistics pass) and a seeded step 1; the
    # micro-batch of 2 rows is rounded up to 4 (data x fsdp) in the sharded statistics pass.
    over = {"seeds.refresh_interval": 2, "seeds.ratio": 0.5, "mesh.data": 2, "mesh.fsdp": 2,
            "mesh.tensor": 2, "optim.micro_batch_size": 2}
    runs = {}
    for where in ("replica", "sharded"):
        tr = tiny_trainer(tmp_path / where, **over,
                          **{"hardware.sampler_placement": where})
        assert dict(tr.mesh.shape) == {"data": 2, "fsdp": 2, "tensor": 2}
        split_cache.clear()
        runs[where] = tr.run(steps=2)
        assert set(split_cache) == {where == "sharded"}
    for a, b in zip(runs["replica"], runs["sharded"], strict=True):
        assert b["num_samples"] == a["num_samples"]
        for k in TRAINER_METRICS:
            np.testing.assert_allclose(b[k], a[k], rtol=1e-5, atol=1e-6, err_msg=k)
    assert runs["sharded"][1]["seed_length"] > 0


def test_sampler_placement_is_validated():
    from tests.trainer_utils import tiny_cd
    from tseeds_jax.rl.config import ConfigValueError, TrainConfig
    from tseeds_jax.rl.run import hosts

    with pytest.raises(ConfigValueError, match=r"hardware\.sampler_placement='gathered'"):
        TrainConfig.from_config(tiny_cd("unused", **{"hardware.sampler_placement": "gathered"}))
    two = hosts.Hosts(index=0, count=2)
    # Several processes: the batch axes must give every process whole row blocks.
    hosts.check_sampler_placement("sharded", two)
    hosts.check_sampler_placement("sharded", two, sh.make_mesh({"data": 2, "fsdp": 2, "tensor": 2}))
    with pytest.raises(ConfigValueError, match=r"sampler_placement='sharded'.*2 processes"):
        hosts.check_sampler_placement("sharded", hosts.Hosts(index=0, count=2),
                                      sh.make_mesh({"data": 1, "fsdp": 1, "tensor": 8}))
    hosts.check_sampler_placement("replica", two, sh.make_mesh({"data": 1, "fsdp": 1,
                                                                "tensor": 8}))
