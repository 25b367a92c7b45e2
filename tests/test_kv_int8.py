"""The 8-bit KV cache (`ModelConfig.kv_cache_dtype = "int8"`, issue #23).

What is checked, each against an independent reference:
* `decode_attention.quantize` against float64 numpy written from the formula (scale = absmax /
  127 over the head dim, values = round(x / scale)); the per-element error is at most
  absmax / 254 (half a quantization step), up to float32 rounding (a relative 1e-6 slack);
* decode attention over an int8 cache (XLA path and the Pallas ragged kernel in interpret mode,
  small grid, ragged lengths with 0) against float64 numpy attention over the dequantized cache:
  float32 1e-5 (relative and absolute), bfloat16 1e-2 (the same bf16 q; what remains is bf16
  rounding of the scaled probabilities and of the output, 2^-9 relative each);
* a tiny model's greedy decode with an int8 cache: the sampler-vs-learner log-prob gap of every
  generated token is below a bound derived from the quantization error: first order,
  |delta log-prob_t| <= sum over cached keys / values e of |d log-prob_t / d x_e| * absmax_e / 254,
  with the derivative taken through the learner's own forward (float64-free, float32, where the
  keys and values that decode queries read are perturbed), times 2 for second-order terms;
* T > 1 new tokens into a filled int8 cache (`layers._prefill`) equal T single decode steps;
* the config field reaches the model from random / hf / orbax weights and the planner;
* the int8 cache compiles for v5p (compile-only devices) with the ragged kernel, reading int8
  blocks and float32 scale blocks; `hlo_cost.decode_cache_bytes` counts the scale operands, and
  the step's bytes fall by the cache bytes saved against a bfloat16 cache; the XLA path holds
  no dequantized copy of the cache.
"""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from tests.test_decode_attention import S_TPU, _tpu_decode_step
from tseeds_jax.model import KVCache, ModelConfig, init_model, layers
from tseeds_jax.model import decode_attention as DA
from tseeds_jax.model.config import KV_CACHE_DTYPES, ConfigError

K, G, E = 2, 3, 32
TOL = {jnp.float32: dict(rtol=1e-5, atol=1e-5), jnp.bfloat16: dict(rtol=1e-2, atol=1e-2)}
LENGTHS = [1, 256, 0, 130, 128, 57]


def _quantize_ref(x, axis):
    """float64 numpy: (round(x / scale) clipped to +-127, scale = absmax / 127), zeros where
    absmax is 0."""
    x = np.asarray(x, np.float64)
    scale = np.max(np.abs(x), axis=axis, keepdims=True) / 127.0
    q = np.clip(np.round(x / np.where(scale > 0, scale, 1.0)), -127, 127)
    return q, np.squeeze(scale, axis)


def test_quantize_against_float64_and_its_error_bound():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(3, 2, 5, 64)) * np.exp(rng.normal(size=(3, 2, 5, 1)) * 2)
    x[0, 0, 0] = 0.0  # an all-zero row: scale 0, values 0
    x[1, 1, 2, 7] = 1e3  # one outlier dominates its row
    x32 = jnp.asarray(x, jnp.float32)
    q, s = DA.quantize(x32, axis=3)
    assert q.dtype == jnp.int8 and s.dtype == jnp.float32 and s.shape == (3, 2, 5)
    q_ref, s_ref = _quantize_ref(np.asarray(x32), axis=3)
    np.testing.assert_allclose(np.asarray(s), s_ref, rtol=1e-6, atol=0)
    # values equal the reference except where x / scale sits within float32 rounding of .5
    frac = np.abs(np.asarray(x32, np.float64) / np.where(s_ref > 0, s_ref, 1)[..., None] % 1 - .5)
    differ = np.asarray(q, np.float64) != q_ref
    assert (frac[differ] < 1e-4).all() and differ.mean() < 1e-3
    assert int(np.abs(np.asarray(q, np.int32)).max()) == 127
    assert not np.asarray(q)[0, 0, 0].any() and float(s[0, 0, 0]) == 0.0
    # |x - q * scale| <= absmax / 254 per element
    absmax = np.max(np.abs(np.asarray(x32, np.float64)), axis=3, keepdims=True)
    err = np.abs(np.asarray(x32, np.float64)
                 - np.asarray(q, np.float64) * np.asarray(s, np.float64)[..., None])
    assert (err <= absmax / 254 * (1 + 1e-6)).all()
    assert err.max() > 0.4 * (absmax / 254).max()  # the bound is nearly reached (not vacuous)
    np.testing.assert_allclose(np.asarray(DA.dequantize(q, s, 3)),
                               np.asarray(q, np.float64) * np.asarray(s)[..., None], rtol=1e-7)


