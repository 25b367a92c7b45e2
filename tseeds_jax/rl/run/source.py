"""What a run's model started from, recorded in every checkpoint's meta and checked on load.

    meta["model_source"] = {"kind": "random"}                                  # model.init
                           {"kind": "hf" | "orbax", "path": ABS_DIR, "sha256": FOLDER_HASH}
                           {"kind": "saved", "path": "base_model", "sha256": PARAMS_HASH}
    meta["tokenizer"]    = {"spec": config.tokenizer, "file": PATH, "sha256": FILE_HASH,
                            "vocab_size": N}

A LoRA run's model is its base plus the adapters in the checkpoint, so the base must be rebuilt
exactly: a base given from `model.init = "hf:DIR" | "orbax:DIR"` is referenced by path and
content hash (copying a 15 GB base into every LoRA run would cost more than the run); a base
that exists only in memory (the demo's warm-started policies, `make_trainer(model=...)`) is
saved in the run folder (RUN_DIR/base_model, a model checkpoint folder) and hashed by its
parameters. docs/decisions.md says why. Loading checks the recorded hash and stops with
`RunSourceError`, naming the checkpoint's meta and what differs, when the base or the
tokenizer is missing or changed. A run written before these fields existed loads as before.
"""

from __future__ import annotations

import hashlib
import os

import jax
import numpy as np
from etils import epath

SAVED_BASE_DIR = "base_model"  # RUN_DIR/base_model: the base of a run given in memory
# Folders up to this size are hashed whole; above it each file's size, its first and last MiB
# and 16 spread 64 KiB blocks: a changed checkpoint changes those, and hashing a 70 GB base
# byte by byte at every run start would take minutes.
FULL_HASH_BYTES = 4 << 30
_SKIP = {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model",
         "vocab.json", "merges.txt", "vocab.txt", "added_tokens.json", "chat_template.jinja",
         "chat_template.json", "generation_config.json", "README.md"}


class RunSourceError(ValueError):
    """A run's recorded base or tokenizer is missing or differs from what is on disk now."""


def _files(root: epath.Path) -> list[tuple[str, epath.Path]]:
    out = []
    stack = [(root, "")]
    while stack:
        d, prefix = stack.pop()
        for p in d.iterdir():
            rel = prefix + p.name
            if p.name.startswith(".") or p.name in _SKIP:
                continue
            if p.is_dir():
                stack.append((p, rel + "/"))
            else:
                out.append((rel, p))
    return sorted(out, key=lambda x: x[0])


def _size(p: epath.Path) -> int:
    with p.open("rb") as f:
        f.seek(0, 2)
        return f.tell()


def folder_hash(path) -> str:
    """sha256 over a model folder's files (names, sizes, bytes; sampled above FULL_HASH_BYTES),
    tokenizer and generation files excluded (the tokenizer is recorded on its own)."""
    root = epath.Path(str(path))
    files = _files(root)
    sizes = [_size(p) for _, p in files]
    whole = sum(sizes) <= FULL_HASH_BYTES
    h = hashlib.sha256()
    for (rel, p), size in zip(files, sizes):
        h.update(f"{rel}\0{size}\0".encode())
        with p.open("rb") as f:
            if whole or size <= 4 << 20:
                for block in iter(lambda: f.read(1 << 20), b""):
                    h.update(block)
                continue
            for off in [0, size - (1 << 20)] + [size * i // 17 for i in range(1, 17)]:
                f.seek(off)
                h.update(f.read(1 << 20 if off in (0, size - (1 << 20)) else 1 << 16))
    return h.hexdigest()


def file_hash(path) -> str:
    h = hashlib.sha256()
    with epath.Path(str(path)).open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def params_hash(params) -> str:
    """sha256 over a parameter pytree's paths, dtypes, shapes and values."""
    h = hashlib.sha256()
    for keypath, leaf in jax.tree_util.tree_flatten_with_path(params)[0]:
        arr = np.asarray(jax.device_get(leaf))
        h.update(f"{jax.tree_util.keystr(keypath)}\0{arr.dtype}\0{arr.shape}\0".encode())
        h.update(np.ascontiguousarray(arr).tobytes())
    return h.hexdigest()


def _abs(path: str) -> str:
    return path if "://" in path else os.path.abspath(os.path.expanduser(path))


def init_source(init: str) -> dict:
    """The record of `config.model.init` ("random", "hf:DIR", "orbax:DIR")."""
    kind, _, path = init.partition(":")
    if kind not in ("hf", "orbax"):
        return {"kind": "random"}
    path = _abs(path)
    return {"kind": kind, "path": path, "sha256": folder_hash(path)}


def saved_source(params) -> dict:
    return {"kind": "saved", "path": SAVED_BASE_DIR, "sha256": params_hash(params)}


def tokenizer_file(spec: str, run_dir: str) -> str | None:
    """The file (or folder) a `config.tokenizer` spec reads."""
    kind, _, path = spec.partition(":")
    if kind == "train":
        return os.path.join(str(run_dir), "tokenizer.model")
    if kind in ("spm", "hf"):
        return _abs(path)
    return None


def tokenizer_source(spec: str, run_dir: str, tok) -> dict:
    file = getattr(tok, "path", None) or tokenizer_file(spec, run_dir)
    out = {"spec": spec, "vocab_size": int(tok.vocab_size)}
    if file and epath.Path(str(file)).is_file():
        out.update(file=str(file), sha256=file_hash(file))
    return out


def check(recorded: dict, current: dict, where: str, what: str) -> None:
    """Raises RunSourceError when `current` (a record built now) differs from `recorded`."""
    if not recorded:
        return
    # The path may move (same content); the hash says whether the content is the same.
    for key in ("kind", "spec", "sha256", "vocab_size"):
        if key in recorded and recorded.get(key) != current.get(key):
            raise RunSourceError(
                f"{where}: the run's {what} was {_show(recorded)}; now {key}="
                f"{current.get(key)!r} (recorded {recorded.get(key)!r}): the model rebuilt from "
                "it would not be the trained one")


def _show(rec: dict) -> str:
    if "spec" in rec:
        return repr(rec.get("file") or rec["spec"])
    if rec.get("kind") in ("hf", "orbax"):
        return f"{rec['kind']}:{rec['path']}"
    return repr(rec.get("kind"))


def check_base_exists(recorded: dict, run_dir: str, where: str) -> str:
    """The folder of a recorded base (absolute), or RunSourceError naming it when missing."""
    kind = recorded.get("kind")
    path = recorded.get("path", "")
    if kind == "saved":
        path = os.path.join(str(run_dir), path)
    if not epath.Path(path).is_dir():
        raise RunSourceError(f"{where}: the run's base model {kind}:{path} is missing (recorded "
                             f"sha256 {recorded.get('sha256', '?')[:16]}...); restore that folder "
                             "to rebuild the trained model")
    return path
