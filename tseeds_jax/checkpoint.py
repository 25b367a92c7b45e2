"""Orbax checkpoints of parameters and train state: numbered steps plus named "historical" ones.

Layout of a checkpoint directory (local path or anything etils.epath accepts, e.g. gs://):

    DIR/<step>/state/...        the pytree (Orbax PyTreeSave: jax/numpy arrays, scalars)
    DIR/<step>/meta/...         a JSON-able dict (config, data position, metrics...)
    DIR/historical/<name>/...   same two items; named, never garbage-collected

Every write goes to a temporary directory that Orbax renames when complete (on gs://, where a
rename is not atomic, Orbax instead writes `commit_success.txt` last and lists only directories
that have it), so a crash never leaves a half-written checkpoint visible; the run's writer
removes leftover temporaries when it opens its `Checkpoints` (`cleanup_tmp=True`).
`commit_file=True` uses the gs:// regime on any path (tests exercise it on a local disk).
Numbered steps are kept to the last `keep_last`; historical checkpoints (e.g. the
behavior-policy snapshot of each Thinking Seeds refresh cycle) stay until `delete_historical`
removes them. A restore whose arrays do not have the target's shapes is an error naming the
array (Orbax would return the shape on disk for numpy targets).

Restoring onto a layout: pass `target`, a pytree with the saved structure whose leaves are
arrays or `jax.ShapeDtypeStruct`s carrying the wanted `sharding` (see `abstract_target`); the
arrays come back sharded that way, whatever the mesh was at save time, and containers come back
as the target's types (optax states, int dict keys). Without a target, arrays come back with
their saved layout and containers as dicts/lists with string keys.
"""

from __future__ import annotations

import os
import re
import time
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp
from etils import epath

STATE, META = "state", "meta"
HISTORICAL_DIR = "historical"
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def _path(path) -> epath.Path:
    """epath.Path; local paths made absolute (Orbax's tensorstore layer requires it)."""
    text = str(path)
    if "://" in text:
        return epath.Path(text)
    return epath.Path(os.path.abspath(os.path.expanduser(text)))


def _committed(path: epath.Path, commit_file: bool) -> bool:
    """Whether Orbax finished writing the checkpoint directory `path` (either commit regime)."""
    if ".orbax-checkpoint-tmp" in path.name:
        return False
    if commit_file or str(path).startswith("gs://"):
        return (path / "commit_success.txt").exists()
    return True


def abstract_target(tree, shardings=None):
    """`jax.ShapeDtypeStruct`s for the array leaves of `tree` (arrays or ShapeDtypeStructs).

    shardings: None (keep each jax.Array's own sharding), one `jax.sharding.Sharding` for all
    leaves, or a pytree of shardings with the structure of `tree`. numpy leaves stay numpy
    (restored to host), scalars are kept as they are.
    """
    def one(x, s):
        if isinstance(x, np.ndarray | np.generic | int | float):
            return x
        if not hasattr(x, "shape"):
            return x
        s = s if s is not None else getattr(x, "sharding", None)
        return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s)

    if shardings is None or isinstance(shardings, jax.sharding.Sharding):
        return jax.tree.map(lambda x: one(x, shardings), tree)
    return jax.tree.map(one, tree, shardings)


def _savable(tree):
    # Orbax's standard handler takes arrays and Python scalars but not numpy scalars
    # (np.float32(...)); they travel as 0-d arrays and `_unsavable` turns them back.
    return jax.tree.map(lambda x: np.asarray(x) if isinstance(x, np.generic) else x, tree)


def _check_shapes(restored, target, where) -> None:
    """Orbax restores a numpy target leaf with the shape on disk, whatever the target says: a
    checkpoint of another model would load silently. Every shape must match."""
    if target is None:
        return
    got = jax.tree_util.tree_flatten_with_path(restored)[0]
    want = jax.tree_util.tree_leaves(target)
    for (keypath, r), t in zip(got, want):
        if hasattr(t, "shape") and tuple(np.shape(r)) != tuple(t.shape):
            raise ValueError(f"{where}: array {jax.tree_util.keystr(keypath)} has shape "
                             f"{tuple(np.shape(r))} on disk; expected {tuple(t.shape)}")


def _unsavable(restored, target):
    if target is None:
        return restored
    return jax.tree.map(lambda r, t: t.dtype.type(r) if isinstance(t, np.generic) else r,
                        restored, target)


ASYNC_TIMEOUT_S = 4 * 3600  # the longest an asynchronous write may take
# Callables run, with a label, at two moments of every checkpoint write: "seed-cache-written
# step=N" (rl/run/state_io.py, before Orbax starts) and "orbax-uncommitted DIR" (every item written,
# not yet committed; in Orbax's background thread when saves are asynchronous). Empty in a run;
# tests add some (tests/checkpoint_hooks.py) to kill a process in the middle of a write or to
# slow the filesystem, as benchmarks/bench_checkpoint.py does to stand in for a slow bucket.
WRITE_OBSERVERS: list = []


def observe_write(where: str) -> None:
    for observer in WRITE_OBSERVERS:
        observer(where)


