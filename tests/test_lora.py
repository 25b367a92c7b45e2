"""LoRA on the model (tseeds_jax/model/lora.py): neutral when off, exact at B = 0, merged equals
unmerged, gradients only for adapters, dropout, jit, sharding on 8 devices, the sampler.

Tolerance: float32 logits and gradients agree to 1e-5 of their largest magnitude (the
conventions' float32 relative bound, taken over the whole array so that entries near zero do
not divide by ~0); `jax_default_matmul_precision=highest` (conftest).
"""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx
from jax.sharding import PartitionSpec

import tseeds_jax.model.layers as layers
from tseeds_jax.hf.mapping import get_path, tensor_specs
from tseeds_jax.model import KVCache, ModelConfig, init_model, lora
from tseeds_jax.model.sharding import make_mesh, shard_model
from tseeds_jax.sampling import generate

CFG = ModelConfig(vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, attention_bias=True,
                  max_position_embeddings=128)
LCFG = lora.LoraConfig(rank=4, alpha=8.0)
TOKENS = jnp.asarray(np.random.default_rng(0).integers(0, CFG.vocab_size, (3, 11)), jnp.int32)
REL = 1e-5


def _close(a, b, rel=REL):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    assert a.shape == b.shape
    err, scale = np.abs(a - b).max(), np.abs(b).max()
    assert err <= rel * scale, (err, scale)


def _random_adapters(model, seed=1, std=0.05):
    """Random values for every adapter (B included), so that the LoRA term is far from zero."""
    rng = np.random.default_rng(seed)
    return jax.tree.map(lambda x: jnp.asarray(rng.normal(0, std, x.shape), x.dtype),
                        lora.adapter_params(model))


def _lora_model(cfg=CFG, lcfg=LCFG, seed=0, random_b=True):
    model = lora.apply_lora(init_model(cfg, seed), lcfg, seed=seed)
    if random_b:
        lora.load_adapters(model, _random_adapters(model))
    return model


def _paths(state) -> set:
    return {tuple(p) for p, _ in nnx.to_flat_state(state)}


# ---------------------------------------------------------------- LoRA off / B = 0

def test_plain_model_unchanged():
    """Without adapters the parameter tree is the HF mapping's table, and tracing the model
    gives the same program as with the hook replaced by the identity."""
    model = init_model(CFG)
    assert _paths(nnx.state(model)) == {s.path for s in tensor_specs(CFG)}
    assert not lora.has_lora(model)

    def traced():
        g, p = nnx.split(model)
        grad = jax.grad(lambda p: nnx.merge(g, p)(TOKENS).mean())
        cache = KVCache.init(CFG, 3, 16)
        dec = lambda p: nnx.merge(g, p).decode(TOKENS[:, :1], cache)  # noqa: E731
        return [str(jax.make_jaxpr(f)(p)) for f in (grad, dec)]

    with_hook = traced()
    original = layers.adapted
    layers.adapted = lambda module, name, y, x: y
    try:
        without_hook = traced()
    finally:
        layers.adapted = original
    assert with_hook == without_hook


@pytest.mark.parametrize("dtype, param_dtype", [("float32", "float32"), ("bfloat16", "float32"),
                                                ("bfloat16", "bfloat16")])
