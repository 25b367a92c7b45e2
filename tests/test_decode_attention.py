"""The decode step's attention over the KV cache (`model.decode_attention`): the XLA reference and
the ragged Pallas kernel (interpret mode on CPU) against a float64 numpy reference written from
the formula, the kernel's block clamp, its shard_map under an 8-device mesh, greedy generation
with each implementation, and a compile-only TPU check of the sampler's decode step.

Tolerances: float32 1e-5 (relative and absolute; outputs are O(1) averages of N(0, 1) values);
bfloat16 1e-2 absolute and relative: the reference takes the same bf16-rounded inputs, so what
remains is bf16 rounding of the probabilities (2^-9 relative each, averaged over positions) and
of the output (2^-9), well inside 1e-2.
"""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
from tseeds_jax.kernels.target import compile_target

from tseeds_jax.model import ModelConfig, init_model
from tseeds_jax.model import decode_attention as DA
from tseeds_jax.model.config import DECODE_ATTENTION_IMPLS, ConfigError

K, G, E = 2, 3, 32
TOL = {jnp.float32: dict(rtol=1e-5, atol=1e-5), jnp.bfloat16: dict(rtol=1e-2, atol=1e-2)}


def _inputs(lengths, s, dtype, seed=0):
    rng = np.random.default_rng(seed)
    b = len(lengths)
    cast = lambda x: jnp.asarray(x, dtype)
    q = cast(rng.normal(size=(b, K, G, E)))
    k = cast(rng.normal(size=(b, K, E, s)))
    v = cast(rng.normal(size=(b, K, s, E)))
    return q, k, v, jnp.asarray(lengths, jnp.int32)


def _reference(q, k, v, lengths):
    """float64: softmax(q . k_s / sqrt(E)) over s < length, times v_s; zeros for length 0."""
    f64 = lambda x: np.asarray(x.astype(jnp.float32), np.float64)
    q, k, v = f64(q), f64(k), f64(v)
    out = np.zeros(q.shape)
    for b, n in enumerate(np.asarray(lengths)):
        n = min(int(n), k.shape[-1])
        if n == 0:
            continue
        scores = np.einsum("kge,kes->kgs", q[b], k[b, :, :, :n]) / np.sqrt(E)
        w = np.exp(scores - scores.max(-1, keepdims=True))
        w /= w.sum(-1, keepdims=True)
        out[b] = np.einsum("kgs,kse->kge", w, v[b, :, :n])
    return out


# lengths: 1, S, 0 (an empty slot), on and off the 128-position block boundary
LENGTHS = [1, 256, 0, 130, 128, 57]


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("impl,blocks", [("xla", {}), ("ragged", {}),
                                          ("ragged", dict(block_b=2, block_s=128))],
                         ids=["xla", "ragged-one-block", "ragged-2x128"])
def test_matches_float64_reference(impl, blocks, dtype):
    q, k, v, n = _inputs(LENGTHS, 256, dtype)
    out = DA.decode_attention(q, k, v, n, impl=impl, **blocks)
    assert out.dtype == dtype and out.shape == q.shape
    got = np.asarray(out.astype(jnp.float32))
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, _reference(q, k, v, n), **TOL[dtype])
    assert not got[2].any()  # the empty slot: zeros


def test_block_sizes():
    """Sb: the largest multiple of 128 dividing S, <= 512 (all of S off the lane width); Bb: the
    largest divisor of B, <= B / 2, whose key block [Bb, K, E, Sb] fits 2 MiB."""
    assert DA.block_sizes(56, 1, 128, 6144, 2) == (14, 512)  # 16 slots of 128 KiB fit; 14 | 56
    assert DA.block_sizes(8, 1, 128, 1536, 2) == (4, 512)  # two slot blocks at least
    assert DA.block_sizes(1, 4, 128, 768, 4) == (1, 384)
    assert DA.block_sizes(6, 2, 64, 640, 2) == (3, 128)
    assert DA.block_sizes(4, 8, 128, 4096, 4) == (1, 512)  # one slot is 2 MiB already


def test_cache_length_off_the_lane_width():
    """S = 96 (a sampler bucket): one whole-S block."""
    assert DA.block_sizes(4, K, E, 96, 4)[1] == 96
    q, k, v, n = _inputs([96, 5, 40, 200], 96, jnp.float32, seed=1)  # 200 > S: all of S
    out = DA.decode_attention(q, k, v, n, impl="ragged")
    np.testing.assert_allclose(np.asarray(out), _reference(q, k, v, n), **TOL[jnp.float32])


