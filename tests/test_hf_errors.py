"""Bad HF input gives one clear error naming the file/tensor/field, and leaves no output behind."""

import json

import numpy as np
import pytest
from safetensors.numpy import save_file

from tseeds_jax.hf import ConversionError, MissingFileError, from_pretrained, hf_to_orbax, save_pretrained
from tseeds_jax.hf import cli as convert_cli
from tseeds_jax.hf import safetensors_io as st
from tseeds_jax.hf.testing import write_random_hf_folder
from tseeds_jax.model import ConfigError, ModelConfig

CFG = ModelConfig(model_type="qwen2", vocab_size=64, hidden_size=16, intermediate_size=32,
                  num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1)


@pytest.fixture
def src(tmp_path):
    path = tmp_path / "src"
    write_random_hf_folder(CFG, path, seed=0)
    return path


def _tensors(path):
    files = st.weight_files(path)
    return dict(st.iter_tensors(files, sorted(files)))


def _rewrite(path, tensors):
    save_file(tensors, str(path / st.SINGLE_FILE), metadata={"format": "pt"})


def _edit_config(path, **changes):
    cfg = json.loads((path / "config.json").read_text())
    cfg.update(changes)
    (path / "config.json").write_text(json.dumps(cfg))


def _expect(src, exc, *needles):
    """The error from loading `src`, and that a failed conversion leaves nothing behind."""
    with pytest.raises(exc) as info:
        from_pretrained(src)
    for needle in needles:
        assert needle in str(info.value), (needle, str(info.value))
    out = src.parent / "out"
    with pytest.raises(exc):
        hf_to_orbax(src, out)
    assert sorted(p.name for p in src.parent.iterdir()) == [src.name]
    return info.value


def test_good_folder_loads(src):
    assert from_pretrained(src).cfg.hidden_size == 16


def test_missing_folder_and_config(tmp_path, src):
    with pytest.raises(MissingFileError, match="does not exist"):
        from_pretrained(tmp_path / "nope")
    (src / "config.json").unlink()
    _expect(src, MissingFileError, str(src / "config.json"))


def test_missing_weights_file(src):
    (src / st.SINGLE_FILE).unlink()
    _expect(src, MissingFileError, "model.safetensors", str(src))


def test_missing_shard_listed_in_index(tmp_path):
    path = tmp_path / "src"
    write_random_hf_folder(CFG, path, max_shard_size=4000)
    shard = sorted(path.glob("model-*.safetensors"))[1]
    shard.unlink()
    _expect(path, MissingFileError, shard.name, st.INDEX_FILE)


def test_unsupported_model_type(src):
    _edit_config(src, model_type="mistral")
    _expect(src, ConfigError, "model_type", "mistral", "config.json")


def test_wrong_shape_names_the_tensor(src):
    tensors = _tensors(src)
    name = "model.layers.1.mlp.up_proj.weight"
    tensors[name] = np.zeros((31, 16), np.float32)
    _rewrite(src, tensors)
    _expect(src, ConversionError, name, "(31, 16)", "(32, 16)", "model.safetensors")


def test_missing_tensor_names_the_tensor(src):
    tensors = _tensors(src)
    del tensors["model.layers.0.self_attn.k_proj.bias"]
    _rewrite(src, tensors)
    _expect(src, ConversionError, "missing", "model.layers.0.self_attn.k_proj.bias")


def test_config_with_fewer_layers_than_weights(src):
    _edit_config(src, num_hidden_layers=1)
    _expect(src, ConversionError, "unexpected", "model.layers.1.", "num_hidden_layers=1")


def test_config_with_other_width_than_weights(src):
    _edit_config(src, intermediate_size=40)
    _expect(src, ConversionError, "mlp.gate_proj.weight", "intermediate_size=40", "(32, 16)")


def test_config_says_tied_but_weights_have_a_head(src):
    _edit_config(src, tie_word_embeddings=True)
    _expect(src, ConversionError, "lm_head.weight", "differs", "tie_word_embeddings=True")


def test_tied_checkpoint_with_a_copy_of_the_embedding_loads(src):
    tensors = _tensors(src)
    tensors["lm_head.weight"] = tensors["model.embed_tokens.weight"].copy()
    _rewrite(src, tensors)
    _edit_config(src, tie_word_embeddings=True)
    model = from_pretrained(src)
    assert model.cfg.tie_word_embeddings and not hasattr(model, "lm_head")


def test_config_says_untied_but_no_head(tmp_path):
    path = tmp_path / "src"
    write_random_hf_folder(CFG.replace(tie_word_embeddings=True), path)
    _edit_config(path, tie_word_embeddings=False)
    _expect(path, ConversionError, "missing", "lm_head.weight", "tie_word_embeddings=False")


def test_unsupported_dtype_names_the_tensor(src):
    tensors = _tensors(src)
    tensors["model.norm.weight"] = tensors["model.norm.weight"].astype(np.int32)
    _rewrite(src, tensors)
    _expect(src, ConversionError, "model.norm.weight", "I32")


def test_bad_dtype_argument(src):
    with pytest.raises(ValueError, match="dtype='int8'"):
        from_pretrained(src, dtype="int8")


def test_failed_export_leaves_nothing(tmp_path, src, monkeypatch):
    model = from_pretrained(src)
    calls = []

    def failing(path, items, metadata):
        calls.append(path)
        if len(calls) == 2:
            raise OSError("disk full (simulated)")
        return real(path, items, metadata)

    real = st._write_file
    monkeypatch.setattr(st, "_write_file", failing)
    with pytest.raises(OSError, match="simulated"):
        save_pretrained(model, tmp_path / "out", max_shard_size=4000)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src"]


def test_existing_output_is_not_clobbered(tmp_path, src):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="not empty"):
        save_pretrained(from_pretrained(src), out)
    assert (out / "keep.txt").read_text() == "mine"
    save_pretrained(from_pretrained(src), out, overwrite=True)
    assert not (out / "keep.txt").exists() and (out / "config.json").exists()


def test_cli_reports_error_and_exit_code(tmp_path, src, capsys):
    _edit_config(src, model_type="mistral")
    assert convert_cli.main(["hf-to-orbax", str(src), str(tmp_path / "o")]) == 1
    assert "mistral" in capsys.readouterr().err
    assert convert_cli.main(["orbax-to-hf", str(tmp_path / "none"), str(tmp_path / "o")]) == 1
    assert "params" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
