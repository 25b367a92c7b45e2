"""`config.model`'s run settings (compute dtype, remat, attention kernel) reach the model whatever
the weights' source: random init, an HF folder or a tseeds model checkpoint. The paper configs
load `hf:DIR` with float32 master weights, bfloat16 compute and remat; `tseeds compile` builds its
programs from the same settings (TrainModelConfig.model_config), so the trainer must too."""

import pytest

from tseeds_jax.hf import hf_to_orbax
from tseeds_jax.hf.testing import write_random_hf_folder
from tseeds_jax.model import ConfigError, ModelConfig
from tseeds_jax.rl.config import TrainConfig, default_config
from tseeds_jax.rl.setup import build_model

ARCH = dict(model_type="qwen2", vocab_size=64, hidden_size=16, intermediate_size=32,
            num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1)


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("hf")
    write_random_hf_folder(ModelConfig(**ARCH), path, seed=0)
    return path


def _config(init, **model):
    cd = default_config()
    cd.model.init = init
    cd.model.arch.update(ARCH)
    cd.model.param_dtype = "float32"
    cd.model.dtype = "bfloat16"
    cd.model.remat = True
    cd.model.attention_impl = "chunked"
    for k, v in model.items():
        cd.model[k] = v
    return cd


@pytest.mark.parametrize("source", ["random", "hf", "orbax"])
def test_run_settings_reach_the_model(source, hf_dir, tmp_path):
    init = {"random": "random", "hf": f"hf:{hf_dir}"}.get(source)
    if source == "orbax":
        hf_to_orbax(hf_dir, tmp_path / "ckpt")
        init = f"orbax:{tmp_path / 'ckpt'}"
    cd = _config(init)
    model = build_model(TrainConfig.from_config(cd), vocab_size=64)
    got = model.cfg
    assert (got.param_dtype, got.dtype, got.remat, got.attention_impl) == (
        "float32", "bfloat16", True, "chunked")
    # what `tseeds plan` / `tseeds compile` build for the same config
    planned = TrainConfig.from_config(cd).model.model_config()
    assert (planned.dtype, planned.remat, planned.attention_impl) == (got.dtype, got.remat,
                                                                      got.attention_impl)


def test_bad_attention_impl_names_the_field(hf_dir):
    cd = _config(f"hf:{hf_dir}", attention_impl="flash")
    with pytest.raises(ConfigError, match="attention_impl.*flash"):
        build_model(TrainConfig.from_config(cd), vocab_size=64)