class _MetaHandler(ocp.JsonCheckpointHandler):
    """The meta item's handler; its `finalize` runs when every item is written to the
    temporary directory and before Orbax commits it (in Orbax's background thread when saves
    are asynchronous): `WRITE_OBSERVERS` see that moment."""

    def finalize(self, directory) -> None:
        observe_write(f"orbax-uncommitted {directory}")
        super().finalize(directory)


# Orbax finds an item's handler by the type of its args: the meta item gets args types of its
# own (same on-disk format as JsonSave / JsonRestore).
@ocp.args.register_with_handler(_MetaHandler, for_save=True)
class _MetaSave(ocp.args.JsonSave):
    pass


@ocp.args.register_with_handler(_MetaHandler, for_restore=True)
class _MetaRestore(ocp.args.JsonRestore):
    pass


def _handler(compress: bool) -> ocp.CompositeCheckpointHandler:
    return ocp.CompositeCheckpointHandler(**_item_handlers(compress))


def _item_handlers(compress: bool) -> dict:
    return {STATE: ocp.PyTreeCheckpointHandler(use_compression=compress),
            META: _MetaHandler()}


def _tmp_class(path: epath.Path, commit_file: bool):
    # None: Orbax's default (atomic rename locally, commit_success.txt on gs://).
    return ocp.path.atomicity.CommitFileTemporaryPath if commit_file else None


def _restore_args(target):
    if target is None:
        state = ocp.args.PyTreeRestore()
    else:
        target = _savable(target)
        state = ocp.args.PyTreeRestore(
            item=target, restore_args=ocp.checkpoint_utils.construct_restore_args(target))
    return ocp.args.Composite(**{STATE: state, META: _MetaRestore()})


def _save_args(state, meta):
    if meta is not None and not isinstance(meta, dict):
        raise TypeError(f"meta must be a JSON-able dict, got {type(meta).__name__}")
    return ocp.args.Composite(**{STATE: ocp.args.PyTreeSave(_savable(state)),
                                 META: _MetaSave(dict(meta or {}))})


def save_pytree(path, state, meta: dict | None = None, *, overwrite: bool = False,
                compress: bool = True, commit_file: bool = False) -> epath.Path:
    """Writes one standalone checkpoint (state pytree + JSON meta) at `path`, atomically.

    compress: zstd-compress array chunks (Orbax's default). Model weights barely compress and
    compression buffers cost about one extra copy of the arrays in host memory, so the model
    converter passes False.
    """
    path = _path(path)
    if path.exists() and not overwrite:
        raise FileExistsError(f"{path}: checkpoint already exists (pass overwrite=True)")
    with ocp.Checkpointer(_handler(compress),
                          temporary_path_class=_tmp_class(path, commit_file)) as ckptr:
        ckptr.save(path, args=_save_args(state, meta), force=overwrite)
    return path


def restore_pytree(path, target=None) -> tuple[Any, dict]:
    """(state, meta) of a checkpoint written by `save_pytree`; see the module doc for `target`."""
    path = _path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no checkpoint there")
    with ocp.Checkpointer(_handler(True)) as ckptr:
        out = ckptr.restore(path, args=_restore_args(target))
    _check_shapes(out[STATE], target, path)
    return _unsavable(out[STATE], target), dict(out[META] or {})


def read_meta(path) -> dict:
    """The JSON meta of a standalone checkpoint, without reading its arrays."""
    path = _path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no checkpoint there")
    with ocp.Checkpointer(_handler(True)) as ckptr:
        out = ckptr.restore(path, args=ocp.args.Composite(**{META: _MetaRestore()}))
    return dict(out[META] or {})


