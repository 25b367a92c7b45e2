"""Every shipped config (configs/*.py, every variant it declares) parses and validates."""

import glob
import importlib.util
import os

import pytest
from absl import flags
from ml_collections import config_flags

from tseeds_jax.rl.config import TrainConfig

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIGS = sorted(glob.glob(os.path.join(ROOT, "configs", "*.py")))


def _variants(path):
    spec = importlib.util.spec_from_file_location("cfg_" + os.path.basename(path)[:-3], path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert callable(getattr(mod, "get_config", None)), f"{path}: no get_config()"
    return [None] + sorted(getattr(mod, "VARIANTS", {}))


def _load_with_config_flags(arg):
    """The same machinery as `tseeds train --config FILE[:VARIANT]`."""
    fv = flags.FlagValues()
    config_flags.DEFINE_config_file("config", None, "config", flag_values=fv, lock_config=True)
    fv(["prog", f"--config={arg}"])
    return fv.config


def test_configs_found():
    assert len(CONFIGS) >= 3


@pytest.mark.parametrize("path", CONFIGS, ids=os.path.basename)
def test_config_parses_and_validates(path):
    assert (open(path).read().lstrip().startswith('"""')), f"{path}: needs a docstring"
    for variant in _variants(path):
        arg = path if variant is None else f"{path}:{variant}"
        cd = _load_with_config_flags(arg)
        cfg = TrainConfig.from_config(cd)
        assert cfg.rollout.batch_prompts >= 1


@pytest.mark.parametrize("name,accel,tokens", [
    ("qwen25_math_7b_dapo17k.py", "v5p-64", 4096),
    ("r1_distill_qwen_1p5b_openr1.py", "v6e-64", 1024 + 8192),
    ("qwen3_4b_thinking_code.py", "v5p-128", 2048 + 16384),
])
def test_paper_scale_settings(name, accel, tokens):
    """Section 5.1 values: batch 32, G 8, clip-high 0.28, ratio 0.3, T 8, DAPO clip_c 10."""
    cfg = TrainConfig.from_config(_load_with_config_flags(os.path.join(ROOT, "configs", name)))
    assert cfg.hardware.accelerator == accel
    assert cfg.data.max_prompt_len + cfg.rollout.max_response_len == tokens
    assert (cfg.rollout.batch_prompts, cfg.rollout.group_size) == (32, 8)
    assert (cfg.loss.clip_low, cfg.loss.clip_high, cfg.loss.clip_c) == (0.2, 0.28, 10.0)
    assert (cfg.seeds.refresh_interval, cfg.seeds.ratio) == (8, 0.3)
    assert (cfg.optim.lr, cfg.optim.weight_decay, cfg.optim.grad_clip) == (1e-6, 0.1, 1.0)
    assert cfg.model.remat and cfg.model.dtype == "bfloat16"
    assert cfg.model.init.startswith("hf:") and cfg.tokenizer.startswith("hf:")
    # One sequence per device per micro-step on the batch axes.
    assert cfg.optim.micro_batch_size == cfg.mesh["data"] * cfg.mesh["fsdp"]


def test_config_variant_override_and_bad_variant():
    path = os.path.join(ROOT, "configs", "qwen25_math_7b_dapo17k.py")
    cd = _load_with_config_flags(f"{path}:gpu")
    assert cd.hardware.accelerator == "8xH100"
    with pytest.raises(Exception, match="unknown variant 'v9'; known: \\['gpu', 'tpu'\\]"):
        _load_with_config_flags(f"{path}:v9")
