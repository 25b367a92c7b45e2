"""`tseeds export`: a full-parameter and a LoRA run, both from an HF `model.init` and trained a
few steps with a reward (so the weights move), come out as folders transformers and PEFT on torch
load; their logits equal our `load_run` model's within the HF parity bound (1e-4,
tests/test_hf_parity.py), the weights differ from the initial ones, and the exported tokenizer
encodes the run's prompts (and its chat template renders them) to the ids the run used. A run
whose recorded base is missing or changed does not load, and the error names it. And `tseeds
eval` on one of these runs starts without libtpu's errors on a machine without a TPU."""

import importlib.util
import json
import os
import shutil
import subprocess
import sys

import jax.numpy as jnp
import numpy as np
import peft
import pytest
import torch
import transformers

from tests.trainer_utils import parity_reward, tiny_cd
from tseeds_jax import cli, platforms
from tseeds_jax.data.templates import encode_prompt
from tseeds_jax.hf.testing import hf_reference_model
from tseeds_jax.rl.config import TrainConfig
from tseeds_jax.rl.run.loaded import open_run
from tseeds_jax.rl.run.source import RunSourceError
from tseeds_jax.rl.setup import build_source, load_run, make_trainer

TOL = 1e-4  # tests/test_hf_parity.py
HF = dict(model_type="qwen2", vocab_size=21,  # the run's character tokenizer's
          hidden_size=32, intermediate_size=64,
          num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
          max_position_embeddings=128, tie_word_embeddings=False)
TOKENS = np.random.default_rng(0).integers(0, 21, (2, 11))  # ids of the run's 21-piece tokenizer
LORA = {"lora.rank": 4, "lora.alpha": 8.0, "optim.train_layers": "all"}


def _train(run_dir, base_dir, **overrides):
    cfg = TrainConfig.from_config(tiny_cd(run_dir, steps=2, **{
        "model.init": f"hf:{base_dir}", "optim.lr": 1e-2, **overrides}))
    trainer = make_trainer(cfg, env_overrides={"reward_fn": parity_reward})
    trainer.run()
    return str(run_dir)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("export")
    base = root / "base"
    hf_reference_model(HF, seed=3).save_pretrained(base)
    full = _train(root / "full", base)
    lora = _train(root / "lora", base, **LORA)
    return {"base": base, "full": full, "lora": lora, "root": root}


def _torch_logits(model):
    with torch.no_grad():
        return model(torch.tensor(TOKENS)).logits.float().numpy()


def _ours(run_dir):
    from flax import nnx

    graphdef, params, cfg, tok = load_run(run_dir)
    return np.asarray(nnx.merge(graphdef, params)(jnp.asarray(TOKENS, jnp.int32))), cfg, tok


def _export(run_dir, out, *extra):
    assert cli.main(["export", str(run_dir), str(out), *extra]) == 0
    return out


def _check_tokenizer(out, cfg, tok):
    hf_tok = transformers.AutoTokenizer.from_pretrained(out)
    source = build_source(cfg)
    for i in range(8):
        prompt = source[i]["prompt"]
        want = encode_prompt(tok, cfg.data.template, prompt)
        assert hf_tok.encode(prompt, add_special_tokens=False) == want
        chat = hf_tok.apply_chat_template([{"role": "user", "content": prompt}],
                                          add_generation_prompt=True, tokenize=False)
        assert hf_tok.encode(chat, add_special_tokens=False) == want


