"""HF PEFT LoRA adapter folders <-> our adapters (`tseeds_jax.model.lora`).

Letters: R rank, I / O an adapter's input / output features, L layers.

A PEFT folder (what `peft.PeftModel.from_pretrained` loads onto the HF base model):

    adapter_config.json         peft_type "LORA", task_type "CAUSAL_LM", r, lora_alpha,
                                lora_dropout, target_modules (HF module names), use_rslora,
                                base_model_name_or_path, ...
    adapter_model.safetensors   base_model.model.model.layers.{i}.self_attn.q_proj.lora_A.weight
                                [R, I] and ....lora_B.weight [O, R] per adapted projection

PEFT's A and B are torch Linear weights ([out, in]); ours are a [I, R], b [R, O]: each is the
other's transpose, so a round trip is bitwise. Reading checks the config's fields and every
tensor's name and shape before anything is converted; errors name the file, field or tensor and
the value found.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path

import jax
import numpy as np
from safetensors import safe_open

import tseeds_jax.hf.safetensors_io as st
import tseeds_jax.model.lora as lora
from tseeds_jax.hf.errors import ConversionError, MissingFileError
from tseeds_jax.hf.files import atomic_output_dir
from tseeds_jax.model.config import ModelConfig
from tseeds_jax.model.lora import ALL_TARGETS, TARGETS, LoraConfig, adapter_features
from tseeds_jax.model.transformer import Transformer

CONFIG_FILE = "adapter_config.json"
WEIGHTS_FILE = "adapter_model.safetensors"
PREFIX = "base_model.model.model.layers."
# our target -> HF module (under model.layers.{i}.)
HF_MODULES = {"q": "self_attn.q_proj", "k": "self_attn.k_proj", "v": "self_attn.v_proj",
              "o": "self_attn.o_proj", "gate": "mlp.gate_proj", "up": "mlp.up_proj",
              "down": "mlp.down_proj"}
_BY_HF_NAME = {m.split(".")[1]: t for t, m in HF_MODULES.items()}
_NAME_RE = re.compile(r"^base_model\.model\.model\.layers\.(\d+)\.(self_attn|mlp)\."
                      r"(\w+)\.lora_(A|B)\.weight$")
# PEFT options that change what the adapter computes and that our adapters do not have: each
# must be absent or empty/false in a folder we read.
_UNSUPPORTED = ("use_dora", "fan_in_fan_out", "rank_pattern", "alpha_pattern",
                "layers_to_transform", "layers_pattern", "modules_to_save", "lora_bias",
                "exclude_modules", "trainable_token_indices", "layer_replication",
                "target_parameters", "use_qalora", "use_bdlora", "alora_invocation_tokens")


def hf_tensor_name(layer: int, target: str, which: str) -> str:
    """PEFT's tensor name of adapter `target` of `layer`; which = "A" or "B"."""
    return f"{PREFIX}{layer}.{HF_MODULES[target]}.lora_{which}.weight"


# ---------------------------------------------------------------- adapter_config.json

def peft_config_dict(lcfg: LoraConfig, base_model_name_or_path: str | None = None) -> dict:
    """adapter_config.json contents for `lcfg` (the fields PEFT reads; it fills the rest)."""
    alpha = lcfg.alpha
    return {
        "peft_type": "LORA", "task_type": "CAUSAL_LM", "r": lcfg.rank,
        "lora_alpha": int(alpha) if float(alpha).is_integer() else alpha,
        "lora_dropout": lcfg.dropout,
        "target_modules": [HF_MODULES[t].split(".")[1] for t in lcfg.targets],
        "use_rslora": lcfg.use_rslora, "bias": "none", "use_dora": False,
        "fan_in_fan_out": False, "init_lora_weights": True, "inference_mode": True,
        "modules_to_save": None, "layers_to_transform": None, "layers_pattern": None,
        "rank_pattern": {}, "alpha_pattern": {},
        "base_model_name_or_path": base_model_name_or_path, "revision": None,
    }