def _int8_inputs(lengths, s, dtype, seed=0):
    rng = np.random.default_rng(seed)
    b = len(lengths)
    q = jnp.asarray(rng.normal(size=(b, K, G, E)), dtype)
    k = rng.normal(size=(b, K, E, s)) * np.exp(rng.normal(size=(b, K, 1, s)))
    v = rng.normal(size=(b, K, s, E)) * np.exp(rng.normal(size=(b, K, s, 1)))
    kq, ks = DA.quantize(jnp.asarray(k, jnp.float32), axis=2)
    vq, vs = DA.quantize(jnp.asarray(v, jnp.float32), axis=3)
    return q, kq, vq, ks, vs, jnp.asarray(lengths, jnp.int32)


def _reference_dequantized(q, kq, vq, ks, vs, lengths):
    """float64 numpy attention over the dequantized cache; zeros for length 0."""
    f64 = lambda x: np.asarray(jnp.asarray(x).astype(jnp.float32), np.float64)
    q = f64(q)
    k = f64(kq) * f64(ks)[:, :, None, :]
    v = f64(vq) * f64(vs)[:, :, :, None]
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


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("impl,blocks", [("xla", {}), ("ragged", dict(block_b=2, block_s=128))],
                         ids=["xla", "ragged-2x128"])
def test_decode_attention_over_int8_cache(impl, blocks, dtype):
    q, kq, vq, ks, vs, n = _int8_inputs(LENGTHS, 256, dtype)
    out = DA.decode_attention(q, kq, vq, n, impl=impl, k_scale_BKS=ks, v_scale_BKS=vs, **blocks)
    assert out.dtype == dtype and out.shape == q.shape
    got = np.asarray(out.astype(jnp.float32))
    np.testing.assert_allclose(got, _reference_dequantized(q, kq, vq, ks, vs, n), **TOL[dtype])
    assert not got[2].any()  # length 0: zeros


def test_int8_kernel_sharded_on_a_mesh_and_bad_scales():
    """Under a (data 2, fsdp 2, tensor 2) mesh the scales split like the cache (slots over
    data x fsdp, kv heads over tensor); a cache and its scales that do not go together are
    errors naming the argument."""
    mesh = jax.make_mesh((2, 2, 2), ("data", "fsdp", "tensor"))
    q, kq, vq, ks, vs, n = _int8_inputs([1, 256, 0, 130, 128, 57, 200, 3], 256, jnp.float32, 3)
    put = lambda x, sp: jax.device_put(x, NamedSharding(mesh, sp))
    rows, heads = P(("data", "fsdp")), P(("data", "fsdp"), "tensor")
    args = (put(q, heads), put(kq, heads), put(vq, heads), put(n, rows))
    scales = dict(k_scale_BKS=put(ks, heads), v_scale_BKS=put(vs, heads))
    fn = jax.jit(lambda *a, **s: DA.decode_attention(*a, impl="ragged", block_s=128, **s))
    with jax.sharding.use_abstract_mesh(jax.typeof(args[0]).sharding.mesh):
        out = fn(*args, **scales)
    np.testing.assert_allclose(np.asarray(out), _reference_dequantized(q, kq, vq, ks, vs, n),
                               **TOL[jnp.float32])
    with pytest.raises(ValueError, match="needs k_scale_BKS"):
        DA.decode_attention(q, kq, vq, n, impl="xla")
    with pytest.raises(ValueError, match="v_scale_BKS shape"):
        DA.decode_attention(q, kq, vq, n, k_scale_BKS=ks, v_scale_BKS=vs[:, :, :7])
    with pytest.raises(ValueError, match="go together"):
        DA.decode_attention(q, kq, vq, n, k_scale_BKS=ks)