class Checkpoints:
    """Numbered train-state checkpoints (keep the last N) plus named historical snapshots.

        ckpts = Checkpoints("runs/x/ckpt", keep_last=3)
        ckpts.save(step, state, meta={"data_pos": 17})
        state, meta = ckpts.restore(target=abstract_target(state))   # latest step
        ckpts.save_historical("behavior-0008", params)               # never garbage-collected

    `state` is any pytree of jax/numpy arrays and Python scalars (params, optax state, RNG keys
    as data). `meta` is a JSON-able dict. Saves are synchronous unless `async_save=True`:
    then `save` returns once the arrays are copied to host memory and Orbax writes and commits
    the step in a background thread (a step is listed only once committed); the next `save`
    first waits for the previous one; call `wait()` before reading what was written or exiting.
    """

    def __init__(self, directory, *, keep_last: int | None = 3, async_save: bool = False,
                 commit_file: bool = False, cleanup_tmp: bool = False):
        """cleanup_tmp: delete what killed saves left behind. Only the run's writer may: a
        reader (evaluation of a live run) would delete the writer's save in progress."""
        if keep_last is not None and (not isinstance(keep_last, int) or keep_last < 1):
            raise ValueError(f"keep_last={keep_last!r}: must be a positive int or None (keep all)")
        self.directory = _path(directory)
        self.commit_file = commit_file
        # A background write must end within the timeout (Orbax's default, 20 min, is short
        # for a 100 GB state written to a bucket).
        async_options = ocp.options.AsyncOptions(timeout_secs=ASYNC_TIMEOUT_S)
        options = ocp.CheckpointManagerOptions(
            max_to_keep=keep_last, create=True, enable_async_checkpointing=async_save,
            cleanup_tmp_directories=cleanup_tmp, async_options=async_options,
            temporary_path_class=_tmp_class(self.directory, commit_file))
        self._manager = ocp.CheckpointManager(self.directory, options=options,
                                              item_handlers=_item_handlers(True))
        # Historical snapshots are written in the background too when saves are asynchronous.
        self._historical = (ocp.AsyncCheckpointer(
            _handler(True), async_options=async_options,
            temporary_path_class=_tmp_class(self.directory, commit_file))
            if async_save else None)

    # ---- numbered steps ----
    def save(self, step: int, state, meta: dict | None = None, *, force: bool = True) -> bool:
        """Saves `state` and `meta` as step `step`; returns whether a checkpoint was written.

        A step that already exists is an error (Orbax's StepAlreadyExistsError).
        """
        if not isinstance(step, int | np.integer) or step < 0:
            raise ValueError(f"step={step!r}: must be a non-negative int")
        return self._manager.save(int(step), args=_save_args(state, meta), force=force)

    def restore(self, step: int | None = None, target=None) -> tuple[Any, dict]:
        """(state, meta) of `step` (default: the latest); raises if there is none."""
        if step is None:
            step = self.latest_step()
            if step is None:
                raise FileNotFoundError(f"{self.directory}: no checkpoints to restore")
        elif int(step) not in self.steps():
            raise FileNotFoundError(f"{self.directory}: no checkpoint for step {step}; "
                                    f"available: {self.steps()}")
        out = self._manager.restore(int(step), args=_restore_args(target))
        _check_shapes(out[STATE], target, self.directory / str(step))
        return _unsavable(out[STATE], target), dict(out[META] or {})

    def read_meta(self, step: int | None = None) -> dict:
        step = self.latest_step() if step is None else step
        if step is None:
            raise FileNotFoundError(f"{self.directory}: no checkpoints")
        out = self._manager.restore(int(step),
                                    args=ocp.args.Composite(**{META: _MetaRestore()}))
        return dict(out[META] or {})

    def steps(self) -> list[int]:
        """All numbered steps on disk, ascending."""
        self._manager.reload()
        return sorted(self._manager.all_steps())

    def latest_step(self) -> int | None:
        steps = self.steps()
        return steps[-1] if steps else None

    # ---- historical (named) ----
    def _historical_path(self, name: str) -> epath.Path:
        if not isinstance(name, str) or not _NAME_RE.match(name):
            raise ValueError(f"historical checkpoint name {name!r}: use letters, digits, '.', "
                             "'_' and '-' (not starting with a symbol)")
        return self.directory / HISTORICAL_DIR / name

    def save_historical(self, name: str, state, meta: dict | None = None, *,
                        overwrite: bool = False) -> epath.Path:
        """Saves a named snapshot that `keep_last` never deletes; returns its path. With
        `async_save`, written in the background like the numbered steps (`wait()`), without
        waiting for a numbered step in flight."""
        if self._historical is None:
            self.wait()
        path = self._historical_path(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        if self._historical is None:
            return save_pytree(path, state, meta, overwrite=overwrite,
                               commit_file=self.commit_file)
        if path.exists() and not overwrite:
            raise FileExistsError(f"{path}: checkpoint already exists (pass overwrite=True)")
        self._historical.save(path, args=_save_args(state, meta), force=overwrite)
        return path

    def restore_historical(self, name: str, target=None) -> tuple[Any, dict]:
        path = self._historical_path(name)
        if not path.exists():
            raise FileNotFoundError(f"{path}: no historical checkpoint {name!r}; available: "
                                    f"{self.historical_names()}")
        return restore_pytree(path, target)

    def historical_names(self) -> list[str]:
        root = self.directory / HISTORICAL_DIR
        if not root.exists():
            return []
        # In-progress temporaries: a ".orbax-checkpoint-tmp" suffix, or (commit-file regime,
        # gs://) no commit_success.txt yet.
        return sorted(p.name for p in root.iterdir()
                      if p.is_dir() and _committed(p, self.commit_file))

    def delete_historical(self, name: str) -> None:
        path = self._historical_path(name)
        if path.exists():
            path.rmtree()

    # ---- lifecycle ----
    def saving(self) -> bool:
        """Whether an asynchronous save of a numbered step is still being written (Orbax's
        view on this host)."""
        return bool(self._manager.is_saving_in_progress())

    def wait(self) -> float:
        """Blocks until pending asynchronous saves (numbered and historical) are committed;
        returns the seconds waited. A failed background write raises here."""
        t0 = time.perf_counter()
        self._manager.wait_until_finished()
        self._manager.check_for_errors()
        if self._historical is not None:
            self._historical.wait_until_finished()
            self._historical.check_for_errors()
        return time.perf_counter() - t0

    def close(self) -> None:
        self.wait()
        self._manager.close()
        if self._historical is not None:
            self._historical.close()

    def __enter__(self) -> Checkpoints:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