def _field(cfg: dict, file: Path, name: str, check, want: str):
    if name not in cfg:
        raise ConversionError(f"{file}: field {name!r} is missing ({want})")
    value = cfg[name]
    if not check(value):
        raise ConversionError(f"{file}: field {name!r} = {value!r}; expected {want}")
    return value


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def read_peft_config(path: str | os.PathLike, *, param_dtype: str = "float32") -> tuple[LoraConfig, dict]:
    """(LoraConfig, the raw adapter_config.json dict) of a PEFT folder, validated."""
    file = Path(path) / CONFIG_FILE
    if not file.is_file():
        raise MissingFileError(f"{file}: not found; {path} is not a PEFT adapter folder")
    try:
        cfg = json.loads(file.read_text())
    except json.JSONDecodeError as e:
        raise ConversionError(f"{file}: not valid JSON ({e})") from None
    if not isinstance(cfg, dict):
        raise ConversionError(f"{file}: expected a JSON object, got {type(cfg).__name__}")
    _field(cfg, file, "peft_type", lambda v: v == "LORA", "'LORA'")
    _field(cfg, file, "task_type", lambda v: v == "CAUSAL_LM", "'CAUSAL_LM'")
    rank = _field(cfg, file, "r", lambda v: isinstance(v, int) and not isinstance(v, bool)
                  and v > 0, "a positive integer")
    alpha = _field(cfg, file, "lora_alpha", lambda v: _is_number(v) and v > 0,
                   "a positive number")
    dropout = cfg.get("lora_dropout", 0.0)
    if not (_is_number(dropout) and 0 <= dropout < 1):
        raise ConversionError(f"{file}: field 'lora_dropout' = {dropout!r}; expected a number "
                              "in [0, 1)")
    modules = _field(cfg, file, "target_modules",
                     lambda v: isinstance(v, list) and v and all(isinstance(x, str) for x in v),
                     f"a list of module names from {sorted(_BY_HF_NAME)} (a regex string is "
                     "not supported)")
    unknown = sorted(set(modules) - set(_BY_HF_NAME))
    if unknown:
        raise ConversionError(f"{file}: field 'target_modules' = {modules!r}: {unknown} are not "
                              f"projections of this model; expected names from "
                              f"{sorted(_BY_HF_NAME)}")
    bias = cfg.get("bias", "none")
    if bias != "none":
        raise ConversionError(f"{file}: field 'bias' = {bias!r}; only 'none' is supported")
    for name in _UNSUPPORTED:
        if cfg.get(name):
            raise ConversionError(f"{file}: field {name!r} = {cfg[name]!r}; this PEFT option "
                                  "is not supported (expected it unset, empty or false)")
    rslora = cfg.get("use_rslora", False)
    if not isinstance(rslora, bool):
        raise ConversionError(f"{file}: field 'use_rslora' = {rslora!r}; expected a bool")
    targets = tuple(t for t in ALL_TARGETS if HF_MODULES[t].split(".")[1] in modules)
    lcfg = LoraConfig(rank=rank, alpha=float(alpha), dropout=float(dropout), targets=targets,
                      use_rslora=rslora, param_dtype=param_dtype)
    return lcfg, cfg


# ---------------------------------------------------------------- reading

def _parse_names(names, file: Path, lcfg: LoraConfig) -> dict[tuple[int, str, str], str]:
    """(layer, target, "A" | "B") -> tensor name; every name must be an adapter of a target."""
    out = {}
    for name in names:
        m = _NAME_RE.match(name)
        target = _BY_HF_NAME.get(m.group(3)) if m else None
        if m is None or target is None or HF_MODULES[target].split(".")[0] != m.group(2):
            raise ConversionError(f"{file}: unexpected tensor {name!r}; expected names like "
                                  f"{hf_tensor_name(0, 'q', 'A')!r}")
        if target not in lcfg.targets:
            raise ConversionError(f"{file}: tensor {name!r} adapts {m.group(3)!r}, which is not "
                                  f"in {CONFIG_FILE} target_modules")
        out[(int(m.group(1)), target, m.group(4))] = name
    return out


