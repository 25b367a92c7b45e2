"""Model checkpoints in Orbax form, and conversion between them and HF folders.

A model checkpoint folder (what `tseeds convert hf-to-orbax` writes):

    DIR/config.json      HF config.json of the architecture (with the stored dtype)
    DIR/params/          `tseeds_jax.checkpoint.save_pytree`: the parameter dict (nnx pure-dict
                         layout) + meta {"format", "version", "model_config"}
    DIR/<tokenizer files> copied from the HF folder (tokenizer.json, generation_config.json...)

so that `orbax-to-hf` can rebuild the HF folder and a trainer can start from it
(`load_checkpoint_model(DIR, mesh=mesh)` restores every tensor straight onto its sharding).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import jax
from flax import nnx

import tseeds_jax.hf.safetensors_io as st
from tseeds_jax import checkpoint
from tseeds_jax.hf.convert import (
    CONFIG_FILE,
    DEFAULT_MAX_SHARD_SIZE,
    check_weights,
    hf_config_dict,
    load_config,
    model_from_params,
    params_of,
    read_params,
    write_params,
)
from tseeds_jax.hf.errors import ConversionError, MissingFileError
from tseeds_jax.hf.files import atomic_output_dir, copy_tokenizer_files
from tseeds_jax.model.config import ModelConfig
from tseeds_jax.model.sharding import abstract_model, pure_shardings
from tseeds_jax.model.transformer import Transformer

PARAMS_DIR = "params"
FORMAT = "tseeds_jax.model_checkpoint"
VERSION = 1


def _host_sharding() -> jax.sharding.SingleDeviceSharding:
    """The host CPU device: conversion never needs (or fits on) an accelerator."""
    try:
        device = jax.local_devices(backend="cpu")[0]
    except RuntimeError:
        device = jax.devices()[0]
    return jax.sharding.SingleDeviceSharding(device)


def stored_dtype(hf_dir: str | os.PathLike) -> str:
    """The single float dtype of an HF folder's weights ("float32", "bfloat16", ...)."""
    found = st.headers(st.weight_files(hf_dir))
    tags = {tag for tag, _ in found.values()}
    if len(tags) != 1:
        raise ConversionError(f"{hf_dir}: weights have mixed dtypes {sorted(tags)}; pass dtype=")
    return st.dtype_name(st.st_dtype(tags.pop(), where=str(hf_dir)))


def _write_checkpoint(tmp: Path, params, cfg: ModelConfig, dtype: str) -> None:
    hf_cfg = hf_config_dict(cfg, dtype)
    meta = {"format": FORMAT, "version": VERSION, "model_config": hf_cfg}
    # Uncompressed: weights barely compress, and compression buffers would cost host memory.
    checkpoint.save_pytree(tmp / PARAMS_DIR, params, meta, compress=False)
    (tmp / CONFIG_FILE).write_text(json.dumps(hf_cfg, indent=2) + "\n")


def hf_to_orbax(hf_dir: str | os.PathLike, out_dir: str | os.PathLike, *, dtype: str | None = None,
                overwrite: bool = False) -> Path:
    """Converts an HF folder into a model checkpoint folder (layout in the module doc).

    dtype: stored parameter dtype; None keeps the HF weights' dtype. Tensors stream from the
    safetensors files into host CPU arrays one at a time (the parameters are held once), then
    Orbax writes them.
    """
    dtype = dtype or stored_dtype(hf_dir)
    cfg = load_config(hf_dir, dtype=dtype)
    check_weights(hf_dir, cfg)  # fail before creating anything
    with atomic_output_dir(out_dir, overwrite=overwrite) as tmp:
        # Host CPU arrays: Orbax writes jax arrays without another host copy (numpy leaves
        # cost an extra copy of everything in flight).
        params = read_params(hf_dir, cfg, shardings=_host_sharding())
        _write_checkpoint(tmp, params, cfg, dtype)
        del params
        copy_tokenizer_files(hf_dir, tmp)
    return Path(out_dir)


