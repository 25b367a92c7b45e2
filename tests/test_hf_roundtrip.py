"""HF -> ours -> HF round trips are bitwise exact; transformers loads what we write.

Covers float32 and bfloat16 weights, single-file and sharded safetensors (small forced shard
size) in both directions, tokenizer files, and the `tseeds convert` CLI through Orbax.
"""

import json

import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers
from jax.sharding import PartitionSpec

from tseeds_jax.hf import cli as convert_cli
from tseeds_jax.hf import from_pretrained, load_checkpoint_model, save_pretrained
from tseeds_jax.hf import safetensors_io as st
from tseeds_jax.hf.testing import hf_reference_model
from tseeds_jax.model.sharding import make_mesh

CFG = dict(model_type="qwen2", vocab_size=97, hidden_size=32, intermediate_size=48,
            num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            max_position_embeddings=128, tie_word_embeddings=False)
TOKENIZER = {"tokenizer.json": '{"version": "1.0", "model": {"type": "BPE"}}',
             "tokenizer_config.json": '{"model_max_length": 128}',
             "special_tokens_map.json": '{"eos_token": "</s>"}',
             "merges.txt": "#version: 0.2\na b\n"}


def _read_all(path):
    """name -> (dtype tag, shape, raw bytes) of every tensor of an HF folder."""
    files = st.weight_files(path)
    heads = st.headers(files)
    out = {}
    for name, arr in st.iter_tensors(files, sorted(files)):
        out[name] = (heads[name][0], arr.shape, arr.tobytes())
    return out


def _hf_folder(tmp_path, name, *, dtype=None, max_shard_size=None, **overrides):
    hf_model = hf_reference_model(dict(CFG, **overrides), seed=3, torch_dtype=dtype)
    path = tmp_path / name
    kwargs = {} if max_shard_size is None else {"max_shard_size": max_shard_size}
    hf_model.save_pretrained(path, **kwargs)
    for fname, text in TOKENIZER.items():
        (path / fname).write_text(text)
    return hf_model, path


def _hf_logits_of(path, tokens):
    """Logits of `transformers` loading the folder (for bf16 the reference must be loaded the
    same way: `.to(bfloat16)` on a live model also casts the RoPE buffers, loading does not)."""
    return _logits(transformers.AutoModelForCausalLM.from_pretrained(path).eval(), tokens)


def _logits(hf_model, tokens):
    with torch.no_grad():
        return hf_model(torch.tensor(tokens)).logits.float().numpy()


TOKENS = np.random.default_rng(0).integers(0, CFG["vocab_size"], (2, 9))


@pytest.mark.parametrize("tied", [False, True])
def test_float32_roundtrip_bitwise_and_transformers_reload(tmp_path, tied):
    hf_model, src = _hf_folder(tmp_path, "src", tie_word_embeddings=tied)
    model = from_pretrained(src)
    out = save_pretrained(model, tmp_path / "out", tokenizer_from=src)
    before, after = _read_all(src), _read_all(out)
    assert before.keys() == after.keys()
    for name in before:
        assert before[name] == after[name], name
    assert ("lm_head.weight" in after) == (not tied)
    for fname, text in TOKENIZER.items():
        assert (out / fname).read_text() == text
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    np.testing.assert_array_equal(_logits(reloaded, TOKENS), _logits(hf_model, TOKENS))


def test_bfloat16_roundtrip_bitwise(tmp_path):
    hf_model, src = _hf_folder(tmp_path, "src", dtype=torch.bfloat16)
    before = _read_all(src)
    assert {tag for tag, _, _ in before.values()} == {"BF16"}
    # bf16 params written as they are ...
    out_bf16 = save_pretrained(from_pretrained(src, dtype="bfloat16"), tmp_path / "a")
    assert _read_all(out_bf16) == before
    # ... and bf16 -> float32 (exact) -> bf16 on export.
    model32 = from_pretrained(src, dtype="float32")
    assert model32.embed.get_value().dtype == jnp.float32
    out_32 = save_pretrained(model32, tmp_path / "b", dtype="bfloat16")
    assert _read_all(out_32) == before
    np.testing.assert_array_equal(_hf_logits_of(out_32, TOKENS), _hf_logits_of(src, TOKENS))


def test_sharded_safetensors_read_and_write(tmp_path):
    hf_model, src = _hf_folder(tmp_path, "src", max_shard_size="20KB")
    assert (src / st.INDEX_FILE).exists()
    model = from_pretrained(src)
    out = save_pretrained(model, tmp_path / "out", max_shard_size=20_000)
    index = json.loads((out / st.INDEX_FILE).read_text())
    shard_files = sorted(set(index["weight_map"].values()))
    assert len(shard_files) > 2 and not (out / st.SINGLE_FILE).exists()
    sizes = {f: (out / f).stat().st_size for f in shard_files}
    # A shard exceeds the limit only when it holds one tensor larger than the limit.
    for f, size in sizes.items():
        names = [n for n, g in index["weight_map"].items() if g == f]
        assert size <= 20_000 + 1024 or len(names) == 1, (f, size)
    before, after = _read_all(src), _read_all(out)
    assert before == after
    assert index["metadata"]["total_size"] == sum(int(np.prod(s)) * 4 for _, s, _ in after.values())
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    np.testing.assert_array_equal(_logits(reloaded, TOKENS), _logits(hf_model, TOKENS))
    # A large limit gives the single-file layout.
    single = save_pretrained(model, tmp_path / "single")
    assert sorted(p.name for p in single.iterdir()) == ["config.json", "model.safetensors"]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_cli_roundtrip_through_orbax(tmp_path, dtype):
    hf_model, src = _hf_folder(tmp_path, "src", dtype=getattr(torch, dtype))
    ckpt, out = tmp_path / "ckpt", tmp_path / "out"
    assert convert_cli.main(["hf-to-orbax", str(src), str(ckpt)]) == 0
    assert convert_cli.main(["orbax-to-hf", str(ckpt), str(out), "--max-shard-size", "30KB"]) == 0
    assert _read_all(src) == _read_all(out)
    for fname, text in TOKENIZER.items():
        assert (out / fname).read_text() == text
    assert (out / "generation_config.json").exists()
    config = json.loads((out / "config.json").read_text())
    assert config["torch_dtype"] == dtype and config["model_type"] == "qwen2"
    np.testing.assert_array_equal(_hf_logits_of(out, TOKENS), _hf_logits_of(src, TOKENS))
    # Nothing but the finished folders next to the outputs.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt", "out", "src"]


def test_checkpoint_model_restores_onto_mesh(tmp_path):
    _, src = _hf_folder(tmp_path, "src")
    ckpt = tmp_path / "ckpt"
    assert convert_cli.main(["hf-to-orbax", str(src), str(ckpt)]) == 0
    mesh = make_mesh({"data": 2, "fsdp": 2, "tensor": 2})
    sharded = load_checkpoint_model(ckpt, mesh=mesh)
    q = sharded.layers[0].attn.q.get_value()
    assert q.sharding.spec == PartitionSpec("fsdp", "tensor")
    ref = from_pretrained(src)
    tokens = jnp.asarray(TOKENS, jnp.int32)
    np.testing.assert_allclose(np.asarray(sharded(tokens)), np.asarray(ref(tokens)),
                               rtol=1e-5, atol=1e-6)
