"""Orbax adapter checkpoints, their conversion from/to PEFT folders, and merging adapters into a
full HF checkpoint.

An adapter checkpoint folder (what `tseeds convert peft-to-orbax` writes):

    DIR/adapters/   `tseeds_jax.checkpoint.save_pytree`: the adapters (`lora.adapter_params`
                    layout) + meta {"format", "version", "lora_config", "layers", "features"
                    (target -> [I, O]), "base_model_name_or_path"}

Letters: R rank, I / O an adapter's input / output features, L layers.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import jax
import numpy as np

import tseeds_jax.hf.peft as peft
import tseeds_jax.hf.safetensors_io as st
from tseeds_jax import checkpoint
from tseeds_jax.hf.convert import CONFIG_FILE, check_weights, hf_config_dict, load_config, write_params
from tseeds_jax.hf.errors import ConversionError, MissingFileError
from tseeds_jax.hf.files import atomic_output_dir, copy_tokenizer_files
from tseeds_jax.hf.orbax_io import PARAMS_DIR, load_checkpoint_model, stored_dtype
from tseeds_jax.model.config import ModelConfig
from tseeds_jax.model.lora import TARGETS, LoraConfig, adapter_features, base_params, merge_params

ADAPTERS_DIR = "adapters"
FORMAT = "tseeds_jax.lora_checkpoint"
VERSION = 1


def _host():
    try:
        return jax.sharding.SingleDeviceSharding(jax.local_devices(backend="cpu")[0])
    except RuntimeError:
        return jax.sharding.SingleDeviceSharding(jax.devices()[0])


def _shapes(adapters) -> tuple[int, dict[str, list[int]]]:
    """(L, target -> [I, O]) of an adapter pytree; every layer must hold the same adapters."""
    layers = adapters["layers"]
    feats: dict[str, list[int]] = {}
    for i in sorted(layers):
        for mods in layers[i].values():
            for target, ab in mods["lora"].items():
                io = [int(ab["lora_a"].shape[0]), int(ab["lora_b"].shape[1])]
                if feats.setdefault(target, io) != io:
                    raise ValueError(f"adapters: layer {i} {target} has sizes {io}, layer 0 "
                                     f"{feats[target]}")
    return len(layers), feats


def save_adapter_checkpoint(adapters, lcfg: LoraConfig, out_dir: str | os.PathLike, *,
                            base_model_name_or_path: str | None = None,
                            overwrite: bool = False) -> Path:
    """Writes an adapter checkpoint folder (layout in the module doc); the adapters' dtype must
    be `lcfg.param_dtype` (what a restore asks for)."""
    n, feats = _shapes(adapters)
    dtypes = sorted({st.dtype_name(x.dtype) for x in jax.tree.leaves(adapters)})
    if dtypes != [lcfg.param_dtype]:
        raise ValueError(f"adapters have dtype(s) {dtypes}, but lora_config.param_dtype is "
                         f"{lcfg.param_dtype!r}")
    meta = {"format": FORMAT, "version": VERSION, "lora_config": dataclasses.asdict(lcfg),
            "layers": n, "features": feats, "base_model_name_or_path": base_model_name_or_path}
    with atomic_output_dir(out_dir, overwrite=overwrite) as tmp:
        checkpoint.save_pytree(tmp / ADAPTERS_DIR, adapters, meta, compress=False)
    return Path(out_dir)


def _lora_config(meta: dict, where: str) -> LoraConfig:
    raw = dict(meta.get("lora_config") or {})
    if "targets" in raw:
        raw["targets"] = tuple(raw["targets"])
    try:
        return LoraConfig(**raw)
    except (TypeError, ValueError) as e:
        raise ConversionError(f"{where}: meta lora_config {meta.get('lora_config')!r}: {e}") from None


def load_adapter_checkpoint(ckpt_dir: str | os.PathLike, cfg: ModelConfig | None = None):
    """(LoraConfig, adapters, meta) of an adapter checkpoint folder, restored to the host CPU;
    with `cfg`, its layer count and projection sizes must match."""
    where = Path(ckpt_dir) / ADAPTERS_DIR
    if not where.is_dir():
        raise MissingFileError(f"{where}: not found; {ckpt_dir} is not an adapter checkpoint "
                               "folder written by `tseeds convert peft-to-orbax`")
    meta = checkpoint.read_meta(where)
    if meta.get("format") != FORMAT:
        raise ConversionError(f"{where}: meta format={meta.get('format')!r}, expected {FORMAT!r}")
    lcfg = _lora_config(meta, str(where))
    n, feats = meta["layers"], meta["features"]
    if sorted(feats) != sorted(lcfg.targets):
        raise ConversionError(f"{where}: meta features {sorted(feats)} do not match lora_config "
                              f"targets {list(lcfg.targets)}")
    if cfg is not None:
        if n != cfg.num_hidden_layers:
            raise ConversionError(f"{where}: adapters for {n} layers, the model has "
                                  f"num_hidden_layers={cfg.num_hidden_layers}")
        for t, io in feats.items():
            if tuple(io) != adapter_features(cfg, t):
                raise ConversionError(f"{where}: {t} adapters of sizes {tuple(io)}, the model's "
                                      f"{t} projection is {adapter_features(cfg, t)}")
    dt, host, r = np.dtype(st.np_dtype(lcfg.param_dtype)), _host(), lcfg.rank
    target = {"layers": {i: {} for i in range(n)}}
    for i in range(n):
        for t in lcfg.targets:
            (ni, no), sub = feats[t], TARGETS[t][0]
            target["layers"][i].setdefault(sub, {"lora": {}})["lora"][t] = {
                "lora_a": jax.ShapeDtypeStruct((ni, r), dt, sharding=host),
                "lora_b": jax.ShapeDtypeStruct((r, no), dt, sharding=host)}
    adapters, _ = checkpoint.restore_pytree(where, target)
    return lcfg, adapters, meta


def peft_to_orbax(peft_dir, out_dir, *, dtype: str | None = None, overwrite: bool = False) -> Path:
    """PEFT folder -> adapter checkpoint folder. dtype: stored dtype (default float32)."""
    lcfg, adapters = peft.read_peft(peft_dir, param_dtype=dtype or "float32")
    _, raw = peft.read_peft_config(peft_dir)
    return save_adapter_checkpoint(adapters, lcfg, out_dir,
                                   base_model_name_or_path=raw.get("base_model_name_or_path"),
                                   overwrite=overwrite)


def orbax_to_peft(ckpt_dir, out_dir, *, dtype: str | None = None,
                  base_model_name_or_path: str | None = None, overwrite: bool = False) -> Path:
    """Adapter checkpoint folder -> PEFT folder. base_model_name_or_path: written to
    adapter_config.json (default: the one the checkpoint recorded)."""
    lcfg, adapters, meta = load_adapter_checkpoint(ckpt_dir)
    name = base_model_name_or_path or meta.get("base_model_name_or_path")
    return peft.write_peft(adapters, lcfg, out_dir, base_model_name_or_path=name, dtype=dtype,
                           overwrite=overwrite)


def read_adapters(adapter_dir, cfg: ModelConfig | None = None) -> tuple[LoraConfig, dict]:
    """(LoraConfig, adapters) of a PEFT folder or an adapter checkpoint folder."""
    adapter_dir = Path(adapter_dir)
    if (adapter_dir / peft.CONFIG_FILE).is_file():
        return peft.read_peft(adapter_dir, cfg)
    if (adapter_dir / ADAPTERS_DIR).is_dir():
        lcfg, adapters, _ = load_adapter_checkpoint(adapter_dir, cfg)
        return lcfg, adapters
    raise MissingFileError(f"{adapter_dir}: neither a PEFT folder ({peft.CONFIG_FILE}) nor an "
                           f"adapter checkpoint ({ADAPTERS_DIR}/)")


def _hf_deltas(adapters, lcfg: LoraConfig) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """HF weight name -> (a [I, R], b [R, O]) float32 numpy."""
    out = {}
    for i, layer in adapters["layers"].items():
        for mods in layer.values():
            for t, ab in mods["lora"].items():
                name = f"model.layers.{int(i)}.{peft.HF_MODULES[t]}.weight"
                out[name] = tuple(np.asarray(jax.device_get(ab[k]), np.float32)
                                  for k in ("lora_a", "lora_b"))
    return out


def merge_into_hf(base_dir, adapter_dir, out_dir, *, dtype: str | None = None,
                  max_shard_size: int | str = "5GB", overwrite: bool = False) -> Path:
    """A full HF folder whose adapted weights are W + scale * A @ B (PEFT's merge), from a base
    HF folder or model checkpoint folder and a PEFT or adapter checkpoint folder.

    An HF base streams tensor by tensor (each adapted weight summed in float32 on the host); a
    model checkpoint is restored to the host and merged by `lora.merge_params`. dtype: stored
    dtype (default: the base's).
    """
    base_dir = Path(base_dir)
    if (base_dir / PARAMS_DIR).is_dir():
        model = load_checkpoint_model(base_dir, device=_host().device_set.pop())
        lcfg, adapters = read_adapters(adapter_dir, model.cfg)
        merged = merge_params(base_params(model), adapters, lcfg)
        with atomic_output_dir(out_dir, overwrite=overwrite) as tmp:
            write_params(merged, model.cfg, tmp, dtype=dtype, max_shard_size=max_shard_size)
            copy_tokenizer_files(base_dir, tmp)
        return Path(out_dir)
    stored = stored_dtype(base_dir)
    cfg = load_config(base_dir, dtype=stored)
    files, specs = check_weights(base_dir, cfg)
    lcfg, adapters = read_adapters(adapter_dir, cfg)
    deltas = _hf_deltas(adapters, lcfg)
    out_dt = st.np_dtype(dtype or stored)

    def producer(spec):
        def produce():
            ((_, w),) = list(st.iter_tensors(files, [spec.hf_name]))
            if spec.hf_name in deltas:
                a_IR, b_RO = deltas[spec.hf_name]
                # HF [O, I] layout: W + scale * (a @ b).T
                w = w.astype(np.float32) + np.float32(lcfg.scale) * (a_IR @ b_RO).T
            return w.astype(out_dt)
        return produce

    items = [st.planned(s.hf_name, out_dt, s.hf_shape, producer(s)) for s in specs]
    with atomic_output_dir(out_dir, overwrite=overwrite) as tmp:
        st.write_safetensors(tmp, items, st.parse_size(max_shard_size))
        config = hf_config_dict(cfg, st.dtype_name(out_dt))
        (tmp / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n")
        copy_tokenizer_files(base_dir, tmp)
    return Path(out_dir)

