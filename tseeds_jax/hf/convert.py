"""HF folder (config.json + safetensors) <-> our `Transformer`, streaming tensor by tensor.

Loading reads the headers first and checks every tensor name and shape against config.json
before any weight is read, so a mismatch fails fast with the file, tensor and config fields
named. Then each tensor is read, re-laid out (transpose/reshape, exact), cast to the requested
dtype and placed on its device (or mesh sharding) before the next one is read: peak host memory
is the parameters once plus one tensor in flight.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path

import jax
import numpy as np
from flax import nnx

import tseeds_jax.hf.safetensors_io as st
from tseeds_jax.hf.errors import ConversionError, MissingFileError
from tseeds_jax.hf.files import atomic_output_dir, copy_tokenizer_files
from tseeds_jax.hf.mapping import (
    IGNORED_SUFFIXES,
    TensorSpec,
    config_summary,
    get_path,
    set_path,
    tensor_specs,
)
from tseeds_jax.model.config import ModelConfig
from tseeds_jax.model.sharding import abstract_model, pure_shardings
from tseeds_jax.model.transformer import Transformer

log = logging.getLogger(__name__)

CONFIG_FILE = "config.json"
DEFAULT_MAX_SHARD_SIZE = "5GB"


def load_config(path: str | os.PathLike, *, dtype: str = "float32", compute_dtype: str | None = None,
                remat: bool = False, attention_impl: str = "auto",
                decode_attention_impl: str = "auto", kv_cache_dtype: str = "auto") -> ModelConfig:
    """ModelConfig from `path/config.json` with our run settings (param/compute dtype, remat,
    attention implementation)."""
    path = Path(path)
    if not path.is_dir():
        raise MissingFileError(f"{path}: model folder does not exist")
    st.np_dtype(dtype)  # validates the name
    if compute_dtype is not None:
        st.np_dtype(compute_dtype)
    file = path / CONFIG_FILE
    if not file.is_file():
        raise MissingFileError(f"{file}: config.json not found")
    return ModelConfig.from_hf_file(file, param_dtype=dtype, dtype=compute_dtype or dtype,
                                    remat=remat, attention_impl=attention_impl,
                                    decode_attention_impl=decode_attention_impl,
                                    kv_cache_dtype=kv_cache_dtype)


def hf_config_dict(cfg: ModelConfig, dtype: str) -> dict:
    """config.json contents: `cfg.to_hf_dict()` plus the transformers>=5 spellings of the
    weight dtype and RoPE settings (older readers use the legacy keys, newer ones these)."""
    out = cfg.to_hf_dict()
    out["torch_dtype"] = dtype
    out["dtype"] = dtype
    rope = {"rope_theta": cfg.rope_theta, "rope_type": "default"}
    if cfg.rope_scaling_dict:
        rope.update(cfg.rope_scaling_dict)
        rope["rope_type"] = rope.pop("type", rope.get("rope_type", "default"))
    out["rope_parameters"] = rope
    return out


def check_weights(path: str | os.PathLike, cfg: ModelConfig) -> tuple[dict[str, Path], list[TensorSpec]]:
    """(tensor -> file, specs to load); raises ConversionError on any name/shape/dtype mismatch."""
    path = Path(path)
    files = st.weight_files(path)
    found = st.headers(files)
    specs = tensor_specs(cfg)
    expected = {s.hf_name for s in specs}
    cfg_file = path / CONFIG_FILE
    where = f"{cfg_file} ({config_summary(cfg)})"

    missing = [s.hf_name for s in specs if s.hf_name not in found]
    if missing:
        raise ConversionError(f"{path}: missing tensor(s) {_first(missing)} that {where} requires")
    ignored = [n for n in found if n.endswith(IGNORED_SUFFIXES)]
    if cfg.tie_word_embeddings and "lm_head.weight" in found:
        # Some tied checkpoints store a copy of the embedding as the head; HF ignores it. A head
        # that differs means the config is wrong, and ignoring it would silently lose weights.
        _check_tied_head(files, found, where)
        ignored.append("lm_head.weight")
    unexpected = sorted(set(found) - expected - set(ignored))
    if unexpected:
        raise ConversionError(f"{files[unexpected[0]]}: unexpected tensor(s) {_first(unexpected)} "
                              f"not used by {where}")
    bad = []
    for s in specs:
        tag, shape = found[s.hf_name]
        st.st_dtype(tag, where=f"{files[s.hf_name]}: tensor {s.hf_name!r}")
        if shape != s.hf_shape:
            bad.append(f"{s.hf_name!r} in {files[s.hf_name].name} has shape {shape}, "
                       f"expected {s.hf_shape}")
    if bad:
        raise ConversionError(f"{path}: tensor shape(s) do not match {where}: " + "; ".join(bad[:5])
                              + (f"; ... ({len(bad)} in all)" if len(bad) > 5 else ""))
    return files, specs


def _check_tied_head(files, found, where) -> None:
    emb, head = "model.embed_tokens.weight", "lm_head.weight"
    same = emb in found and found[emb] == found[head]
    if same:
        arrays = dict(st.iter_tensors(files, [emb, head]))
        same = np.array_equal(arrays[emb], arrays[head])
    if not same:
        raise ConversionError(f"{files[head]}: tensor {head!r} differs from {emb!r} but {where} "
                              "says tie_word_embeddings=True (the head would be dropped)")


def _first(names: list[str], n: int = 5) -> str:
    shown = ", ".join(repr(x) for x in names[:n])
    return shown + (f", ... ({len(names)} in all)" if len(names) > n else "")


def read_params(path: str | os.PathLike, cfg: ModelConfig, *, shardings=None) -> dict:
    """Parameters of the HF folder `path` as a nested dict (the `nnx.to_pure_dict` layout).

    Each array is cast to `cfg.param_dtype` and placed before the next one is read.
    shardings: None (default device), one `jax.sharding.Sharding` for every array, or a nested
    dict of shardings with the parameter layout (e.g. `pure_shardings(...)`) to place each
    tensor directly on a mesh.
    """
    files, specs = check_weights(path, cfg)
    target = st.np_dtype(cfg.param_dtype)
    by_name = {s.hf_name: s for s in specs}
    params: dict = {}
    for name, raw in st.iter_tensors(files, [s.hf_name for s in specs]):
        spec = by_name[name]
        arr = spec.to_ours(raw).astype(target, copy=False)
        del raw
        if shardings is None or isinstance(shardings, jax.sharding.Sharding):
            sharding = shardings
        else:
            sharding = get_path(shardings, spec.path)
        set_path(params, spec.path, jax.device_put(arr, sharding))
        del arr
    return params


def model_from_params(cfg: ModelConfig, params: Mapping) -> Transformer:
    """A `Transformer` holding `params` (nested dict of arrays, `nnx.to_pure_dict` layout)."""
    graphdef, state = nnx.split(abstract_model(cfg))
    try:
        nnx.replace_by_pure_dict(state, params)
    except (KeyError, ValueError) as e:
        raise ConversionError(
            f"parameters do not match the model of {config_summary(cfg)}: {e}") from None
    return nnx.merge(graphdef, state)


def params_of(model: Transformer) -> dict:
    """The model's parameters as a nested dict of arrays (`nnx.to_pure_dict` layout)."""
    return nnx.to_pure_dict(nnx.state(model, nnx.Param))