def check_peft(path: str | os.PathLike, cfg: ModelConfig | None = None, *,
               param_dtype: str = "float32") -> tuple[LoraConfig, dict[tuple[int, str, str], str]]:
    """(LoraConfig, (layer, target, A|B) -> tensor name) of a PEFT folder, after checking its
    config and every tensor's name and shape (against `cfg`'s layers and projection sizes when
    given; otherwise for the rank and for one size per target across layers). Reads headers
    only."""
    path = Path(path)
    lcfg, _ = read_peft_config(path, param_dtype=param_dtype)
    file = path / WEIGHTS_FILE
    if not file.is_file():
        raise MissingFileError(f"{file}: not found (PEFT adapter weights)")
    found = st.headers({name: file for name in _names_in(file)})
    keys = _parse_names(found, file, lcfg)
    layers = sorted({k[0] for k in keys})
    if not layers:
        raise ConversionError(f"{file}: holds no LoRA tensors")
    n = cfg.num_hidden_layers if cfg is not None else layers[-1] + 1
    missing = [hf_tensor_name(i, t, w) for i in range(n) for t in lcfg.targets for w in "AB"
               if (i, t, w) not in keys]
    if missing:
        raise ConversionError(f"{file}: missing tensor(s) {missing[:4]}"
                              + (f", ... ({len(missing)} in all)" if len(missing) > 4 else "")
                              + f" for {n} layers and target_modules of {CONFIG_FILE}")
    extra = [keys[k] for k in keys if k[0] >= n]
    if extra:
        raise ConversionError(f"{file}: tensor(s) {extra[:4]} beyond the model's {n} layers "
                              "(num_hidden_layers)")
    sizes: dict[str, tuple[int, int]] = {}
    for (i, target, which), name in sorted(keys.items()):
        tag, shape = found[name]
        st.st_dtype(tag, where=f"{file}: tensor {name!r}")
        if cfg is not None:
            feats = adapter_features(cfg, target)
        else:
            a_shape, b_shape = found[keys[(i, target, "A")]][1], found[keys[(i, target, "B")]][1]
            feats = sizes.setdefault(target, (a_shape[-1], b_shape[0]))
        want = (lcfg.rank, feats[0]) if which == "A" else (feats[1], lcfg.rank)
        if shape != want:
            raise ConversionError(f"{file}: tensor {name!r} has shape {shape}, expected {want} "
                                  f"(r={lcfg.rank} in {CONFIG_FILE}; "
                                  + ("the base model's projection sizes)" if cfg is not None
                                     else f"the sizes of layer 0's {target} adapter)"))
    return lcfg, keys


def _names_in(file: Path) -> list[str]:
    try:
        with safe_open(file, framework="numpy") as f:
            return list(f.keys())
    except Exception as e:  # noqa: BLE001 - safetensors raises its own error types
        raise ConversionError(f"{file}: cannot read safetensors header ({e})") from None


def read_peft(path: str | os.PathLike, cfg: ModelConfig | None = None, *,
              param_dtype: str = "float32") -> tuple[LoraConfig, dict]:
    """(LoraConfig, adapters) of a PEFT folder: adapters in `lora.adapter_params` layout (numpy,
    cast to `param_dtype`), checked as `check_peft` does."""
    lcfg, keys = check_peft(path, cfg, param_dtype=param_dtype)
    file = Path(path) / WEIGHTS_FILE
    target_dt = st.np_dtype(param_dtype)
    by_name = {name: k for k, name in keys.items()}
    adapters: dict = {"layers": {}}
    for name, raw in st.iter_tensors({n: file for n in by_name}, sorted(by_name)):
        i, target, which = by_name[name]
        sub = TARGETS[target][0]
        leaf = adapters["layers"].setdefault(i, {}).setdefault(sub, {"lora": {}})["lora"]
        leaf.setdefault(target, {})["lora_a" if which == "A" else "lora_b"] = \
            np.ascontiguousarray(raw.T).astype(target_dt, copy=False)
    return lcfg, adapters


