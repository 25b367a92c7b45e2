"""Streaming safetensors I/O: read one tensor at a time, write tensor by tensor in bounded shards.

Reading uses `safetensors.safe_open` (memory-mapped; one tensor materialised at a time) with
its numpy backend; that backend cannot represent bfloat16, so bf16 tensors are read through the
flax backend pinned to the host CPU device and copied into numpy (ml_dtypes) arrays.

Writing streams: the header of each shard is computed from the planned shapes and dtypes, then
every tensor is produced, written and dropped before the next one, so peak host memory is one
tensor (plus its transposed copy), never a whole shard.
"""

from __future__ import annotations

import contextlib
import json
import os
import struct
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import jax
import ml_dtypes
import numpy as np
from safetensors import safe_open

from tseeds_jax.hf.errors import ConversionError, MissingFileError

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"

# safetensors dtype tag <-> numpy dtype (only the float types a checkpoint of ours contains,
# plus what HF checkpoints commonly store).
_ST_TO_NP = {"F32": np.dtype(np.float32), "F16": np.dtype(np.float16),
             "BF16": np.dtype(ml_dtypes.bfloat16), "F64": np.dtype(np.float64)}
_NP_TO_ST = {v: k for k, v in _ST_TO_NP.items()}


def np_dtype(name: str) -> np.dtype:
    """numpy dtype of "float32" | "bfloat16" | "float16"."""
    try:
        return {"float32": np.dtype(np.float32), "bfloat16": np.dtype(ml_dtypes.bfloat16),
                "float16": np.dtype(np.float16)}[str(name)]
    except KeyError:
        raise ValueError(f"dtype={name!r}: expected 'float32', 'bfloat16' or 'float16'") from None


def dtype_name(dt) -> str:
    dt = np.dtype(dt)
    if dt == ml_dtypes.bfloat16:
        return "bfloat16"
    return dt.name


def parse_size(size: int | str) -> int:
    """Bytes from an int or a string like "5GB", "200MB", "10KB" (decimal units, as HF)."""
    if isinstance(size, int) and not isinstance(size, bool):
        value = size
    elif isinstance(size, str):
        s = size.strip().upper()
        units = {"KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "KB": 10**3, "MB": 10**6,
                 "GB": 10**9, "B": 1}
        for unit, mult in units.items():
            if s.endswith(unit):
                try:
                    value = int(float(s[: -len(unit)]) * mult)
                except ValueError:
                    raise ValueError(f"max_shard_size={size!r}: not a size") from None
                break
        else:
            raise ValueError(f"max_shard_size={size!r}: expected bytes or e.g. '5GB'")
    else:
        raise TypeError(f"max_shard_size must be int or str, got {type(size).__name__}")
    if value <= 0:
        raise ValueError(f"max_shard_size={size!r}: must be positive")
    return value


# ---------------------------------------------------------------- reading


def weight_files(directory: str | os.PathLike) -> dict[str, Path]:
    """tensor name -> file holding it, from the index (sharded) or the single file's header."""
    directory = Path(directory)
    index = directory / INDEX_FILE
    single = directory / SINGLE_FILE
    if index.exists():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
        except (json.JSONDecodeError, KeyError, TypeError) as e:
            raise ConversionError(f"{index}: not a safetensors index ({e!r})") from None
        files = {name: directory / fname for name, fname in weight_map.items()}
        for path in sorted(set(files.values())):
            if not path.exists():
                raise MissingFileError(f"{path}: shard listed in {index} does not exist")
        return files
    if single.exists():
        with safe_open(single, framework="numpy") as f:
            return {name: single for name in f.keys()}
    raise MissingFileError(f"{directory}: neither {SINGLE_FILE} nor {INDEX_FILE} found")


def headers(files: dict[str, Path]) -> dict[str, tuple[str, tuple[int, ...]]]:
    """tensor name -> (safetensors dtype tag, shape), read from the headers only."""
    out = {}
    by_file: dict[Path, list[str]] = {}
    for name, path in files.items():
        by_file.setdefault(path, []).append(name)
    for path, names in by_file.items():
        try:
            f_ctx = safe_open(path, framework="numpy")
        except Exception as e:  # noqa: BLE001 - safetensors raises its own error types
            raise ConversionError(f"{path}: cannot read safetensors header ({e})") from None
        with f_ctx as f:
            present = set(f.keys())
            for name in names:
                if name not in present:
                    raise ConversionError(f"{path}: tensor {name!r} listed in {INDEX_FILE} "
                                          "is not in this file")
                sl = f.get_slice(name)
                out[name] = (sl.get_dtype(), tuple(sl.get_shape()))
    return out