def from_pretrained(path: str | os.PathLike, dtype: str = "float32", *, mesh=None, rules=None,
                    compute_dtype: str | None = None, remat: bool = False,
                    attention_impl: str = "auto", decode_attention_impl: str = "auto",
                    kv_cache_dtype: str = "auto") -> Transformer:
    """Loads an HF folder (config.json + model.safetensors or sharded + index) as a `Transformer`.

    dtype: parameter dtype ("float32", "bfloat16", "float16"), also the compute dtype unless
    `compute_dtype` is given. Weights stored in another dtype are cast (bf16 -> f32 is exact).
    mesh: place parameters directly on this mesh per the sharding rules table.
    The result is callable as `model(tokens_BT) -> logits_BTV` (float32).
    """
    cfg = load_config(path, dtype=dtype, compute_dtype=compute_dtype, remat=remat,
                      attention_impl=attention_impl,
                      decode_attention_impl=decode_attention_impl, kv_cache_dtype=kv_cache_dtype)
    shardings = None
    if mesh is not None:
        shardings = pure_shardings(nnx.state(abstract_model(cfg)), mesh, rules)
    params = read_params(path, cfg, shardings=shardings)
    return model_from_params(cfg, params)


def write_params(params: Mapping, cfg: ModelConfig, out_dir: str | os.PathLike, *,
                 dtype: str | None = None, max_shard_size: int | str = DEFAULT_MAX_SHARD_SIZE) -> list[str]:
    """Writes config.json and safetensors (sharded above `max_shard_size`) into `out_dir`.

    dtype: stored dtype; None keeps the parameters' own dtype. Streams one tensor at a time.
    """
    out_dir = Path(out_dir)
    limit = st.parse_size(max_shard_size)
    specs = tensor_specs(cfg)
    leaves = [get_path(params, s.path) for s in specs]
    for s, leaf in zip(specs, leaves):
        if tuple(leaf.shape) != s.shape:
            raise ConversionError(f"parameter {'/'.join(map(str, s.path))} has shape "
                                  f"{tuple(leaf.shape)}, expected {s.shape} ({config_summary(cfg)})")
    dtypes = {np.dtype(leaf.dtype) for leaf in leaves}
    if dtype is None:
        if len(dtypes) != 1:
            raise ValueError(f"parameters have mixed dtypes {sorted(map(str, dtypes))}; pass dtype=")
        out_dt = dtypes.pop()
    else:
        out_dt = st.np_dtype(dtype)

    def producer(spec: TensorSpec, leaf):
        def produce():
            host = np.asarray(jax.device_get(leaf))  # gathers a sharded array to host
            return spec.to_hf(host.astype(out_dt, copy=False))
        return produce

    items = [st.planned(s.hf_name, out_dt, s.hf_shape, producer(s, leaf))
             for s, leaf in zip(specs, leaves)]
    names = st.write_safetensors(out_dir, items, limit)
    config = hf_config_dict(cfg, st.dtype_name(out_dt))
    (out_dir / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n")
    return names + [CONFIG_FILE]


def save_pretrained(model: Transformer, path: str | os.PathLike, *, dtype: str | None = None,
                    max_shard_size: int | str = DEFAULT_MAX_SHARD_SIZE,
                    tokenizer_from: str | os.PathLike | None = None,
                    overwrite: bool = False) -> Path:
    """Writes `model` as an HF folder that `transformers.AutoModelForCausalLM` loads.

    dtype: stored dtype (default: the parameters' dtype). max_shard_size: bytes or "5GB"; above
    it the weights go to `model-0000i-of-0000n.safetensors` plus an index. tokenizer_from: a
    folder whose tokenizer/generation files are copied along. The folder appears complete or
    not at all (written next to `path`, then renamed).
    """
    if not isinstance(model, Transformer):
        raise TypeError(f"model must be a tseeds_jax Transformer, got {type(model).__name__}")
    with atomic_output_dir(path, overwrite=overwrite) as tmp:
        write_params(params_of(model), model.cfg, tmp, dtype=dtype, max_shard_size=max_shard_size)
        if tokenizer_from is not None:
            copy_tokenizer_files(tokenizer_from, tmp)
    return Path(path)