def test_full_run_exports_an_hf_folder_transformers_loads(runs, tmp_path):
    out = _export(runs["full"], tmp_path / "hf")
    ours, cfg, tok = _ours(runs["full"])
    theirs = _torch_logits(transformers.AutoModelForCausalLM.from_pretrained(out).eval())
    assert np.abs(ours - theirs).max() <= TOL
    base = _torch_logits(transformers.AutoModelForCausalLM.from_pretrained(runs["base"]).eval())
    assert np.abs(theirs - base).max() > 100 * TOL  # trained: not the initial model
    gen = json.loads((out / "generation_config.json").read_text())
    assert gen["eos_token_id"] == tok.eos_id and gen["max_new_tokens"] == 20
    _check_tokenizer(out, cfg, tok)
    # bfloat16 and sharded: an index and several files, loaded by transformers too
    small = _export(runs["full"], tmp_path / "bf16", "--dtype", "bfloat16",
                    "--max-shard-size", "20000")
    index = json.loads((small / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) > 1
    bf = _torch_logits(transformers.AutoModelForCausalLM.from_pretrained(
        small, dtype=torch.float32).eval())
    assert np.abs(bf - theirs).max() < 0.05


def test_lora_run_exports_peft_and_merged_folders(runs, tmp_path):
    ours, cfg, tok = _ours(runs["lora"])
    adapter = _export(runs["lora"], tmp_path / "peft", "--format", "peft")
    acfg = json.loads((adapter / "adapter_config.json").read_text())
    assert acfg["base_model_name_or_path"] == str(runs["base"])
    base_model = transformers.AutoModelForCausalLM.from_pretrained(runs["base"]).eval()
    base = _torch_logits(base_model)
    peft_model = peft.PeftModel.from_pretrained(base_model, adapter).eval()
    theirs = _torch_logits(peft_model)
    assert np.abs(ours - theirs).max() <= TOL
    assert np.abs(theirs - base).max() > 100 * TOL  # the adapters moved
    _check_tokenizer(adapter, cfg, tok)
    merged = _export(runs["lora"], tmp_path / "merged", "--format", "merged")
    got = _torch_logits(transformers.AutoModelForCausalLM.from_pretrained(merged).eval())
    assert np.abs(ours - got).max() <= TOL


def test_export_refuses_what_it_cannot_write(runs, tmp_path, capsys):
    assert cli.main(["export", runs["full"], str(tmp_path / "x"), "--format", "peft"]) == 1
    assert "needs a LoRA run" in capsys.readouterr().err
    assert cli.main(["export", runs["full"] + "@99", str(tmp_path / "y")]) == 1
    assert "no checkpoint for step 99" in capsys.readouterr().err


def test_a_missing_or_changed_base_stops_the_load_naming_it(runs, tmp_path, capsys):
    meta = open_run(runs["lora"]).meta["model_source"]
    assert meta["kind"] == "hf" and meta["path"] == str(runs["base"])
    base = runs["base"]
    aside = runs["root"] / "aside"
    os.replace(base, aside)
    try:
        with pytest.raises(RunSourceError, match=f"base model hf:{base} is missing"):
            load_run(runs["lora"])
        capsys.readouterr()
        assert cli.main(["eval", runs["lora"], "--n", "1", "--problems", "1"]) == 2
        assert cli.main(["export", runs["lora"], str(tmp_path / "out")]) == 1
        err = capsys.readouterr().err
        assert err.count(f"base model hf:{base} is missing") == 2, err
        assert not (tmp_path / "out").exists()
    finally:
        os.replace(aside, base)
    weights = base / "model.safetensors"
    keep = runs["root"] / "weights.bak"
    shutil.copy2(weights, keep)
    try:
        data = bytearray(weights.read_bytes())
        data[-8:] = bytes(8)  # the last weights' bytes: another model, same shapes
        weights.write_bytes(bytes(data))
        with pytest.raises(RunSourceError, match="meta model_source.*sha256"):
            load_run(runs["lora"])
    finally:
        shutil.copy2(keep, weights)
    load_run(runs["lora"])  # restored: loads again


LIBTPU_LINES = ("TPU_ACCELERATOR_TYPE", "TPU_WORKER_HOSTNAMES", "E0000")


def _eval_stderr(runs, code):
    env = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}
    env["PYTHONPATH"] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    p = subprocess.run([sys.executable, "-c", code, runs["full"], "--n", "1", "--problems", "2"],
                       env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "pass@1" in p.stdout
    return p.stderr


@pytest.mark.slow  # two subprocesses (~25 s each on 2 busy cores)
def test_cpu_commands_start_without_libtpu_errors(runs):
    """`tseeds eval` in a subprocess without JAX_PLATFORMS, on this machine without a TPU:
    libtpu is not probed (tseeds_jax/platforms.py). Where libtpu is installed, the same
    evaluation run past the command's platform choice prints its errors: the check is real."""
    if platforms.tpu_attached():
        pytest.skip("a TPU is attached: libtpu is meant to initialise")
    err = _eval_stderr(runs, "import sys; from tseeds_jax import cli; "
                             "sys.exit(cli.main(['eval'] + sys.argv[1:]))")
    assert not [line for line in LIBTPU_LINES if line in err], err[-2000:]
    if importlib.util.find_spec("libtpu") is not None:
        raw = _eval_stderr(runs, "import sys; from tseeds_jax.eval.cli import main; "
                                 "sys.exit(main(sys.argv[1:]))")
        assert any(line in raw for line in LIBTPU_LINES)


def test_choose_platform_leaves_tpus_gpus_and_explicit_choices_alone(tmp_path, monkeypatch):
    monkeypatch.setattr(platforms, "_installed", lambda name: name == "libtpu")
    dev = tmp_path / "dev"
    dev.mkdir()
    env = {}
    assert platforms.choose_platform("eval", env, str(dev)) == "cpu" and env == {
        "JAX_PLATFORMS": "cpu"}
    assert platforms.choose_platform("compile", {}, str(dev)) is None  # libtpu compiles there
    assert platforms.choose_platform("eval", {"JAX_PLATFORMS": "tpu"}, str(dev)) is None
    assert platforms.choose_platform("eval", {"TPU_NAME": "v5p-8"}, str(dev)) is None
    (dev / "vfio").mkdir()
    (dev / "vfio" / "vfio").touch()  # the control node alone: no TPU
    assert platforms.choose_platform("train", {}, str(dev)) == "cpu"
    (dev / "vfio" / "0").touch()
    assert platforms.choose_platform("train", {}, str(dev)) is None
    monkeypatch.setattr(platforms, "_installed", lambda name: False)  # no libtpu: nothing to quiet
    assert platforms.choose_platform("train", {}, str(tmp_path)) is None


def test_serve_run_loads_the_evaluated_model_with_its_tokenizer_and_template(runs):
    from tseeds_jax.export.serve_cli import load_run_model

    model, tok, template = load_run_model(runs["lora"] + "@2")
    ours, cfg, run_tok = _ours(runs["lora"])
    got = np.asarray(model(jnp.asarray(TOKENS, jnp.int32)))
    assert np.abs(got - ours).max() == 0.0
    assert template == cfg.data.template and tok.encode("1+2") == run_tok.encode("1+2")