def test_b_zero_gives_base_logits_bitwise(dtype, param_dtype):
    cfg = ModelConfig(**{**CFG.__dict__, "dtype": dtype, "param_dtype": param_dtype})
    base = init_model(cfg, 0)
    model = _lora_model(cfg, random_b=False)
    ad = lora.adapter_params(model)
    # A is random (PEFT's init), B is exactly zero.
    assert float(jnp.abs(ad["layers"][0]["attn"]["lora"]["q"]["lora_a"]).max()) > 0
    assert all(float(jnp.abs(b).max()) == 0 for b in jax.tree.leaves(ad)[1::2])
    assert _paths(nnx.state(model, lora.FROZEN)) == _paths(nnx.state(base))
    np.testing.assert_array_equal(np.asarray(jax.jit(lambda m: m(TOKENS))(model)),
                                  np.asarray(jax.jit(lambda m: m(TOKENS))(base)))
    if dtype == "bfloat16":
        return  # XLA:CPU has no bf16 x bf16 -> f32 dot for the cached prefill's scores
    # The cached (sampler) path: a prefill then one-token decode steps.
    def cached(m):
        cache = KVCache.init(cfg, 3, 16)
        l1, cache = m.decode(TOKENS[:, :6], cache)
        l2, _ = m.decode(TOKENS[:, 6:7], cache)
        return l1, l2
    for a, b in zip(jax.jit(cached)(model), jax.jit(cached)(base)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_adapter_tree():
    model = _lora_model(random_b=False)
    got = _paths(nnx.state(model, lora.TRAINABLE))
    want = {("layers", i, sub, "lora", t, ab) for i in range(CFG.num_hidden_layers)
            for t, (sub, *_) in lora.TARGETS.items() for ab in ("lora_a", "lora_b")}
    assert got == want
    shapes = jax.tree.map(lambda x: x.shape, lora.adapter_params(model))["layers"][1]
    he, ke = 4 * 16, 2 * 16
    assert shapes["attn"]["lora"]["q"] == {"lora_a": (64, 4), "lora_b": (4, he)}
    assert shapes["attn"]["lora"]["k"] == {"lora_a": (64, 4), "lora_b": (4, ke)}
    assert shapes["attn"]["lora"]["o"] == {"lora_a": (he, 4), "lora_b": (4, 64)}
    assert shapes["mlp"]["lora"]["down"] == {"lora_a": (96, 4), "lora_b": (4, 64)}
    only_qv = lora.apply_lora(init_model(CFG), lora.LoraConfig(rank=2, targets=("v", "q")))
    assert lora.lora_config_of(only_qv).targets == ("q", "v")
    assert {p[4] for p in _paths(nnx.state(only_qv, lora.TRAINABLE))} == {"q", "v"}


# ---------------------------------------------------------------- merged vs unmerged

def _float64_merged_model(model):
    """A plain model whose weights are W + s * A @ B computed in float64 numpy."""
    lcfg = lora.lora_config_of(model)
    base = jax.tree.map(np.asarray, lora.base_params(model))
    for i, layer in lora.adapter_params(model)["layers"].items():
        for sub, mods in layer.items():
            for t, ab in mods["lora"].items():
                name = lora.TARGETS[t][1]
                w = base["layers"][i][sub][name]
                a, b = np.asarray(ab["lora_a"], np.float64), np.asarray(ab["lora_b"], np.float64)
                base["layers"][i][sub][name] = (w + lcfg.scale * (a @ b).reshape(w.shape)).astype(w.dtype)
    plain = init_model(model.cfg, 99)
    state = nnx.state(plain)
    nnx.replace_by_pure_dict(state, base)
    nnx.update(plain, state)
    return plain


@pytest.mark.parametrize("rslora", [False, True])
def test_merged_equals_unmerged(rslora):
    model = _lora_model(lcfg=lora.LoraConfig(rank=4, alpha=8.0, use_rslora=rslora))
    out = model(TOKENS)
    base_out = init_model(CFG, 0)(TOKENS)
    assert np.abs(np.asarray(out - base_out)).max() > 1e3 * REL * np.abs(np.asarray(out)).max()
    _close(out, _float64_merged_model(model)(TOKENS))
    merged = lora.merge_lora(model)
    assert not lora.has_lora(merged)
    assert _paths(nnx.state(merged)) == _paths(nnx.state(init_model(CFG)))
    _close(out, merged(TOKENS))
    # `model` is untouched by merging.
    np.testing.assert_array_equal(np.asarray(model(TOKENS)), np.asarray(out))


def test_adapter_roundtrip_and_strip():
    model = _lora_model()
    other = _lora_model(random_b=False, seed=0)
    lora.load_adapters(other, lora.adapter_params(model))
    np.testing.assert_array_equal(np.asarray(other(TOKENS)), np.asarray(model(TOKENS)))
    plain = lora.strip_lora(model)
    assert plain.embed.get_value() is model.embed.get_value()  # shared, not copied
    np.testing.assert_array_equal(np.asarray(plain(TOKENS)), np.asarray(init_model(CFG, 0)(TOKENS)))


# ---------------------------------------------------------------- gradients

def _loss(model):
    logits = model(TOKENS).astype(jnp.float32)
    return jnp.mean(jax.nn.log_softmax(logits)[..., 0] * jnp.arange(11.0))


@pytest.mark.parametrize("remat", [False, True])
def test_gradients_reach_only_adapters(remat):
    cfg = ModelConfig(**{**CFG.__dict__, "remat": remat})
    model = _lora_model(cfg, random_b=False)
    graphdef, adapters, base, rest = lora.split_lora(model)
    grad_fn = jax.jit(jax.grad(lambda ad: _loss(nnx.merge(graphdef, ad, base, rest))))
    g0 = grad_fn(adapters)
    assert _paths(g0) == _paths(adapters) and not _paths(g0) & _paths(base)
    flat = dict(nnx.to_flat_state(g0))
    # B = 0: dL/dA = s * dL/dW @ B^T is exactly zero, dL/dB is not.
    assert all(float(jnp.abs(v.get_value()).max()) == 0 for p, v in flat.items() if p[-1] == "lora_a")
    assert all(float(jnp.abs(v.get_value()).max()) > 0 for p, v in flat.items() if p[-1] == "lora_b")

    # With B != 0: dL/dA = s G B^T and dL/dB = s A^T G, G = dL/dW of the merged plain model.
    lora.load_adapters(model, _random_adapters(model))
    graphdef, adapters, base, rest = lora.split_lora(model)
    g = grad_fn(adapters)
    merged = lora.merge_lora(model)
    mg, mp = nnx.split(merged)
    gw = jax.grad(lambda p: _loss(nnx.merge(mg, p)))(mp)
    s = LCFG.scale
    ad, gad = lora.adapter_params(model), nnx.to_pure_dict(g)
    for i in range(cfg.num_hidden_layers):
        for t, (sub, name, *_) in lora.TARGETS.items():
            a, b = (np.asarray(ad["layers"][i][sub]["lora"][t][k], np.float64)
                    for k in ("lora_a", "lora_b"))
            gw_IO = np.asarray(get_path(nnx.to_pure_dict(gw), ("layers", i, sub, name)),
                               np.float64).reshape(a.shape[0], b.shape[1])
            got = gad["layers"][i][sub]["lora"][t]
            _close(got["lora_a"], s * gw_IO @ b.T)
            _close(got["lora_b"], s * a.T @ gw_IO)


def test_optimizer_state_and_updates_only_for_adapters():
    model = _lora_model()
    graphdef, adapters, base, rest = lora.split_lora(model)
    tx = optax.adam(1e-2)
    opt = tx.init(adapters)
    n_adapter = sum(x.size for x in jax.tree.leaves(adapters))
    assert sum(x.size for x in jax.tree.leaves(opt)) == 2 * n_adapter + 1  # mu, nu, count
    base_before = jax.tree.map(np.asarray, base)

    @jax.jit
    def step(adapters, opt):
        g = jax.grad(lambda ad: _loss(nnx.merge(graphdef, ad, base, rest)))(adapters)
        upd, opt = tx.update(g, opt, adapters)
        return optax.apply_updates(adapters, upd), opt

    new, _ = step(adapters, opt)
    assert all(not np.array_equal(a, b) for a, b in zip(jax.tree.leaves(new), jax.tree.leaves(adapters)))
    for a, b in zip(jax.tree.leaves(base), jax.tree.leaves(base_before)):
        np.testing.assert_array_equal(np.asarray(a), b)
    # Flax's own optimizer with the same filter: the base weights stay as they were.
    nopt = nnx.Optimizer(model, tx, wrt=lora.TRAINABLE)
    nnx.jit(lambda m, o: o.update(m, nnx.grad(_loss, argnums=nnx.DiffState(0, lora.TRAINABLE))(m)))(
        model, nopt)
    for a, b in zip(jax.tree.leaves(nnx.state(model, lora.FROZEN)), jax.tree.leaves(base_before)):
        np.testing.assert_array_equal(np.asarray(a), b)
    np.testing.assert_allclose(np.asarray(jax.tree.leaves(nnx.state(model, lora.TRAINABLE))[0]),
                               np.asarray(jax.tree.leaves(new)[0]), rtol=1e-6, atol=1e-7)


# ---------------------------------------------------------------- dropout

def test_dropout_only_when_enabled():
    model = _lora_model(lcfg=lora.LoraConfig(rank=4, alpha=8.0, dropout=0.5))
    ref = _lora_model()  # same A and B, no dropout
    want = np.asarray(ref(TOKENS))
    np.testing.assert_array_equal(np.asarray(model(TOKENS)), want)  # off by default
    lora.set_lora_dropout(model, True, key=jax.random.PRNGKey(1))
    a, b = np.asarray(model(TOKENS)), np.asarray(model(TOKENS))
    assert not np.array_equal(a, want)
    np.testing.assert_array_equal(a, b)  # the masks are a function of the key
    lora.set_lora_dropout(model, True, key=jax.random.PRNGKey(2))
    assert not np.array_equal(np.asarray(model(TOKENS)), a)
    lora.set_lora_dropout(model, False)
    np.testing.assert_array_equal(np.asarray(model(TOKENS)), want)
    # Without dropout the model holds no key at all; with it, one key shared by every adapter.
    assert not jax.tree.leaves(lora.split_lora(ref)[3])
    assert len(jax.tree.leaves(lora.split_lora(model)[3])) == 1
    # Inverted dropout on the adapter's input: about half the entries zeroed, the rest doubled.
    adapter = model.layers[1].mlp.lora["down"]
    adapter.deterministic = False
    x = adapter._dropout(jnp.ones((400, 96)))
    assert set(np.unique(np.asarray(x)).tolist()) == {0.0, 2.0}
    assert abs(float((x == 0).mean()) - 0.5) < 0.02


def test_dropout_in_a_functional_step():
    """A jitted jax.grad of the adapters alone under remat, with new masks per call through the
    key in `rest` (nothing is mutated inside the step)."""
    cfg = ModelConfig(**{**CFG.__dict__, "remat": True})
    model = _lora_model(cfg, lcfg=lora.LoraConfig(rank=4, alpha=8.0, dropout=0.3))
    lora.set_lora_dropout(model, True)
    graphdef, adapters, base, rest = lora.split_lora(model)
    step = jax.jit(jax.grad(lambda ad, rest: _loss(nnx.merge(graphdef, ad, base, rest))))
    g1, g2, g1b = (jax.tree.leaves(step(adapters, lora.with_dropout_key(rest, jax.random.PRNGKey(k))))
                   for k in (1, 2, 1))
    assert all(np.array_equal(a, b) for a, b in zip(g1, g1b))
    assert not all(np.array_equal(a, b) for a, b in zip(g1, g2))


# ---------------------------------------------------------------- sharding

def test_sharded_adapters_follow_the_rule():
    model = _lora_model()
    want = np.asarray(model(TOKENS))
    greedy = _gen(model, temperature=0.0)
    mesh = make_mesh({"data": 2, "fsdp": 2, "tensor": 2})
    shard_model(model, mesh)
    attn, mlp = model.layers[0].attn.lora, model.layers[0].mlp.lora
    spec = lambda p: p.get_value().sharding.spec  # noqa: E731
    assert spec(attn["q"].lora_a) == PartitionSpec("fsdp")  # [D, R]: D like q's embed
    assert spec(attn["q"].lora_b) == PartitionSpec(None, "tensor")  # [R, H*E]: heads
    assert spec(attn["k"].lora_b) == PartitionSpec(None, "tensor")
    assert spec(attn["o"].lora_a) == PartitionSpec("tensor")  # [H*E, R]
    assert spec(attn["o"].lora_b) == PartitionSpec(None, "fsdp")  # [R, D]
    assert spec(mlp["gate"].lora_b) == PartitionSpec(None, "tensor")
    assert spec(mlp["down"].lora_a) == PartitionSpec("tensor")
    assert spec(mlp["down"].lora_b) == PartitionSpec(None, "fsdp")
    graphdef, adapters, base, rest = lora.split_lora(model)
    fwd = jax.jit(lambda ad: nnx.merge(graphdef, ad, base, rest)(TOKENS))
    _close(fwd(adapters), want)
    g = jax.jit(jax.grad(lambda ad: _loss(nnx.merge(graphdef, ad, base, rest))))(adapters)
    assert all(x.sharding.is_fully_addressable and len(x.sharding.device_set) == 8
               for x in jax.tree.leaves(g))
    # The sampler on the sharded parameters as they are (the "sharded" placement).
    sharded = _gen(model, temperature=0.0)
    assert [r.tokens for r in sharded] == [r.tokens for r in greedy]
    _close([r.logprobs for r in sharded], [r.logprobs for r in greedy], rel=1e-4)


# ---------------------------------------------------------------- the sampler

def _gen(model, **kw):
    prompts = [list(map(int, row)) for row in np.asarray(TOKENS[:, :5])]
    return generate(model, prompts, max_new_tokens=6, seed=3, **kw)


def test_generate_with_adapters():
    base = init_model(CFG, 0)
    fresh = _lora_model(random_b=False)
    runs = {}
    for temperature in (0.0, 1.0):
        got, runs[temperature] = _gen(fresh, temperature=temperature), _gen(base, temperature=temperature)
        assert [r.tokens for r in got] == [r.tokens for r in runs[temperature]]
        np.testing.assert_array_equal([r.logprobs for r in got],
                                      [r.logprobs for r in runs[temperature]])
    trained = _lora_model()
    out = _gen(trained, temperature=0.0)
    assert [r.tokens for r in out] != [r.tokens for r in runs[0.0]]
    # Low-rank terms in the decode step vs adapters merged into the weights.
    merged = _gen(lora.decode_variant(trained, "merged"), temperature=0.0)
    assert [r.tokens for r in merged] == [r.tokens for r in out]
    _close([r.logprobs for r in merged], [r.logprobs for r in out], rel=1e-4)


# ---------------------------------------------------------------- bad input

@pytest.mark.parametrize("kw, field", [
    ({"rank": 0}, "rank"), ({"rank": 2.0}, "rank"), ({"alpha": -1.0}, "alpha"),
    ({"dropout": 1.0}, "dropout"), ({"targets": ("q", "qkv")}, "targets"),
    ({"targets": ()}, "targets"), ({"param_dtype": "int8"}, "param_dtype")])
def test_config_errors_name_the_field(kw, field):
    with pytest.raises(ValueError, match=f"LoraConfig.{field}="):
        lora.LoraConfig(**kw)


def test_misuse_errors():
    model = _lora_model(random_b=False)
    with pytest.raises(ValueError, match="already has LoRA"):
        lora.apply_lora(model, LCFG)
    with pytest.raises(ValueError, match="no LoRA adapters"):
        lora.adapter_params(init_model(CFG))
    wrong = lora.adapter_params(_lora_model(lcfg=lora.LoraConfig(rank=2), random_b=False))
    with pytest.raises(ValueError, match=r"lora_b.*\(2, 64\) \(expected \(4, 64\)\)"):
        lora.load_adapters(model, wrong)
    partial = lora.adapter_params(_lora_model(lcfg=lora.LoraConfig(rank=4, targets=("q",)),
                                              random_b=False))
    with pytest.raises(ValueError, match="missing"):
        lora.load_adapters(model, partial)
    with pytest.raises(ValueError, match="mode="):
        lora.decode_variant(model, "fused")