def save_checkpoint_model(model: Transformer, out_dir: str | os.PathLike, *,
                          tokenizer_from: str | os.PathLike | None = None,
                          overwrite: bool = False) -> Path:
    """Writes `model` as a model checkpoint folder (what `hf_to_orbax` produces)."""
    if not isinstance(model, Transformer):
        raise TypeError(f"model must be a tseeds_jax Transformer, got {type(model).__name__}")
    with atomic_output_dir(out_dir, overwrite=overwrite) as tmp:
        _write_checkpoint(tmp, params_of(model), model.cfg, model.cfg.param_dtype)
        if tokenizer_from is not None:
            copy_tokenizer_files(tokenizer_from, tmp)
    return Path(out_dir)


def _checkpoint_config(ckpt_dir: Path, **run) -> ModelConfig:
    if not (ckpt_dir / PARAMS_DIR).is_dir():
        raise MissingFileError(f"{ckpt_dir / PARAMS_DIR}: not found; {ckpt_dir} is not a model "
                               "checkpoint folder written by `tseeds convert hf-to-orbax`")
    meta = checkpoint.read_meta(ckpt_dir / PARAMS_DIR)
    if meta.get("format") != FORMAT:
        raise ConversionError(f"{ckpt_dir / PARAMS_DIR}: meta format={meta.get('format')!r}, "
                              f"expected {FORMAT!r}")
    hf_cfg = meta["model_config"]
    dtype = run.pop("dtype", None) or hf_cfg.get("torch_dtype") or "float32"
    return ModelConfig.from_hf_dict(hf_cfg, source=f"{ckpt_dir / PARAMS_DIR} meta.model_config",
                                    param_dtype=dtype, dtype=run.pop("compute_dtype") or dtype,
                                    **run)


def load_checkpoint_model(ckpt_dir: str | os.PathLike, *, dtype: str | None = None, mesh=None,
                          rules=None, compute_dtype: str | None = None, remat: bool = False,
                          attention_impl: str = "auto", decode_attention_impl: str = "auto",
                          kv_cache_dtype: str = "auto",
                          device: jax.Device | None = None) -> Transformer:
    """A `Transformer` from a model checkpoint folder, restored straight onto `mesh` (or one
    device: `device`, default the first default device). dtype: None keeps the stored one."""
    ckpt_dir = Path(ckpt_dir)
    if dtype is not None:
        st.np_dtype(dtype)
    cfg = _checkpoint_config(ckpt_dir, dtype=dtype, compute_dtype=compute_dtype, remat=remat,
                             attention_impl=attention_impl,
                             decode_attention_impl=decode_attention_impl,
                             kv_cache_dtype=kv_cache_dtype)
    abstract = nnx.state(abstract_model(cfg))
    if mesh is not None:
        shardings = pure_shardings(abstract, mesh, rules)
    else:
        shardings = jax.sharding.SingleDeviceSharding(device or jax.devices()[0])
    target = checkpoint.abstract_target(nnx.to_pure_dict(abstract), shardings)
    params, _ = checkpoint.restore_pytree(ckpt_dir / PARAMS_DIR, target)
    return model_from_params(cfg, params)


def orbax_to_hf(ckpt_dir: str | os.PathLike, out_dir: str | os.PathLike, *, dtype: str | None = None,
                max_shard_size: int | str = DEFAULT_MAX_SHARD_SIZE, overwrite: bool = False) -> Path:
    """Rebuilds an HF folder (config.json, safetensors, tokenizer files) from a model checkpoint
    folder. dtype: stored dtype of the HF weights; None keeps the checkpoint's."""
    ckpt_dir = Path(ckpt_dir)
    model = load_checkpoint_model(ckpt_dir, device=_host_sharding().device_set.pop())
    with atomic_output_dir(out_dir, overwrite=overwrite) as tmp:
        write_params(params_of(model), model.cfg, tmp, dtype=dtype, max_shard_size=max_shard_size)
        copy_tokenizer_files(ckpt_dir, tmp)
    return Path(out_dir)