def test_config_field_cache_layout_and_bad_value():
    assert KV_CACHE_DTYPES == DA.KV_CACHE_DTYPES
    with pytest.raises(ConfigError, match="kv_cache_dtype='fp8'"):
        ModelConfig(kv_cache_dtype="fp8")
    cfg = ModelConfig(num_key_value_heads=2, head_dim=16, kv_cache_dtype="int8", dtype="bfloat16")
    c = KVCache.init(cfg, 3, 64)
    assert c.quantized and c.k[0].dtype == jnp.int8 and c.k[0].shape == (3, 2, 16, 64)
    assert c.v[0].shape == (3, 2, 64, 16) and c.k_scale[0].shape == (3, 2, 64)
    assert c.k_scale[0].dtype == jnp.float32 and len(c.v_scale) == cfg.num_hidden_layers
    assert KVCache.scale_axes == ("cache_batch", "cache_kv_heads", "cache_length")
    auto = KVCache.init(cfg.replace(kv_cache_dtype="auto"), 3, 64)
    assert not auto.quantized and auto.k[0].dtype == jnp.bfloat16 and auto.k_scale is None
    # the sizing counts 1 byte per element + two float32 scales per position and head
    from tseeds_jax.model import config as model_config
    from tseeds_jax.model import decode_attention

    assert model_config.KV_SCALE_BYTES == decode_attention.KV_SCALE_BYTES
    assert cfg.kv_bytes_per_token == 2 * 2 * 2 * (16 * 1 + 4)
    assert cfg.replace(kv_cache_dtype="auto").kv_bytes_per_token == 2 * 2 * 2 * 16 * 2
    # and it is what the allocated caches hold, per slot and position
    for cache, mcfg in ((c, cfg), (auto, cfg.replace(kv_cache_dtype="auto"))):
        arrays = [*cache.k, *cache.v, *(cache.k_scale or ()), *(cache.v_scale or ())]
        assert sum(x.nbytes for x in arrays) == mcfg.kv_bytes_per_token * 3 * 64


@pytest.mark.parametrize("source", ["random", "hf", "orbax"])
def test_config_field_reaches_the_model_and_the_planner(source, tmp_path):
    """`config.model.kv_cache_dtype` reaches the trainer's model whatever the weights' source,
    and `TrainModelConfig.model_config` (what `tseeds compile` builds)."""
    from tseeds_jax.hf import hf_to_orbax
    from tseeds_jax.hf.testing import write_random_hf_folder
    from tseeds_jax.rl.config import TrainConfig, default_config
    from tseeds_jax.rl.setup import build_model

    arch = dict(model_type="qwen2", vocab_size=64, hidden_size=16, intermediate_size=32,
                num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1)
    cd = default_config()
    assert cd.model.kv_cache_dtype == "auto"
    cd.model.arch.update(arch)
    if source != "random":
        write_random_hf_folder(ModelConfig(**arch), tmp_path / "hf", seed=0)
        cd.model.init = f"hf:{tmp_path / 'hf'}"
    if source == "orbax":
        hf_to_orbax(tmp_path / "hf", tmp_path / "ckpt")
        cd.model.init = f"orbax:{tmp_path / 'ckpt'}"
    cd.model.kv_cache_dtype = "int8"
    assert build_model(TrainConfig.from_config(cd), vocab_size=64).cfg.kv_cache_dtype == "int8"
    assert TrainConfig.from_config(cd).model.model_config().kv_cache_dtype == "int8"
    cd.model.kv_cache_dtype = "int4"
    with pytest.raises(ConfigError, match="kv_cache_dtype='int4'"):
        build_model(TrainConfig.from_config(cd), vocab_size=64)


