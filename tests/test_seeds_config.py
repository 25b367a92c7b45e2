"""Truncation rules, the seed cache, and config validation (fails before any work)."""

import numpy as np
import pytest

from tests.trainer_utils import tiny_cd
from tseeds_jax.rl.config import ConfigValueError, TrainConfig
from tseeds_jax.seeds import EntropyTruncation, RatioTruncation, SeedBatch, SeedCache, truncation


@pytest.mark.parametrize("length,ratio,want", [(10, 0.5, 5), (9, 0.5, 5), (7, 0.3, 2), (2, 0.9, 1),
                                               (1, 0.5, 0), (0, 0.5, 0), (20, 0.0, 0),
                                               (4, 0.99, 3)])
def test_ratio_truncation_rounds_half_up_and_never_keeps_the_last_token(length, ratio, want):
    assert RatioTruncation(ratio).seed_length(length) == want


def test_entropy_truncation_picks_uniformly_among_the_top_k_positions():
    ent = np.array([0.1, 2.0, 0.3, 1.5, 0.2, 3.0, 0.0, 1.0])
    rule = EntropyTruncation(k=3)
    rng = np.random.default_rng(0)
    picks = [rule.seed_length(len(ent), ent, rng) for _ in range(3000)]
    assert set(picks) == {5, 1, 3}  # the three highest entropies; the cut is before that token
    counts = np.bincount(picks, minlength=8)[[1, 3, 5]]
    assert np.all(np.abs(counts / 3000 - 1 / 3) < 0.04)  # > 4 standard errors away otherwise
    assert rule.seed_length(1, ent[:1], rng) == 0


def test_entropy_truncation_only_looks_inside_the_response():
    ent = np.array([0.0, 0.1, 0.2, 9.0, 9.0])  # positions 3-4 are padding beyond |o| = 3
    rng = np.random.default_rng(1)
    assert {EntropyTruncation(k=1).seed_length(3, ent, rng) for _ in range(50)} == {2}


def test_registry_rejects_unknown_and_duplicate_names():
    with pytest.raises(ValueError, match="unknown truncation rule 'middle'"):
        truncation.get("middle")
    with pytest.raises(ValueError, match="already registered"):
        truncation.register("ratio", lambda **_: RatioTruncation(0.5))
    with pytest.raises(ValueError, match="ratio"):
        RatioTruncation(1.0)


def test_seed_cache_round_trips_through_its_checkpoint_form():
    cache = SeedCache(cycle_start=8)
    for step, lens in ((9, [0, 3, 1]), (10, [2, 2, 5])):
        toks = [list(range(7, 7 + n)) for n in lens]
        cache.batches[step] = SeedBatch(
            prompt_ids=[[1, 2], [3]], references=[{"a": 1}, "x"], seed_tokens=toks,
            seed_logp=[np.linspace(-1, 0, n).astype(np.float32) for n in lens],
            behavior_lengths=np.array([4, 6, 9], np.int32))
    back = SeedCache.from_state(cache.to_pytree(12), cache.to_json())
    assert back.cycle_start == 8 and sorted(back.batches) == [9, 10]
    for s in (9, 10):
        a, b = cache.batches[s], back.batches[s]
        assert a.seed_tokens == b.seed_tokens and a.prompt_ids == b.prompt_ids
        assert a.references == b.references
        for x, y in zip(a.seed_logp, b.seed_logp):
            np.testing.assert_array_equal(x, y)
        np.testing.assert_array_equal(a.behavior_lengths, b.behavior_lengths)
    empty = SeedCache.from_state(SeedCache().to_pytree(12), {})
    assert empty.batches == {}


@pytest.mark.parametrize("field,value,match", [
    ("seeds.ratio", 1.0, r"config.seeds.ratio=1.0"),
    ("seeds.ratio", -0.1, r"config.seeds.ratio=-0.1"),
    ("seeds.refresh_interval", 0, r"config.seeds.refresh_interval=0"),
    ("seeds.top_k", 0, r"config.seeds.top_k=0"),
    ("seeds.truncation", "middle", r"config.seeds.truncation='middle'"),
    ("seeds.variant", "action", r"config.seeds.variant='action'"),
    ("loss.name", "ppo2", r"config.loss.name='ppo2'"),
    ("loss.agg_mode", "mean", r"config.loss.agg_mode='mean'"),
    ("optim.mini_batches", 3, r"config.optim.mini_batches=3"),
    ("optim.micro_batch_size", 3, r"config.optim.micro_batch_size=3"),
    ("rollout.temperature", 0.0, r"config.rollout.temperature=0.0"),
])
def test_invalid_config_values_name_the_field(tmp_path, field, value, match):
    with pytest.raises(ConfigValueError, match=match):
        TrainConfig.from_config(tiny_cd(tmp_path, **{field: value}))


def test_batch_not_divisible_by_the_mesh_fails_before_any_work(tmp_path):
    from tseeds_jax.rl.setup import make_trainer

    cfg = TrainConfig.from_config(tiny_cd(tmp_path / "run", **{
        "mesh.data": 1, "mesh.fsdp": 8, "rollout.batch_prompts": 1, "rollout.group_size": 6}))
    with pytest.raises(ConfigValueError, match=r"group_size=6 = 6 sequences is not divisible"):
        make_trainer(cfg, checkpoints=False)
    assert not (tmp_path / "run").exists()  # no tokenizer trained, nothing written