# ---------------------------------------------------------------- writing

def write_peft(adapters: Mapping, lcfg: LoraConfig, out_dir: str | os.PathLike, *,
               base_model_name_or_path: str | None = None, dtype: str | None = None,
               overwrite: bool = False) -> Path:
    """Writes `adapters` (`lora.adapter_params` layout; jax or numpy arrays, sharded ones are
    gathered) as a PEFT folder. dtype: stored dtype (default: the adapters' own)."""
    items, dtypes = [], set()
    for i in sorted(adapters["layers"]):
        for mods in adapters["layers"][i].values():
            for target in sorted(mods["lora"], key=ALL_TARGETS.index):
                ab = mods["lora"][target]
                for which, key in (("A", "lora_a"), ("B", "lora_b")):
                    leaf = ab[key]
                    dtypes.add(np.dtype(leaf.dtype))
                    items.append((hf_tensor_name(int(i), target, which), leaf))
    if dtype is None and len(dtypes) > 1:
        raise ValueError(f"adapters have mixed dtypes {sorted(map(str, dtypes))}; pass dtype=")
    out_dt = st.np_dtype(dtype) if dtype is not None else dtypes.pop()

    def producer(leaf):
        def produce():
            return np.ascontiguousarray(np.asarray(jax.device_get(leaf)).T).astype(out_dt)
        return produce

    planned = [st.planned(name, out_dt, tuple(leaf.shape)[::-1], producer(leaf))
               for name, leaf in items]
    with atomic_output_dir(out_dir, overwrite=overwrite) as tmp:
        st.write_safetensors(tmp, planned, st.parse_size("1000GB"))
        os.replace(tmp / st.SINGLE_FILE, tmp / WEIGHTS_FILE)
        config = peft_config_dict(lcfg, base_model_name_or_path)
        (tmp / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n")
    return Path(out_dir)


def save_peft(model: Transformer, out_dir: str | os.PathLike, *,
              base_model_name_or_path: str | None = None, dtype: str | None = None,
              overwrite: bool = False) -> Path:
    """Writes an adapted model's adapters as a PEFT folder (`write_peft`)."""
    return write_peft(lora.adapter_params(model), lora.lora_config_of(model), out_dir,
                      base_model_name_or_path=base_model_name_or_path, dtype=dtype,
                      overwrite=overwrite)


def load_peft(model: Transformer, path: str | os.PathLike, *, seed: int = 0) -> Transformer:
    """Loads a PEFT folder's adapters into `model` (in place; returns it). A model without
    adapters gets them first (`lora.apply_lora` with the folder's config; `seed` seeds its
    dropout stream); an adapted model must have the folder's rank, scale and targets (its own
    dropout rate and param dtype are kept)."""
    if not isinstance(model, Transformer):
        raise TypeError(f"model must be a tseeds_jax Transformer, got {type(model).__name__}")
    if lora.has_lora(model):
        own = lora.lora_config_of(model)
        lcfg, adapters = read_peft(path, model.cfg, param_dtype=own.param_dtype)
        mine = (own.rank, own.scale, own.targets)
        theirs = (lcfg.rank, lcfg.scale, lcfg.targets)
        if mine != theirs:
            raise ConversionError(f"{Path(path) / CONFIG_FILE}: (r, scale, targets) = {theirs}, "
                                  f"the model's adapters have {mine}")
    else:
        lcfg, adapters = read_peft(path, model.cfg)
        lora.apply_lora(model, lcfg, seed=seed)
    return lora.load_adapters(model, adapters)
