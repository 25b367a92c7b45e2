"""Local random HF model folders for tests and benchmarks (nothing is downloaded).

`write_random_hf_folder` writes an HF-format folder tensor by tensor with the streaming
safetensors writer (no torch; memory stays at one tensor, so it can build large folders).
`hf_reference_model` builds a `transformers` model from a config dict with torch, with norm
weights and biases randomised (HF initialises them to 1 and 0, which would hide mapping bugs).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

import tseeds_jax.hf.safetensors_io as st
from tseeds_jax.hf.convert import CONFIG_FILE, hf_config_dict
from tseeds_jax.hf.mapping import tensor_specs
from tseeds_jax.model.config import ModelConfig


def write_random_hf_folder(cfg: ModelConfig, path: str | os.PathLike, *, dtype: str = "float32",
                           seed: int = 0, max_shard_size: int | str = "5GB") -> int:
    """Writes config.json + safetensors of random weights for `cfg`; returns the weight bytes."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    out_dt = st.np_dtype(dtype)
    items = []
    for i, spec in enumerate(tensor_specs(cfg)):
        def produce(spec=spec, i=i):
            rng = np.random.default_rng([seed, i])
            scale = 1.0 if len(spec.hf_shape) == 1 else 0.02
            base = 1.0 if spec.hf_name.endswith("norm.weight") else 0.0
            x = base + scale * rng.standard_normal(spec.hf_shape, dtype=np.float32)
            return x.astype(out_dt)
        items.append(st.planned(spec.hf_name, out_dt, spec.hf_shape, produce))
    st.write_safetensors(path, items, st.parse_size(max_shard_size))
    (path / CONFIG_FILE).write_text(json.dumps(hf_config_dict(cfg, dtype), indent=2) + "\n")
    return sum(it.nbytes for it in items)


def hf_reference_model(hf_config: dict, *, seed: int = 0, torch_dtype=None):
    """A random `transformers` causal LM (eval mode) with randomised norms and biases."""
    # torch and transformers are test-only packages (requirements-test.txt), never runtime ones.
    try:
        import torch
        import transformers
    except ImportError as e:
        raise ImportError(f"hf_reference_model needs torch and transformers ({e}); install the "
                          "test packages: pip install -r requirements-test.txt") from e

    torch.manual_seed(seed)
    config = transformers.AutoConfig.for_model(**hf_config)
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.add_(0.2 * torch.randn_like(p))
    if torch_dtype is not None:
        model = model.to(torch_dtype)
    return model
