"""JetStream Engine API over the sampler core, and the JetStream import shim."""

import logging
import sys

import jax
import numpy as np
import pytest
from flax import nnx

from tseeds_jax.model import ModelConfig, init_model
from tseeds_jax.sampling import core, generate
from tseeds_jax.sampling import jetstream_compat as compat
from tseeds_jax.sampling.engine import BOS_SENTINEL, TSeedsEngine
from tseeds_jax.sampling.strategies import TopK

CFG = ModelConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)


@pytest.fixture(scope="module")
def model():
    graphdef, params = nnx.split(init_model(CFG, seed=0))
    return nnx.merge(graphdef, jax.tree.map(lambda x: x * 8.0 if x.ndim > 1 else x, params))


def _pad(tokens, length=16, sentinel=True):
    """What JetStream's pad_tokens does to a token request: BOS prepended, right-padded."""
    seq = ([BOS_SENTINEL] if sentinel else []) + list(tokens)
    return np.asarray(seq + [0] * (length - len(seq)), np.int32), len(seq)


def _run_engine(engine, params, prompts, steps):
    """Inserts prompts into slots 1.. and steps; returns per-prompt valid tokens."""
    state = engine.init_decode_state()
    for i, p in enumerate(prompts):
        padded, n = _pad(p)
        prefix = engine.prefill(params=params, padded_tokens=padded, true_length=n)
        state = engine.insert(prefix, state, slot=i + 1)
    out = [[] for _ in prompts]
    for _ in range(steps):
        state, result = engine.generate(params, state)
        result = result.convert_to_numpy()
        for i in range(len(prompts)):
            slot = result.get_result_at_slot(i + 1)
            if slot.valid[0, 0]:
                out[i].append(int(slot.tokens[0, 0]))
                assert slot.lengths[0] == len(out[i])
    return out, state


def test_shim_stubs_only_missing_modules_and_leaves_jax_alone():
    for name in compat.STUBBED:
        assert getattr(sys.modules[name], "__tseeds_stub__", False)
    assert not hasattr(jax, "tree_map")  # the shim patches the orchestrator, not JAX
    assert logging.getLogger().level != logging.DEBUG  # orchestrator's import-time change undone
    tree = {"a": jax.numpy.ones(3), "b": [jax.numpy.zeros(2)]}
    compat.orchestrator.delete_pytree(tree)
    assert tree["a"].is_deleted() and tree["b"][0].is_deleted()
    if "seqio.vocabularies" in compat.STUBBED:
        with pytest.raises(RuntimeError, match="token ids only"):
            sys.modules["seqio.vocabularies"].SentencePieceVocabulary("x")


def test_engine_is_a_jetstream_engine(model):
    engine = TSeedsEngine(model, max_concurrent_decodes=4, max_prefill_length=32,
                          max_new_tokens=16)
    assert isinstance(engine, compat.engine_api.Engine)
    assert engine.max_concurrent_decodes == 4 and engine.max_prefill_length == 32
    assert engine.samples_per_slot == 1 and engine.colocated_cpus is None
    assert engine.mesh.devices.size == 1
    tok = engine.build_tokenizer(engine.get_tokenizer())
    assert tok.bos_id == BOS_SENTINEL
    with pytest.raises(ValueError, match="max_prefill_length"):
        TSeedsEngine(model, max_prefill_length=24)


def test_engine_greedy_equals_offline_driver(model):
    engine = TSeedsEngine(model, max_concurrent_decodes=4, max_prefill_length=32,
                          max_new_tokens=16)
    params = engine.load_params()
    prompts = [[3, 4, 5], [9] * 11, [100, 1]]
    got, state = _run_engine(engine, params, prompts, steps=10)
    ref = generate(model, prompts, max_new_tokens=10, temperature=0, num_slots=4)
    assert got == [r.tokens for r in ref]
    # slot 0 was never filled; the per-slot cap ends the others after max_new_tokens
    for _ in range(8):
        state, result = engine.generate(params, state)
    result = result.convert_to_numpy()
    assert [int(result.get_result_at_slot(s).valid[0, 0]) for s in range(4)] == [0, 0, 0, 0]
    assert np.asarray(state.finish_B)[1:].tolist() == [core.LENGTH] * 3


def test_engine_sampling_uses_request_keys_and_new_params_reuse_compiles(model):
    engine = TSeedsEngine(model, max_concurrent_decodes=4, max_prefill_length=32,
                          max_new_tokens=16, strategy=TopK(5, 0.8), seed=3)
    params = engine.load_params()
    got, _ = _run_engine(engine, params, [[1, 2, 3], [4, 5]], steps=6)
    # requests 0 and 1 use fold_in(PRNGKey(3), i), like the offline driver with seed=3
    ref = generate(model, [[1, 2, 3], [4, 5]], max_new_tokens=6, temperature=0.8, top_k=5,
                   seed=3, num_slots=4)
    assert got == [r.tokens for r in ref]
    before = dict(core.TRACE_COUNTS)
    params2 = jax.tree.map(lambda x: x * 0.5, params)
    _run_engine(engine, params2, [[1, 2, 3]], steps=3)
    assert core.TRACE_COUNTS == before


def test_engine_bad_requests_finish_without_tokens(model):
    engine = TSeedsEngine(model, max_concurrent_decodes=4, max_prefill_length=16,
                          max_new_tokens=8)
    params = engine.load_params()
    state = engine.init_decode_state()
    bad = [_pad([5, CFG.vocab_size + 3]), _pad([], sentinel=True),
           (np.arange(16, dtype=np.int32), 20)]  # truncated by JetStream: true_length > padded
    for slot, (padded, n) in enumerate(bad):
        state = engine.insert(engine.prefill(params=params, padded_tokens=padded, true_length=n),
                              state, slot=slot)
    padded, n = _pad([7, 8])
    state = engine.insert(engine.prefill(params=params, padded_tokens=padded, true_length=n),
                          state, slot=3)
    state, result = engine.generate(params, state)
    result = result.convert_to_numpy()
    assert [int(result.get_result_at_slot(s).valid[0, 0]) for s in range(4)] == [0, 0, 0, 1]
    assert np.asarray(state.finish_B)[:3].tolist() == [core.ERROR] * 3