def test_chunk_into_a_filled_int8_cache_equals_token_by_token():
    """`layers._prefill` (T > 1 new tokens into a filled cache: its own einsums with the scales
    folded in) gives the logits and cache of T single-token decode steps (`decode_attention`,
    XLA path, checked against float64 above): each position is quantized on its own, so both
    read the same int8 values."""
    cfg = ModelConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, kv_cache_dtype="int8",
                      decode_attention_impl="xla")
    model = init_model(cfg, seed=2)
    decode = jax.jit(lambda t, c, n: model.decode(t, c, lengths_B=n))
    rng = np.random.default_rng(1)
    prompt = jnp.asarray(rng.integers(0, 64, (2, 3)), jnp.int32)
    chunk = jnp.asarray(rng.integers(0, 64, (2, 3)), jnp.int32)
    full, one = jnp.asarray([3, 3]), jnp.asarray([1, 1])
    _, filled = decode(prompt, KVCache.init(cfg, 2, 16), jnp.asarray([3, 2]))
    chunk_logits, by_chunk = decode(chunk, filled, full)
    steps, cache = [], filled
    for t in range(3):
        logits, cache = decode(chunk[:, t:t + 1], cache, one)
        steps.append(logits[:, 0])
    np.testing.assert_allclose(np.asarray(chunk_logits), np.stack(steps, 1), rtol=1e-5,
                               atol=1e-5)
    assert by_chunk.quantized and (np.asarray(by_chunk.end_B) == [6, 5]).all()
    for a, b in zip(jax.tree.leaves(by_chunk), jax.tree.leaves(cache), strict=True):
        assert a.dtype == b.dtype
        np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64),
                                   rtol=1e-6, atol=1e-6 if a.dtype != jnp.int8 else 1)


# ---------------------------------------------------------------- a tiny model's greedy decode