@contextlib.contextmanager
def _host_default_device():
    try:
        cpu = jax.local_devices(backend="cpu")[0]
    except RuntimeError:  # no CPU backend registered: let safetensors use the default device
        yield
        return
    with jax.default_device(cpu):
        yield


def iter_tensors(files: dict[str, Path], names: Sequence[str]) -> Iterator[tuple[str, np.ndarray]]:
    """Yields (name, host numpy array) for `names`, one at a time, opening each file once.

    numpy backend for every dtype it knows; bfloat16 goes through the flax backend on the host
    CPU device and is copied out at once (the device buffer is freed before the next tensor).
    """
    order: dict[Path, list[str]] = {}
    for name in names:
        order.setdefault(files[name], []).append(name)
    for path, group in order.items():
        with safe_open(path, framework="numpy") as f:
            bf16 = {n for n in group if f.get_slice(n).get_dtype() == "BF16"}
            for name in group:
                if name not in bf16:
                    yield name, f.get_tensor(name)
                    continue
                with _host_default_device(), safe_open(path, framework="flax") as g:
                    t = g.get_tensor(name)
                    arr = np.array(t)
                    del t
                yield name, arr


# ---------------------------------------------------------------- writing


class _Planned:
    __slots__ = ("name", "dtype", "shape", "produce", "nbytes")

    def __init__(self, name: str, dtype: np.dtype, shape: tuple[int, ...],
                 produce: Callable[[], np.ndarray]):
        self.name, self.dtype, self.shape, self.produce = name, np.dtype(dtype), tuple(shape), produce
        self.nbytes = int(np.prod(shape, dtype=np.int64)) * self.dtype.itemsize


def plan_shards(items: list[_Planned], max_shard_size: int) -> list[list[_Planned]]:
    """Greedy split in order; a tensor larger than the limit gets a shard of its own."""
    shards: list[list[_Planned]] = [[]]
    size = 0
    for item in items:
        if shards[-1] and size + item.nbytes > max_shard_size:
            shards.append([])
            size = 0
        shards[-1].append(item)
        size += item.nbytes
    return shards


def _write_file(path: Path, items: list[_Planned], metadata: dict[str, str]) -> None:
    header: dict = {"__metadata__": metadata}
    offset = 0
    for it in items:
        if it.dtype not in _NP_TO_ST:
            raise ConversionError(f"{it.name}: dtype {it.dtype} cannot be written to safetensors")
        header[it.name] = {"dtype": _NP_TO_ST[it.dtype], "shape": list(it.shape),
                           "data_offsets": [offset, offset + it.nbytes]}
        offset += it.nbytes
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)  # the format wants the data 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        for it in items:
            arr = it.produce()
            if arr.shape != it.shape or arr.dtype != it.dtype:
                raise ConversionError(f"{it.name}: produced {arr.dtype}{arr.shape}, planned "
                                      f"{it.dtype}{it.shape}")
            np.ascontiguousarray(arr).reshape(-1).view(np.uint8).tofile(f)
            del arr


def write_safetensors(directory: Path, items: list[_Planned], max_shard_size: int) -> list[str]:
    """Writes `model.safetensors`, or numbered shards plus the index; returns the file names."""
    shards = plan_shards(items, max_shard_size)
    metadata = {"format": "pt"}  # transformers refuses files without a known format tag
    if len(shards) == 1:
        _write_file(directory / SINGLE_FILE, shards[0], metadata)
        return [SINGLE_FILE]
    n = len(shards)
    names, weight_map = [], {}
    for i, shard in enumerate(shards, start=1):
        fname = f"model-{i:05d}-of-{n:05d}.safetensors"
        _write_file(directory / fname, shard, metadata)
        names.append(fname)
        weight_map.update({it.name: fname for it in shard})
    index = {"metadata": {"total_size": sum(it.nbytes for it in items)}, "weight_map": weight_map}
    (directory / INDEX_FILE).write_text(json.dumps(index, indent=2) + "\n")
    return names + [INDEX_FILE]


def planned(name: str, dtype, shape, produce: Callable[[], np.ndarray]) -> _Planned:
    """A tensor to write: its name, dtype, shape and a zero-argument function producing it."""
    return _Planned(name, dtype, shape, produce)


def st_dtype(tag: str, *, where: str) -> np.dtype:
    if tag not in _ST_TO_NP:
        raise ConversionError(f"{where}: unsupported safetensors dtype {tag}; expected one of "
                              f"{sorted(_ST_TO_NP)}")
    return _ST_TO_NP[tag]
