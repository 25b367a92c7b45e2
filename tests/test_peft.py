"""PEFT LoRA adapter folders in and out (tseeds_jax/hf/peft.py, peft_orbax.py), against HF PEFT
on torch (test-only) with tiny random HF models built here.

Tolerance: float32 logits max-abs 1e-4, the bound of the HF parity tests (tests/test_hf_parity.py).
"""

import json
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import peft
import pytest
import torch
import transformers
from safetensors.numpy import load_file, save_file

from tseeds_jax.hf import cli as convert_cli
from tseeds_jax.hf import from_pretrained
from tseeds_jax.hf import peft as ours
from tseeds_jax.hf.errors import ConversionError, MissingFileError
from tseeds_jax.hf.peft_orbax import load_adapter_checkpoint, merge_into_hf
from tseeds_jax.hf.testing import hf_reference_model
from tseeds_jax.model import lora

TOL = 1e-4
BASE = dict(vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
CASES = {
    "qwen2_tied": dict(BASE, model_type="qwen2", tie_word_embeddings=True),
    "llama": dict(BASE, model_type="llama", tie_word_embeddings=False),
    "qwen3": dict(BASE, model_type="qwen3", head_dim=24, tie_word_embeddings=False),
}
ALL_HF = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
TOKENS = np.random.default_rng(0).integers(0, BASE["vocab_size"], (3, 13))


@pytest.fixture(scope="module", params=sorted(CASES))
def base_dir(request, tmp_path_factory):
    path = tmp_path_factory.mktemp(request.param)
    hf_reference_model(CASES[request.param], seed=len(request.param)).save_pretrained(path)
    return path


def _hf(path):
    return transformers.AutoModelForCausalLM.from_pretrained(path).eval()


def _logits(model):
    with torch.no_grad():
        return model(torch.tensor(TOKENS)).logits.float().numpy()


def _ours_logits(model):
    return np.asarray(model(jnp.asarray(TOKENS, jnp.int32)))


def _peft_folder(base_dir, out, *, r=4, alpha=16, targets=ALL_HF, rslora=False, seed=0):
    """A PEFT adapter folder written by PEFT itself, with random A and B."""
    torch.manual_seed(seed)
    config = peft.LoraConfig(r=r, lora_alpha=alpha, target_modules=list(targets),
                             lora_dropout=0.0, task_type="CAUSAL_LM", use_rslora=rslora,
                             init_lora_weights=False)
    model = peft.get_peft_model(_hf(base_dir), config).eval()
    model.save_pretrained(out)
    return model


def _ours_adapted(base_dir, lcfg, seed=1):
    model = lora.apply_lora(from_pretrained(base_dir), lcfg)
    rng = np.random.default_rng(seed)
    lora.load_adapters(model, jax.tree.map(lambda x: jnp.asarray(rng.normal(0, 0.05, x.shape),
                                                                 x.dtype),
                                           lora.adapter_params(model)))
    return model


# ---------------------------------------------------------------- parity with PEFT

def test_peft_loads_our_export(base_dir, tmp_path):
    model = _ours_adapted(base_dir, lora.LoraConfig(rank=4, alpha=8.0))
    out = ours.save_peft(model, tmp_path / "adapter", base_model_name_or_path=str(base_dir))
    assert sorted(p.name for p in out.iterdir()) == ["adapter_config.json",
                                                     "adapter_model.safetensors"]
    config = json.loads((out / "adapter_config.json").read_text())
    assert (config["r"], config["lora_alpha"], config["task_type"]) == (4, 8, "CAUSAL_LM")
    assert sorted(config["target_modules"]) == sorted(ALL_HF)
    assert config["base_model_name_or_path"] == str(base_dir)
    tensors = load_file(out / "adapter_model.safetensors")
    assert tensors["base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"].shape == (4, 64)
    pm = peft.PeftModel.from_pretrained(_hf(base_dir), out).eval()
    got, want = _logits(pm), _ours_logits(model)
    assert np.abs(got - want).max() <= TOL
    # The adapters matter far beyond the tolerance (a mapping bug could not hide).
    assert np.abs(want - _logits(_hf(base_dir))).max() > 100 * TOL


@pytest.mark.parametrize("rslora, targets", [(False, ALL_HF), (True, ["q_proj", "v_proj", "down_proj"])])
def test_we_load_peft_adapters(base_dir, tmp_path, rslora, targets):
    pm = _peft_folder(base_dir, tmp_path / "adapter", rslora=rslora, targets=targets)
    model = ours.load_peft(from_pretrained(base_dir), tmp_path / "adapter")
    lcfg = lora.lora_config_of(model)
    assert (lcfg.rank, lcfg.alpha, lcfg.use_rslora) == (4, 16.0, rslora)
    assert [ours.HF_MODULES[t].split(".")[1] for t in lcfg.targets] == [
        m for m in ALL_HF if m in targets]
    want = _logits(pm)
    assert np.abs(_ours_logits(model) - want).max() <= TOL
    assert np.abs(want - _logits(_hf(base_dir))).max() > 100 * TOL


# ---------------------------------------------------------------- round trips

def test_roundtrips_are_bitwise(base_dir, tmp_path):
    _peft_folder(base_dir, tmp_path / "peft")
    theirs = load_file(tmp_path / "peft" / "adapter_model.safetensors")
    # PEFT folder -> ours -> PEFT folder: the same tensors, byte for byte.
    lcfg, adapters = ours.read_peft(tmp_path / "peft")
    ours.write_peft(adapters, lcfg, tmp_path / "again")
    again = load_file(tmp_path / "again" / "adapter_model.safetensors")
    assert sorted(again) == sorted(theirs)
    for name in theirs:
        assert again[name].dtype == theirs[name].dtype and again[name].tobytes() == theirs[name].tobytes()
    # ... and through the Orbax adapter checkpoint with the CLI.
    assert convert_cli.main(["peft-to-orbax", str(tmp_path / "peft"), str(tmp_path / "ckpt")]) == 0
    assert convert_cli.main(["orbax-to-peft", str(tmp_path / "ckpt"), str(tmp_path / "back")]) == 0
    back = load_file(tmp_path / "back" / "adapter_model.safetensors")
    assert {n: a.tobytes() for n, a in back.items()} == {n: a.tobytes() for n, a in theirs.items()}
    # Ours -> PEFT folder -> ours: the adapter arrays, bit for bit.
    model = _ours_adapted(base_dir, lora.LoraConfig(rank=4, alpha=8.0))
    ours.save_peft(model, tmp_path / "mine")
    reloaded = ours.load_peft(from_pretrained(base_dir), tmp_path / "mine")
    for a, b in zip(jax.tree.leaves(lora.adapter_params(model)),
                    jax.tree.leaves(lora.adapter_params(reloaded))):
        assert np.asarray(a).tobytes() == np.asarray(b).tobytes()
    lcfg2, ad2, _ = load_adapter_checkpoint(tmp_path / "ckpt")
    assert lcfg2 == lcfg
    for a, b in zip(jax.tree.leaves(adapters), jax.tree.leaves(ad2)):
        assert np.asarray(a).tobytes() == np.asarray(b).tobytes()


# ---------------------------------------------------------------- merging into an HF checkpoint

def test_merged_checkpoint_matches_peft_merge(base_dir, tmp_path):
    pm = _peft_folder(base_dir, tmp_path / "adapter")
    want = _logits(pm.merge_and_unload())
    merge_into_hf(base_dir, tmp_path / "adapter", tmp_path / "merged")
    assert np.abs(_logits(_hf(tmp_path / "merged")) - want).max() <= TOL
    # From a model checkpoint and an adapter checkpoint, through the CLI.
    assert convert_cli.main(["hf-to-orbax", str(base_dir), str(tmp_path / "model")]) == 0
    assert convert_cli.main(["peft-to-orbax", str(tmp_path / "adapter"), str(tmp_path / "ad")]) == 0
    assert convert_cli.main(["merge-lora", str(tmp_path / "model"), str(tmp_path / "ad"),
                             str(tmp_path / "merged2")]) == 0
    assert np.abs(_logits(_hf(tmp_path / "merged2")) - want).max() <= TOL
    assert np.abs(want - _logits(_hf(base_dir))).max() > 100 * TOL


# ---------------------------------------------------------------- bad input

@pytest.fixture(scope="module")
def good_folder(tmp_path_factory):
    base = tmp_path_factory.mktemp("base")
    hf_reference_model(CASES["llama"], seed=1).save_pretrained(base)
    out = tmp_path_factory.mktemp("good") / "adapter"
    _peft_folder(base, out)
    return base, out


def _edited(good, tmp_path, *, config=None, drop=None):
    out = tmp_path / "bad"
    shutil.copytree(good, out)
    if config is not None:
        cfg = json.loads((out / "adapter_config.json").read_text())
        cfg.update(config)
        (out / "adapter_config.json").write_text(json.dumps(cfg))
    if drop is not None:
        tensors = load_file(out / "adapter_model.safetensors")
        del tensors[drop]
        save_file(tensors, out / "adapter_model.safetensors", metadata={"format": "pt"})
    return out


V_B1 = "base_model.model.model.layers.1.self_attn.v_proj.lora_B.weight"


@pytest.mark.parametrize("edit, message", [
    ({"config": {"r": 8}}, r"adapter_model.safetensors: tensor 'base_model.model.model.layers.0."
                           r"\w+.\w+.lora_A.weight' has shape \(4, (\d+)\), expected \(8, \1\) "
                           r"\(r=8 in adapter_config.json"),
    ({"config": {"target_modules": ["q_proj", "qkv_proj"]}},
     r"adapter_config.json: field 'target_modules' = \['q_proj', 'qkv_proj'\]: \['qkv_proj'\]"),
    ({"config": {"target_modules": ["q_proj", "v_proj"]}},
     r"adapter_model.safetensors: tensor '.*\.(\w+_proj).lora_A.weight' adapts '\1', which is not "
     r"in adapter_config.json target_modules"),
    ({"config": {"target_modules": ".*proj"}}, r"field 'target_modules' = '.\*proj'; expected a list"),
    ({"config": {"use_dora": True}}, r"field 'use_dora' = True"),
    ({"config": {"task_type": "SEQ_CLS"}}, r"field 'task_type' = 'SEQ_CLS'; expected 'CAUSAL_LM'"),
    ({"config": {"lora_alpha": 0}}, r"field 'lora_alpha' = 0"),
    ({"drop": V_B1}, rf"missing tensor\(s\) \['{V_B1}'\]"),
])
def test_bad_folders_name_file_field_and_value(good_folder, tmp_path, edit, message):
    base, good = good_folder
    bad = _edited(good, tmp_path, **edit)
    with pytest.raises(ConversionError, match=message):
        ours.load_peft(from_pretrained(base), bad)


def test_mismatches_with_the_model(good_folder, tmp_path):
    base, good = good_folder
    other = tmp_path / "other"
    hf_reference_model(dict(CASES["llama"], intermediate_size=80), seed=2).save_pretrained(other)
    with pytest.raises(ConversionError, match=r"down_proj.lora_A.weight' has shape \(4, 96\), "
                                              r"expected \(4, 80\) \(r=4 in adapter_config.json; "
                                              r"the base model's projection sizes\)"):
        ours.load_peft(from_pretrained(other), good)
    adapted = lora.apply_lora(from_pretrained(base), lora.LoraConfig(rank=2, alpha=4.0))
    with pytest.raises(ConversionError, match=r"\(r, scale, targets\) = \(4, 4.0"):
        ours.load_peft(adapted, good)
    with pytest.raises(MissingFileError, match="adapter_config.json: not found"):
        ours.load_peft(from_pretrained(base), base)
    assert convert_cli.main(["merge-lora", str(other), str(good), str(tmp_path / "m")]) == 1
    assert not (tmp_path / "m").exists()
