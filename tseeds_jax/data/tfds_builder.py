"""tensorflow-datasets builder over local JSONL/Parquet files, written as array_record and read
back with `tfds.data_source` (random access, no TensorFlow needed; `as_dataset` would need TF).

One builder class, `TseedsDataset`, with one config per registered dataset name. Records are
stored in file order (`disable_shuffling`), keyed by (file index, line), with `reference` and
`meta` as JSON text so str and dict references share one feature spec. A sidecar
`tseeds_build.json` in the prepared folder records the source files' fingerprint (path, size,
sha256) and the build report; `build_dataset` rebuilds when the sources changed.

Layout: `<data_dir>/tseeds_dataset/<name>/1.0.0/`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any

import tensorflow_datasets as tfds
from etils import epath

import tseeds_jax.data.formats as formats
import tseeds_jax.data.readers as readers
import tseeds_jax.data.registry as registry
from tseeds_jax.data.errors import DataFormatError

log = logging.getLogger(__name__)

BUILDER_NAME = "tseeds_dataset"
SIDECAR = "tseeds_build.json"
_MAX_REPORTED = 20


class TseedsConfig(tfds.core.BuilderConfig):
    """Config = registry name; `spec` is the registry entry."""

    def __init__(self, spec: registry.DatasetSpec):
        super().__init__(name=spec.name, description=spec.description)
        self.spec = spec


def _config_for(name: str) -> str | TseedsConfig:
    """The config to pass to the builder: the class's own one by name when the dataset was
    registered before this module was imported, a fresh config object otherwise (tfds refuses a
    new object that shadows a class config)."""
    spec = registry.get_spec(name)
    if spec.format == "reasoning_gym":
        raise ValueError(f"{name!r} is a reasoning-gym task: it is generated on access, use "
                         "sources.make_source or ReasoningGymSource instead of building it")
    known = TseedsDataset.builder_configs.get(name)
    if known is not None and known.spec == spec:
        return name
    if known is not None:
        raise ValueError(f"dataset {name!r} was re-registered with a different spec after "
                         f"{__name__} was imported; register it under a new name")
    return TseedsConfig(spec)


class TseedsDataset(tfds.core.GeneratorBasedBuilder):
    """Builds one registered dataset from `files` ({split: [paths]}).

    `skip_invalid`: records with a DataFormatError are logged and skipped instead of failing the
    build (file-level errors, e.g. an empty file, always fail). `dedupe`: drop records whose
    (prompt, reference) repeats an earlier one (DAPO-Math-17k's parquet repeats each problem).
    """

    VERSION = tfds.core.Version("1.0.0")
    BUILDER_CONFIGS = [TseedsConfig(s) for s in registry.DATASETS.values()]
    # tfds finds a builder's code folder through `importlib_resources` (not installed, and not
    # otherwise needed); point it at this file directly.
    @tfds.core.utils.classproperty
    @classmethod
    def code_path(cls):
        return epath.Path(__file__)

    def __init__(self, *, files: Mapping[str, Sequence[str]] | None = None,
                 skip_invalid: bool = False, dedupe: bool = False, **kwargs):
        self._files = {k: list(v) for k, v in (files or {}).items()}
        self._skip_invalid, self._dedupe = skip_invalid, dedupe
        self.report: dict[str, Any] = {}
        super().__init__(**kwargs)

    def _info(self) -> tfds.core.DatasetInfo:
        text = tfds.features.Text()
        return tfds.core.DatasetInfo(
            builder=self,
            description="tseeds_jax normalised examples; reference/meta are JSON text.",
            features=tfds.features.FeaturesDict({
                "id": text, "prompt": text, "reference": text, "source": text,
                "reward_name": text, "meta": text}),
            disable_shuffling=True,  # keep file order: index i is a stable, findable record
        )

    def _split_generators(self, dl_manager):
        del dl_manager  # local files only; nothing is downloaded
        if not self._files:
            raise ValueError(f"{BUILDER_NAME}/{self.builder_config.name}: no input files; "
                             "pass files={'train': [...]} (or use build_dataset)")
        return {split: self._generate_examples(split, paths)
                for split, paths in self._files.items()}

    def _generate_examples(self, split: str, paths: Sequence[str]):
        spec: registry.DatasetSpec = self.builder_config.spec
        rep = self.report.setdefault(split, {"examples": 0, "invalid": 0, "duplicates": 0,
                                             "invalid_records": []})
        seen: set[str] = set()
        for file_index, path in enumerate(paths):
            for line, record in readers.read_records(path):
                try:
                    ex = formats.normalize(spec.format, record, path, line, spec.name,
                                           **spec.options)
                except DataFormatError as e:
                    if not self._skip_invalid:
                        raise
                    rep["invalid"] += 1
                    if len(rep["invalid_records"]) < _MAX_REPORTED:
                        rep["invalid_records"].append(str(e))
                    log.warning("skipping invalid record: %s", e)
                    continue
                reference = json.dumps(ex["reference"], ensure_ascii=False, sort_keys=True)
                if self._dedupe:
                    digest = hashlib.sha256((ex["prompt"] + "\0" + reference).encode()).hexdigest()
                    if digest in seen:
                        rep["duplicates"] += 1
                        continue
                    seen.add(digest)
                rep["examples"] += 1
                yield f"{file_index:05d}-{line:010d}", {
                    "id": ex["id"], "prompt": ex["prompt"], "reference": reference,
                    "source": ex["source"], "reward_name": ex["reward_name"],
                    "meta": json.dumps(ex["meta"], ensure_ascii=False, sort_keys=True)}
        if rep["examples"] == 0:
            raise DataFormatError(f"split {split!r} of {spec.name!r} has no valid examples "
                                  f"({rep['invalid']} invalid, {rep['duplicates']} duplicates)",
                                  path=", ".join(map(str, paths)))


def _normalize_files(files) -> dict[str, list[str]]:
    if isinstance(files, Mapping):
        out = {str(split): readers.expand_files(v) for split, v in files.items()}
    else:
        out = {"train": readers.expand_files(files)}
    if not out:
        raise ValueError("build_dataset: files is empty")
    return out


def _fingerprint(files: Mapping[str, Sequence[str]], options: Mapping[str, Any]) -> dict:
    fp: dict[str, Any] = {"options": dict(options), "splits": {}}
    for split, paths in files.items():
        entries = []
        for p in paths:
            if not os.path.isfile(p):
                raise DataFormatError("file not found", path=p)
            h = hashlib.sha256()
            with open(p, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
            entries.append([os.path.abspath(p), os.path.getsize(p), h.hexdigest()])
        fp["splits"][split] = entries
    return fp


def build_dataset(name: str, files, data_dir: str | os.PathLike, *, skip_invalid: bool = False,
                  dedupe: bool = False, force: bool = False) -> dict[str, Any]:
    """Normalise `files` of registered dataset `name` into array_record under `data_dir`.

    `files`: a path, a folder, a list of those (split "train"), or {split: paths}. Reuses an
    existing build when the source fingerprint and options match (unless `force`). Returns the
    build report {"dir", "rebuilt", "splits": {split: {"examples", "invalid", "duplicates",
    "invalid_records"}}}. Errors name the file, line and field.
    """
    config = _config_for(name)
    spec = registry.get_spec(name)
    tfds.disable_progress_bar()  # build logs go through `logging`, not terminal bars
    files = _normalize_files(files)
    data_dir = os.fspath(data_dir)
    fingerprint = _fingerprint(files, {"skip_invalid": skip_invalid, "dedupe": dedupe,
                                       "spec_options": dict(spec.options),
                                       "format": spec.format})
    builder = TseedsDataset(files=files, skip_invalid=skip_invalid, dedupe=dedupe,
                            config=config, data_dir=data_dir, file_format="array_record")
    sidecar = os.path.join(os.fspath(builder.data_dir), SIDECAR)
    previous = _read_sidecar(sidecar)
    reuse = (not force and builder.is_prepared() and previous is not None
             and previous.get("fingerprint") == fingerprint)
    if reuse:
        assert previous is not None
        return {**previous["report"], "rebuilt": False}
    mode = tfds.download.GenerateMode.REUSE_CACHE_IF_EXISTS  # regenerate, download nothing
    builder.download_and_prepare(download_config=tfds.download.DownloadConfig(
        download_mode=mode))
    report = {"dir": os.fspath(builder.data_dir), "splits": builder.report}
    tmp = sidecar + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump({"fingerprint": fingerprint, "report": report}, f, indent=1)
    os.replace(tmp, sidecar)
    return {**report, "rebuilt": True}


def _read_sidecar(path: str) -> dict | None:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, json.JSONDecodeError):
        return None


class ExampleSource:
    """Random-access view of a built split: `len`, `src[i]` / `src.__getitems__(idx)` -> example
    dicts (formats.EXAMPLE_KEYS, text decoded, reference/meta parsed from JSON)."""

    def __init__(self, data_source, name: str, split: str):
        self._ds, self.name, self.split = data_source, name, split

    def __len__(self) -> int:
        return len(self._ds)

    @staticmethod
    def _decode(raw: Mapping[str, Any]) -> dict[str, Any]:
        text = {k: (v.decode("utf-8") if isinstance(v, bytes) else v) for k, v in raw.items()}
        text["reference"] = json.loads(text["reference"])
        text["meta"] = json.loads(text["meta"])
        return {k: text[k] for k in formats.EXAMPLE_KEYS}

    def __getitem__(self, index: int) -> dict[str, Any]:
        index = int(index)
        if not 0 <= index < len(self):
            raise IndexError(f"{self.name}/{self.split}: index {index} outside [0, {len(self)})")
        return self._decode(self._ds[index])

    def __getitems__(self, indices) -> list[dict[str, Any]]:
        indices = [int(i) for i in indices]
        return [self._decode(r) for r in self._ds.__getitems__(indices)]

    def __repr__(self) -> str:
        return f"ExampleSource({self.name!r}, split={self.split!r}, len={len(self)})"


def load_source(name: str, data_dir: str | os.PathLike, split: str = "train") -> ExampleSource:
    """Open a built split through `tfds.data_source`; ValueError if it was never built."""
    config = _config_for(name)
    data_dir = os.fspath(data_dir)
    probe = TseedsDataset(config=config, data_dir=data_dir, file_format="array_record")
    if not probe.is_prepared():
        raise ValueError(f"dataset {name!r} is not built under {data_dir!r}; run "
                         "build_dataset(name, files, data_dir) first")
    if split not in probe.info.splits:
        raise ValueError(f"dataset {name!r} has no split {split!r}; built splits: "
                         f"{sorted(probe.info.splits)}")
    ds = tfds.data_source(BUILDER_NAME, split=split, data_dir=data_dir, download=False,
                          builder_kwargs={"config": config, "file_format": "array_record"})
    return ExampleSource(ds, name, split)