CFG = ModelConfig(vocab_size=64, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
PROMPTS = [[1, 2, 3], [4, 5, 6, 7, 8, 9, 10], [11]]
NEW = 12


def _model(kv_cache_dtype):
    """Seeded random weights scaled x8 (std 0.16): peaked attention and log-probs far from
    uniform, so that cache errors reach the output."""
    model = init_model(CFG.replace(kv_cache_dtype=kv_cache_dtype), seed=5)
    graphdef, state = nnx.split(model)
    state = jax.tree.map(lambda x: x * 8 if x.ndim >= 2 else x, state)
    return nnx.merge(graphdef, state)


def _perturbed_logprobs(model, tokens, prompt_len, dk, dv):
    """The learner's full forward of one sequence (float32, no cache) with every layer's keys
    (after RoPE) and values perturbed by dk[l] / dv[l] [T, K, E] where queries at positions >=
    `prompt_len` read them; the prompt's queries read them unperturbed, as the sampler's
    prefill does (`prompt_len` may be traced). Returns the log-probs of tokens[1:]."""
    seen = []

    def attention(q, k, v, mask, impl="xla"):
        del impl
        i = len(seen)
        seen.append((k, v))
        t, e = q.shape[1], q.shape[-1]
        qg = q.reshape(1, t, k.shape[2], -1, e)
        pos = jnp.arange(t)
        causal = pos[None, :] <= pos[:, None]

        def attend(kk, vv):
            s = jnp.einsum("btkge,bske->bkgts", qg, kk) / np.sqrt(e)
            s = jnp.where(causal, s, -1e30)
            return jnp.einsum("bkgts,bske->btkge", jax.nn.softmax(s, -1), vv)

        exact = attend(k, v)
        moved = attend(k + dk[i][None], v + dv[i][None])
        out = jnp.where((pos >= prompt_len)[None, :, None, None, None], moved, exact)
        return out.reshape(q.shape).astype(q.dtype)

    mp = pytest.MonkeyPatch()
    mp.setattr(layers, "causal_attention", attention)
    try:
        logits = model(jnp.asarray([tokens]))[0]
    finally:
        mp.undo()
    logp = jax.nn.log_softmax(logits.astype(jnp.float32), -1)
    idx = jnp.arange(1, len(tokens))
    return logp[idx - 1, jnp.asarray(tokens)[idx]], seen


def _gap_bound(model, tokens, prompt_len):
    """(learner log-probs of tokens[1:], first-order bound on their change when every
    key / value that a decode query reads carries its int8 quantization error): the sum over
    layers, positions, kv heads and head dims of |d log-prob_t / d x| * absmax / 254, absmax over
    the head dim of the learner's own key / value (after RoPE for keys) at that position."""
    kh, e, nl = CFG.num_key_value_heads, CFG.head_size, CFG.num_hidden_layers
    zeros = [jnp.zeros((len(tokens), kh, e), jnp.float32) for _ in range(nl)]

    def f(dk, dv):
        lp, seen = _perturbed_logprobs(model, tokens, prompt_len, dk, dv)
        return lp, seen

    (jk, jv), seen = jax.jacrev(f, argnums=(0, 1), has_aux=True)(zeros, zeros)
    lp, _ = f(zeros, zeros)
    bound = 0.0
    for i, (k, v) in enumerate(seen):
        for j, x in ((jk[i], k[0]), (jv[i], v[0])):
            eps = jnp.max(jnp.abs(x), -1, keepdims=True) / 254
            bound = bound + jnp.sum(jnp.abs(j) * eps[None], axis=(1, 2, 3))
    return lp, bound


@pytest.mark.slow  # three greedy generations and a jitted jacobian (~20 s on 2 cores)
@pytest.mark.default_codegen  # atol 1e-5 between the sharded and one-device int8 decodes
def test_greedy_int8_logprob_gap_within_the_bound_from_quantization_error():
    """Greedy decode of a tiny model with an int8 cache vs the learner's float32 forward: every
    generated token's |sampler - learner| log-prob gap is within twice its first-order bound
    from the quantization error (`_gap_bound`; the factor 2 covers second-order terms and the
    sampler's own keys / values differing from the learner's by first-order amounts). The first
    token comes from the prefill, whose attention reads the exact keys / values: bound 0. With
    "auto" the same comparison is float32 rounding only."""
    from tseeds_jax.sampling import generate

    res = {kind: generate(_model(kind), PROMPTS, max_new_tokens=NEW, temperature=0, num_slots=4)
           for kind in ("auto", "int8")}
    learner = _model("auto")
    bound_of = jax.jit(_gap_bound, static_argnums=0)
    width = max(map(len, PROMPTS)) + NEW  # one compile: sequences padded at the end (causal)

    def learner_at(p, tokens):
        seq = list(p) + list(tokens)
        lp, bound = bound_of(learner, jnp.asarray(seq + [0] * (width - len(seq))), len(p))
        cut = slice(len(p) - 1, len(seq) - 1)  # log-probs of the generated tokens
        return np.asarray(lp, np.float64)[cut], np.asarray(bound, np.float64)[cut]

    gaps, bounds, auto = [], [], []
    for p, r8, ra in zip(PROMPTS, res["int8"], res["auto"], strict=True):
        assert len(r8.tokens) == NEW
        lp, bound = learner_at(p, r8.tokens)
        gap = np.abs(np.asarray(r8.logprobs, np.float64) - lp)
        assert np.all(gap <= 2 * bound + 1e-5), (gap, bound)
        lp_a, _ = learner_at(p, ra.tokens)
        auto.append(np.abs(np.asarray(ra.logprobs, np.float64) - lp_a))
        gaps.append(gap)
        bounds.append(bound)
    g8, ga, b = np.concatenate(gaps), np.concatenate(auto), np.concatenate(bounds)
    assert ga.max() < 1e-4  # "auto": float32 rounding only
    assert g8.mean() > 10 * max(ga.mean(), 1e-7)  # int8 visibly moves the log-probs ...
    # ... by less than its bound: measured mean gap ~0.01 nat against bounds of 0.2-0.7 (the
    # bound adds |derivative| x error over every element; the errors' signs partly cancel)
    assert b[0] == 0 and g8[0] < 1e-5
    # The same int8 decode on the decode layout (4 replicas x tensor 2 over the 8 CPU devices):
    # the cache and its scales split by `SamplerShardings` (slots over replicas, kv heads over tensor),
    # the same tokens and log-probs.
    from tseeds_jax.sampling import layout, placement

    mesh = layout.decode_mesh(jax.devices(), 2)
    graphdef, params = nnx.split(_model("int8"))
    got = generate((graphdef, layout.reshard(params, mesh)), PROMPTS, max_new_tokens=NEW,
                   temperature=0, num_slots=4)
    for a, r in zip(res["int8"], got, strict=True):
        assert r.tokens == a.tokens
        np.testing.assert_allclose(r.logprobs, a.logprobs, rtol=0, atol=1e-5)
    st, _, _ = placement.SamplerShardings(mesh).init_buffers(CFG.replace(kv_cache_dtype="int8"), 4, 64,
                                                      16)
    assert st.cache.k_scale[0].sharding.spec == P("data", "tensor")
    assert tuple(st.cache.v_scale[1].sharding.spec) == tuple(st.cache.k[0].sharding.spec)[:2]


# ---------------------------------------------------------------- compile-only TPU (v5p)

def _tpu_decode_step_hlo(kv_cache_dtype, impl="ragged"):
    """`test_decode_attention`'s v5p decode step with this cache dtype (the cache and its scales
    placed by the sampler's `SamplerShardings`: slots over data, kv heads over tensor)."""
    hlo, sh = _tpu_decode_step(impl, kv_cache_dtype)
    if kv_cache_dtype == "int8":
        assert sh.cache.k_scale[0].spec == P("data", "tensor") == sh.cache.v_scale[1].spec
    return hlo


@pytest.mark.slow  # two TPU compiles of a 2-layer decode step (~6 s)
def test_int8_cache_compiles_for_v5p_with_the_ragged_kernel():
    from tseeds_jax.scale import topology
    from tseeds_jax.scale.hlo_cost import hlo_cost

    reason = topology.libtpu_available()
    assert reason is None, f"libtpu unavailable: {reason}"  # a pinned test package: never skip
    hlo = _tpu_decode_step_hlo("int8")
    calls = re.findall(r"custom-call\([^\n]*tpu_custom_call[^\n]*", hlo)
    assert len(calls) >= 2 and DA.KERNEL_NAME in hlo
    # the kernel's operands: per device 8 of 16 slots (data 2), 1 of 2 kv heads (tensor 2),
    # int8 keys / values of S x E and float32 scales of S, in each of the 2 layers
    assert re.search(rf"s8\[8,1,128,{S_TPU}\]", hlo) and re.search(rf"f32\[8,1,{S_TPU}\]", hlo)
    cost = hlo_cost(hlo)
    assert cost.decode_cache_bytes == 2 * (2 * 8 * S_TPU * 128 + 2 * 8 * S_TPU * 4)
    # the step's bytes fall by what the cache loses: 16-bit K/V (2 layers x 2 x 8 x S x 128 x 2
    # bytes) against int8 + scales; nothing else grows (the int8 cache writes are counted as
    # the slices they touch: `hlo_cost.relayout`)
    auto = hlo_cost(_tpu_decode_step_hlo("auto"))
    assert auto.decode_cache_bytes == 2 * 2 * 8 * S_TPU * 128 * 2
    saved = auto.decode_cache_bytes - cost.decode_cache_bytes
    assert abs((auto.bytes_accessed - cost.bytes_accessed) - saved) < 0.05 * saved
    # no float32 scores over the whole cache ([slots, heads, G, S]) and no 16-bit copy of it
    assert not re.findall(rf"f32\[8,1,2,{S_TPU}\]", hlo)
    assert not re.findall(rf"bf16\[8,1,(128,{S_TPU}|{S_TPU},128)\]", hlo)


@pytest.mark.slow  # two TPU compiles of a 2-layer decode step (~5 s)
def test_int8_xla_path_folds_the_scales_without_a_dequantized_cache():
    """The XLA decode step over an int8 cache on v5p: no 16-bit or float32 array of the cache's
    shape ([8, 1, 128, S] keys / [8, 1, S, 128] values per device) is materialised outside a
    fusion: the int8 values are converted inside the products' fusions and the scales multiply
    the scores and probabilities."""
    from tseeds_jax.scale.hlo_cost import parse_module

    hlo = _tpu_decode_step_hlo("int8", impl="xla")
    entry = next(c for c in parse_module(hlo).values() if c.entry)
    shapes = rf"(bf16|f32)\[8,1,(128,{S_TPU}|{S_TPU},128)\]"
    assert not [i.name for i in entry.instrs if re.search(shapes, i.type)]
    assert re.search(rf"s8\[8,1,128,{S_TPU}\]", hlo)
    # the check bites: the bfloat16 cache's step holds such arrays (its cache itself)
    auto = next(c for c in parse_module(_tpu_decode_step_hlo("auto", impl="xla")).values()
                if c.entry)
    assert [i.name for i in auto.instrs if re.search(shapes, i.type)]