def test_blocks_past_the_live_length_are_never_read():
    """NaN in every cache block past a slot block's last live block: the ragged kernel never
    fetches them (its output matches the reference on the live part); the XLA path reads them
    (0 x NaN in the value product)."""
    s, bb, bs = 512, 2, 128
    lengths = [1, 130, 0, 0, 300, 512]  # live blocks per slot block: 2, 0, 4
    q, k, v, n = _inputs(lengths, s, jnp.float32, seed=2)
    live = [2, 0, 4]
    k_np, v_np = np.array(k), np.array(v)
    for i, nb in enumerate(live):
        rows = slice(i * bb, (i + 1) * bb)
        k_np[rows, :, :, max(nb, 1) * bs:] = np.nan
        v_np[rows, :, max(nb, 1) * bs:] = np.nan
    k_nan, v_nan = jnp.asarray(k_np), jnp.asarray(v_np)
    out = DA.decode_attention(q, k_nan, v_nan, n, impl="ragged", block_b=bb, block_s=bs)
    np.testing.assert_allclose(np.asarray(out), _reference(q, k, v, n), **TOL[jnp.float32])
    assert np.isnan(np.asarray(DA.decode_attention(q, k_nan, v_nan, n, impl="xla"))).any()


def test_kv_index_map_clamps_to_the_last_live_block():
    """The (slot block, cache block) sequence the K/V index_map visits: 0, 1, .., last live
    block, then that block repeated (no new DMA), block 0 for a slot block with no live slot."""
    s, bb, bs = 1024, 2, 128  # 8 cache blocks
    lengths = [1, 0, 129, 256, 0, 0, 1024, 3, 1000, 897]
    got = DA.kv_block_indices(lengths, bb, bs, s)
    want = []
    for i in range(len(lengths) // bb):
        longest = max(lengths[i * bb:(i + 1) * bb])
        last = max(-(-longest // bs) - 1, 0)  # index of the block holding position longest - 1
        want += [(i, min(j, last)) for j in range(s // bs)]
    assert got == want
    # written out for two slot blocks: lengths (1, 0) -> only block 0; (129, 256) -> 0, 1
    assert got[:16] == [(0, 0)] * 8 + [(1, 0), (1, 1)] + [(1, 1)] * 6
    fetched = [got[0]] + [b for a, b in zip(got, got[1:]) if a != b]  # index changes = DMAs
    assert len(fetched) == 1 + 2 + 1 + 8 + 8


def test_sharded_kernel_matches_unsharded_on_a_mesh():
    """Under a (data 2, fsdp 2, tensor 2) mesh: slots over data x fsdp, kv heads over tensor."""
    mesh = jax.make_mesh((2, 2, 2), ("data", "fsdp", "tensor"))
    lengths = [1, 256, 0, 130, 128, 57, 200, 3]
    q, k, v, n = _inputs(lengths, 256, jnp.float32, seed=3)
    spec = P(("data", "fsdp"), "tensor")
    put = lambda x, sp: jax.device_put(x, NamedSharding(mesh, sp))
    args = (put(q, spec), put(k, spec), put(v, spec), put(n, P(("data", "fsdp"))))
    fn = jax.jit(lambda *a: DA.decode_attention(*a, impl="ragged", block_s=128))
    with jax.sharding.use_abstract_mesh(jax.typeof(args[0]).sharding.mesh):
        out = fn(*args)
        hlo = fn.lower(*args).as_text()
    assert "shard_map" in hlo or "sdy.manual_computation" in hlo
    alone = DA.decode_attention(q, k, v, n, impl="ragged", block_s=128)
    np.testing.assert_allclose(np.asarray(out), np.asarray(alone), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(np.asarray(out), _reference(q, k, v, n), **TOL[jnp.float32])


@pytest.mark.slow  # two generate runs, the kernel in interpret mode inside the decode loop (~12 s)
def test_greedy_generation_equal_with_either_implementation():
    from tseeds_jax.sampling import generate

    cfg = ModelConfig(vocab_size=64, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
    prompts = [[1, 2, 3], [4, 5, 6, 7, 8, 9, 10], [11], [12, 13, 14, 15, 16]]
    out = {}
    for impl in ("xla", "ragged"):
        model = init_model(cfg.replace(decode_attention_impl=impl), seed=4)
        res = generate(model, prompts, max_new_tokens=8, temperature=0, num_slots=4)
        out[impl] = [list(r.tokens) for r in res]
    assert all(len(t) == 8 for t in out["xla"])
    assert out["ragged"] == out["xla"]


def test_auto_follows_the_target_and_bad_input_names_the_field():
    assert DECODE_ATTENTION_IMPLS == DA.IMPLS
    x = jnp.zeros((1, K, G, E))
    with compile_target("tpu", "v5p"):
        assert DA.resolve_impl("auto", x) == "ragged"
    with compile_target("gpu"):
        assert DA.resolve_impl("auto", x) == "xla"
    with compile_target("cpu"):
        assert DA.resolve_impl("auto", x) == "xla"
    with pytest.raises(ConfigError, match=r"decode_attention_impl='paged'"):
        ModelConfig(decode_attention_impl="paged")
    q, k, v, n = _inputs([3, 4], 128, jnp.float32)
    with pytest.raises(ValueError, match="decode_attention_impl.*'paged'"):
        DA.decode_attention(q, k, v, n, impl="paged")
    with pytest.raises(ValueError, match=r"length_B shape \(3,\)"):
        DA.decode_attention(q, k, v, jnp.ones(3, jnp.int32))
    with pytest.raises(TypeError, match="length_B must be integer"):
        DA.decode_attention(q, k, v, jnp.ones(2))
    with pytest.raises(ValueError, match="do not match"):
        DA.decode_attention(q, jnp.swapaxes(k, 2, 3), v, n)
    with pytest.raises(ValueError, match="block_s=96"):
        DA.decode_attention(q, k, v, n, impl="ragged", block_s=96)


@pytest.mark.parametrize("source", ["random", "hf", "orbax"])
def test_config_field_reaches_the_model_and_the_planner(source, tmp_path):
    """`config.model.decode_attention_impl` reaches the trainer's model whatever the weights'
    source, and `TrainModelConfig.model_config` (what `tseeds compile` builds); a bad value is an
    error naming the field."""
    from tseeds_jax.hf import hf_to_orbax
    from tseeds_jax.hf.testing import write_random_hf_folder
    from tseeds_jax.rl.config import TrainConfig, default_config
    from tseeds_jax.rl.setup import build_model

    arch = dict(model_type="qwen2", vocab_size=64, hidden_size=16, intermediate_size=32,
                num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1)
    init = "random"
    if source != "random":
        write_random_hf_folder(ModelConfig(**arch), tmp_path / "hf", seed=0)
        init = f"hf:{tmp_path / 'hf'}"
    if source == "orbax":
        hf_to_orbax(tmp_path / "hf", tmp_path / "ckpt")
        init = f"orbax:{tmp_path / 'ckpt'}"
    cd = default_config()
    assert cd.model.decode_attention_impl == "auto"
    cd.model.init = init
    cd.model.arch.update(arch)
    cd.model.decode_attention_impl = "ragged"
    assert build_model(TrainConfig.from_config(cd), vocab_size=64).cfg.decode_attention_impl \
        == "ragged"
    assert TrainConfig.from_config(cd).model.model_config().decode_attention_impl == "ragged"
    cd.model.decode_attention_impl = "paged"
    with pytest.raises(ConfigError, match="decode_attention_impl='paged'"):
        build_model(TrainConfig.from_config(cd), vocab_size=64)


# ---------------------------------------------------------------- compile-only TPU

S_TPU = 768  # no other array of the program ends in 768 (vocab 512, MLP 512, head dim 128)


def _tpu_decode_step(impl: str, kv_cache_dtype: str = "auto"):
    """A 2-layer sampler decode step compiled for v5p:2x2x1 (data 2 x tensor 2), its state laid
    out by the sampler's own `SamplerShardings`: (optimized HLO text, the state's shardings)."""
    from flax import nnx

    from tseeds_jax.model import sharding as shd
    from tseeds_jax.sampling import core
    from tseeds_jax.sampling.placement import SamplerShardings
    from tseeds_jax.sampling.strategies import make_strategy
    from tseeds_jax.scale import topology

    cfg = ModelConfig(vocab_size=512, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=128,
                      param_dtype="bfloat16", dtype="bfloat16", decode_attention_impl=impl,
                      kv_cache_dtype=kv_cache_dtype)
    mesh = shd.make_mesh({"data": 2, "fsdp": 1, "tensor": 2},
                         devices=topology.devices_for("v5p:2x2x1"))
    graphdef, abstract = nnx.split(shd.abstract_model(cfg))
    shardings = shd.pure_shardings(abstract, mesh)
    params = jax.tree.map(lambda x, sh: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sh),
                          nnx.to_pure_dict(abstract), shardings)
    st = jax.eval_shape(lambda: core.DecodeState.init(cfg, 16, S_TPU))
    st_sh = SamplerShardings(mesh).state_shardings(st)
    st = jax.tree.map(lambda x, sh: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sh), st, st_sh)
    lowered = core.step.lower(core.ModelDef(graphdef), make_strategy(0.0, 0, 1.0), (0,), params,
                              st)
    return lowered.compile().as_text(), st_sh


def _tpu_decode_step_hlo(impl: str) -> str:
    return _tpu_decode_step(impl)[0]


@pytest.mark.slow  # two TPU compiles of a 2-layer decode step (~5 s)
def test_tpu_decode_step_runs_the_kernel_and_holds_no_whole_cache_scores():
    from tseeds_jax.scale import topology

    reason = topology.libtpu_available()
    assert reason is None, f"libtpu unavailable: {reason}"  # a pinned test package: never skip
    scores = rf"f32\[[0-9,]*\b{S_TPU}\]"
    hlo = _tpu_decode_step_hlo("auto")
    assert len(re.findall(r"custom-call\([^\n]*tpu_custom_call", hlo)) >= 2  # one per layer
    assert DA.KERNEL_NAME in hlo
    assert not re.findall(scores, hlo)
    # hlo_cost finds the kernel's cache operands: per device 8 of 16 slots (data 2), 1 of 2 kv
    # heads (tensor 2), keys and values of S x E bf16, in each of the 2 layers
    from tseeds_jax.scale.hlo_cost import hlo_cost

    assert hlo_cost(hlo).decode_cache_bytes == 2 * 2 * (8 * 1 * S_TPU * 128 * 2)
    # the check bites: the XLA reference holds float32 [.., S] scores
    assert re.findall(scores, _tpu_decode_step_hlo("xla"))
