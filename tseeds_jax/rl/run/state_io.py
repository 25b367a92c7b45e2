"""Checkpoints of a training run: train state, seed cache and data position, resumed exactly.

    RUN_DIR/ckpt/<step>/...                      TrainState (Orbax); meta: data position, config
    RUN_DIR/ckpt/historical/behavior-<step>      behavior-policy snapshot of each refresh (pi_b)
    RUN_DIR/ckpt/historical/nan-<step>           the state at a non-finite loss, for inspection
    RUN_DIR/seed_cache/<step>/host-<i>.npz|json  each host's slice of the seed cache
    RUN_DIR/seed_cache/<step>/host-<i>.extra.npz|json  the batch sources' and the learner hooks'
                                                 state carried across steps (M2PO's queue, the
                                                 partial-rollout pool, STARE's controller, SIS's
                                                 seed top-K), when there is any

The seed cache is host-local (every host keeps the seeds of its own samples), so each process
writes its own file, before the Orbax step that makes the checkpoint visible; a seed-cache file
without its Orbax step is ignored and later removed.

A process killed at any moment leaves at worst an uncommitted Orbax step (never listed) and
seed-cache files of that step (overwritten when the step is saved again). A committed step that
does not restore (a truncated file, a tree that does not match the model) is reported with its
path and the run falls back to the newest step before it that does restore, with a loud
warning; the broken steps are moved to RUN_DIR/ckpt/corrupt/ so that they are never taken as the
latest again (docs/tpu.md, "Preemption"). When no step restores, nothing is moved and
`CheckpointError` lists every step's path and error.

Only data errors set a step aside: truncated or missing files, arrays of another shape or dtype,
unreadable metadata. An error of the storage or of the machine (I/O, a bucket's 5xx or 429, a
timeout, an expired token or a refused permission, out of memory; `transient_reason`) says
nothing about the checkpoint: the read is retried with exponential backoff (`RESTORE_RETRIES`
attempts) and then the restore fails with `CheckpointUnavailableError`, moving nothing.

Saves may be asynchronous (`async_save`; Orbax writes while the next steps run). The commit
order holds: a step's seed-cache files are written before its Orbax save starts, and the files
of older steps are removed only once every earlier save has committed (the next save, or
`finish`, waits for the one in flight first).
"""

from __future__ import annotations

import errno
import io
import json
import logging
import os
import re
import sys
import time
from typing import Any

import jax
import numpy as np
from etils import epath

from tseeds_jax import checkpoint
from tseeds_jax.rl.run import hosts as hosts_lib
from tseeds_jax.seeds import SeedCache

log = logging.getLogger(__name__)
CORRUPT_DIR = "corrupt"


RESTORE_RETRIES = 4  # attempts at a step whose read fails with a transient error
RESTORE_BACKOFF_S = 2.0  # first wait between attempts; doubles each time (2, 4, 8 s)


class CheckpointError(RuntimeError):
    """No committed checkpoint of the run restores; the message names each path and error."""


class CheckpointUnavailableError(CheckpointError):
    """A checkpoint could not be read for a reason that says nothing about its data (I/O,
    timeout, auth, memory), after retries; nothing was set aside."""


# Errors of the storage or the machine, not of the checkpoint's data. errno values of OSError:
_TRANSIENT_ERRNO = {errno.EIO, errno.ETIMEDOUT, errno.ECONNRESET, errno.ECONNREFUSED,
                    errno.ECONNABORTED, errno.EAGAIN, errno.ENOMEM, errno.EACCES, errno.EPERM,
                    errno.EHOSTUNREACH, errno.ENETUNREACH, errno.ENETDOWN, errno.EPIPE,
                    errno.ESTALE, errno.EREMOTEIO, errno.EBUSY}
# Exception class names of the Google client libraries (not imported here: optional).
_TRANSIENT_NAMES = {"RefreshError", "TransportError", "DefaultCredentialsError",
                    "ServiceUnavailable", "InternalServerError", "BadGateway", "GatewayTimeout",
                    "TooManyRequests", "DeadlineExceeded", "Unauthorized", "Forbidden",
                    "RetryError", "ServerDisconnectedError", "ClientConnectionError"}
# Status words of tensorstore / gRPC / XLA and HTTP codes in a message.
_TRANSIENT_TEXT = re.compile(
    r"\b(UNAVAILABLE|DEADLINE_EXCEEDED|RESOURCE_EXHAUSTED|PERMISSION_DENIED|UNAUTHENTICATED"
    r"|ABORTED|out of memory|timed? ?out|HTTP (?:error )?(?:5\d\d|429|401|403)"
    r"|(?:status|code)[ =:]+(?:5\d\d|429|401|403))\b", re.IGNORECASE)


def transient_reason(exc: BaseException) -> str | None:
    """Why `exc` (or an exception it was raised from) is an error of the storage or the machine
    rather than of the checkpoint's data ("I/O", "timeout", "auth", "memory"), or None.

    Data errors return None: FileNotFoundError, a truncated file, a shape or dtype mismatch,
    unreadable JSON metadata."""
    seen = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, MemoryError):
            return "memory"
        if isinstance(e, TimeoutError):
            return "timeout"
        if isinstance(e, PermissionError):
            return "auth"
        if isinstance(e, ConnectionError):
            return "I/O"
        if isinstance(e, OSError) and not isinstance(e, FileNotFoundError | IsADirectoryError
                                                     | NotADirectoryError):
            if e.errno in _TRANSIENT_ERRNO:
                return "memory" if e.errno == errno.ENOMEM else "I/O"
        if type(e).__name__ in _TRANSIENT_NAMES:
            return type(e).__name__
        m = _TRANSIENT_TEXT.search(str(e))
        if m:
            return m.group(1)
        e = e.__cause__ or e.__context__
    return None


class RunCheckpointer:
    def __init__(self, run_dir: str, *, keep_last: int = 2, response_width: int,
                 snapshots: bool = True, config_json: dict | None = None,
                 commit_file: bool = False, async_save: bool | None = None,
                 retries: int = RESTORE_RETRIES, backoff_s: float = RESTORE_BACKOFF_S,
                 sleep=time.sleep, run_meta: dict | None = None):
        """run_meta: fields added to every checkpoint's meta (what the model started from and
        the tokenizer, rl/run/source.py), checked against the checkpoint's at restore.
        commit_file: Orbax's gs:// commit regime (commit_success.txt) on any path.
        async_save: Orbax writes each step in the background (None: the run config's
        `checkpoint_async`, off without one). retries, backoff_s, sleep: transient read errors
        at restore (module doc)."""
        if not isinstance(retries, int) or retries < 1:
            raise ValueError(f"retries={retries!r}: must be an int >= 1")
        self.config_json = config_json or {}
        self.run_meta = dict(run_meta or {})
        if async_save is None:
            async_save = bool(self.config_json.get("checkpoint_async", False))
        self.async_save = async_save
        self.retries, self.backoff_s, self._sleep = retries, float(backoff_s), sleep
        self.ckpts = checkpoint.Checkpoints(os.path.join(run_dir, "ckpt"), keep_last=keep_last,
                                            commit_file=commit_file, cleanup_tmp=True,
                                            async_save=async_save)
        self.seed_dir = epath.Path(str(self.ckpts.directory)).parent / "seed_cache"
        self.response_width = response_width
        self.snapshots = snapshots
        # (step, start of its background write or None once timed) of the save in flight
        self._pending: tuple[int, float | None] | None = None
        self.last_blocking_s = self.last_write_s = 0.0

    # ---- the host-local seed cache ----
    def _seed_path(self, step: int, suffix: str) -> epath.Path:
        return self.seed_dir / str(step) / f"host-{jax.process_index():04d}.{suffix}"

    def _write_seed_cache(self, step: int, cache: SeedCache) -> None:
        for suffix, payload in (("npz", cache.to_pytree(self.response_width)),
                                ("json", cache.to_json())):
            path = self._seed_path(step, suffix)
            path.parent.mkdir(parents=True, exist_ok=True)
            buf = io.BytesIO()
            if suffix == "npz":
                np.savez(buf, **payload)
            else:
                buf.write(json.dumps(payload).encode())
            tmp = path.parent / (path.name + ".tmp")
            tmp.write_bytes(buf.getvalue())
            tmp.replace(path)  # a file left by a killed attempt at this step: overwrite

    def _write_extra(self, step: int, extra: dict) -> None:
        """extra: {"arrays": flat dict name -> numpy array, "json": dict}, written atomically."""
        for suffix in ("extra.npz", "extra.json"):
            path = self._seed_path(step, suffix)
            path.parent.mkdir(parents=True, exist_ok=True)
            buf = io.BytesIO()
            if suffix == "extra.npz":
                np.savez(buf, **extra["arrays"])
            else:
                buf.write(json.dumps(extra["json"]).encode())
            tmp = path.parent / (path.name + ".tmp")
            tmp.write_bytes(buf.getvalue())
            tmp.replace(path)  # a file left by a killed attempt at this step: overwrite

    def _read_extra(self, step: int) -> dict | None:
        npz, js = self._seed_path(step, "extra.npz"), self._seed_path(step, "extra.json")
        if not npz.exists() or not js.exists():
            return None
        with np.load(io.BytesIO(npz.read_bytes())) as arrays:
            flat = {k: arrays[k] for k in arrays.files}
        return {"arrays": flat, "json": json.loads(js.read_text())}

    def _read_seed_cache(self, step: int) -> SeedCache:
        npz, js = self._seed_path(step, "npz"), self._seed_path(step, "json")
        if not npz.exists() or not js.exists():
            raise FileNotFoundError(f"{npz}: seed cache of checkpoint step {step} is missing")
        with np.load(io.BytesIO(npz.read_bytes())) as arrays:
            tree = {k: arrays[k] for k in arrays.files}
        return SeedCache.from_state(tree, json.loads(js.read_text()))

    def _collect_seed_garbage(self) -> None:
        if not self.seed_dir.exists():
            return
        keep = {str(s) for s in self.ckpts.steps()}
        for d in self.seed_dir.iterdir():
            mine = d / f"host-{jax.process_index():04d}.npz"
            if d.name not in keep and mine.exists():
                for f in d.iterdir():
                    if f.name.startswith(f"host-{jax.process_index():04d}."):
                        f.unlink()

    # ---- public ----
    def save(self, step: int, state, cache: SeedCache, prompts, *, tag: str = "",
             extra: dict | None = None) -> str:
        """extra: optional cross-step state ({"arrays", "json"}: `pack_extra`), host-local."""
        meta = {"step": step, "data": prompts.get_state(), "tag": tag,
                "config": self.config_json, **self.run_meta}
        if tag == "nan":
            name = f"nan-{step:08d}"
            self.ckpts.save_historical(name, {"train": state}, meta, overwrite=True)
            self.ckpts.wait()  # the run stops on this error: the state must be on disk
            return str(self.ckpts.directory / checkpoint.HISTORICAL_DIR / name)
        # The write in flight commits first: only then are older seed-cache files garbage.
        self.finish(f"before the checkpoint of step {step}")
        if step not in self.ckpts.steps():
            self._write_seed_cache(step, cache)
            if extra:
                self._write_extra(step, extra)
            checkpoint.observe_write(f"seed-cache-written step={step}")
            t0 = time.perf_counter()
            self.ckpts.save(step, {"train": state}, meta)
            # the background part of the write is timed from here (`saving`, `finish`)
            self._pending = (step, time.perf_counter())
            self.last_blocking_s = self._pending[1] - t0
        if not self.async_save:
            self.finish()
        return str(self.ckpts.directory / str(step))

    def saving(self) -> bool:
        """Whether an asynchronous save is still being written; records its write time once
        it is done (`last_write_s`, an upper bound by the time between calls)."""
        busy = self._pending is not None and self.ckpts.saving()
        if self._pending is not None and not busy and self._pending[1] is not None:
            self.last_write_s = time.perf_counter() - self._pending[1]
            self._pending = (self._pending[0], None)  # measured
        return busy

    def finish(self, why: str = "") -> float:
        """Waits for the save in flight to commit (reported when it had to wait), then removes
        the seed-cache files of steps no longer kept; returns the seconds waited."""
        waited = self.ckpts.wait()
        if self._pending is not None:
            step, start = self._pending
            if start is not None:  # not yet measured by `saving`
                self.last_write_s = time.perf_counter() - start
            self._pending = None
            if waited > 0.05 and why:
                msg = (f"[tseeds] waited {waited:.1f} s for the checkpoint of step {step} to be "
                       f"written ({why})")
                log.info(msg)
                print(msg, file=sys.stderr, flush=True)
        self._collect_seed_garbage()
        return waited

    def estimate_save_s(self) -> float:
        """Seconds a save started now takes until committed, from the last ones measured (0
        before any): its blocking part and its write, after the write in flight if any."""
        writes = 2 if self.saving() else 1
        return self.last_blocking_s + writes * self.last_write_s

    def save_behavior_snapshot(self, step: int, params) -> None:
        if self.snapshots:
            self.ckpts.save_historical(f"behavior-{step:08d}", params, {"step": step},
                                       overwrite=True)

    def restore_latest(self, state_template, *, with_extra: bool = False) -> tuple[Any, ...] | None:
        """(step, TrainState, SeedCache, data position) of the newest committed checkpoint that
        restores, or None when there is none; see the module doc for broken ones.

        with_extra: append the loss-family state given to `save` (or None) to the tuple.
        """
        self._check_sources()
        hosts = hosts_lib.Hosts.current()
        target = {"train": checkpoint.abstract_target(state_template)}
        broken: list[tuple[int, str]] = []
        for step in reversed(self.ckpts.steps()):
            out, why, transient = self._restore_with_retries(step, target)
            # Every host must take the same step: a file that only one host reads may be bad.
            # 1: restored, 0: a data error, 2: the storage or the machine failed.
            code = 1 if out is not None else (2 if transient else 0)
            codes = hosts_lib.gather_rows(np.array([code], np.int32), hosts)
            if codes.max() == 2:
                where = self.ckpts.directory / str(step)
                who = np.flatnonzero(codes == 2).tolist()
                raise CheckpointUnavailableError(
                    f"{where}: could not be read on host(s) {who} after {self.retries} attempts"
                    + (f" ({why})" if why else "") + "; an error of the storage or the "
                    "machine (I/O, timeout, credentials, memory), not of the checkpoint: nothing "
                    "was set aside. Fix access or memory and relaunch; the run resumes from it.")
            if codes.min():
                if broken:
                    self._set_aside(broken, step, hosts)
                return out if with_extra else out[:4]
            if not why:
                why = f"it does not restore on host(s) {np.flatnonzero(codes == 0).tolist()}"
            broken.append((step, why))
        if broken:
            raise CheckpointError(
                "no checkpoint of the run restores:\n" + "\n".join(
                    f"  {self.ckpts.directory / str(s)}: {why}" for s, why in broken))
        return None

    def _check_sources(self) -> None:
        """A resumed run must start from the base and tokenizer its latest checkpoint records
        (rl/run/source.py; a checkpoint without the fields, written before them, resumes as
        before). Outside the per-step restore: a changed base says nothing about the step's
        data, so no step is set aside for it."""
        from tseeds_jax.rl.run import source as source_lib

        steps = self.ckpts.steps()
        if not steps or not self.run_meta:
            return
        try:
            meta = self.ckpts.read_meta(steps[-1])
        except Exception:  # noqa: BLE001 -- an unreadable step is the restore loop's business
            return
        where = f"{self.ckpts.directory / str(steps[-1])} meta"
        for key, what in (("model_source", "base model"), ("tokenizer", "tokenizer")):
            if meta.get(key) and self.run_meta.get(key):
                source_lib.check(meta[key], self.run_meta[key], f"{where} {key}", what)

    def _restore_with_retries(self, step: int, target) -> tuple[tuple | None, str, bool]:
        """(restored tuple or None, the error, whether it was transient) for one step: a
        transient error (`transient_reason`) is retried with exponential backoff."""
        wait = self.backoff_s
        for attempt in range(1, self.retries + 1):
            try:
                return self._restore_step(step, target), "", False
            except Exception as e:  # noqa: BLE001 -- classified below; the message names it
                why = f"{type(e).__name__}: {e}"
                kind = transient_reason(e)
                if kind is None:
                    return None, why, False
                if attempt == self.retries:
                    return None, f"{kind}: {why}", True
                msg = (f"WARNING: reading checkpoint {self.ckpts.directory / str(step)} failed "
                       f"({kind}: {why}); attempt {attempt}/{self.retries}, retrying in "
                       f"{wait:g} s")
                log.warning(msg)
                print(msg, file=sys.stderr, flush=True)
                self._sleep(wait)
                wait *= 2
        raise AssertionError("unreachable")

    def _restore_step(self, step: int, target) -> tuple:
        meta = self.ckpts.read_meta(step)
        tree, _ = self.ckpts.restore(step, target=target)
        return (int(meta["step"]), tree["train"], self._read_seed_cache(step), meta["data"],
                self._read_extra(step))

    def _set_aside(self, broken: list[tuple[int, str]], good: int, hosts) -> None:
        """Moves the broken steps (newer than `good`) to ckpt/corrupt/ and says so loudly."""
        corrupt = self.ckpts.directory / CORRUPT_DIR
        lines = []
        for step, why in broken:
            src = self.ckpts.directory / str(step)
            dst = corrupt / str(step)
            n = 1
            while dst.exists():
                dst, n = corrupt / f"{step}-{n}", n + 1
            if hosts.index == 0:
                corrupt.mkdir(parents=True, exist_ok=True)
                src.rename(dst)
            lines.append(f"  {src}: {why}\n    moved to {dst}")
        if not hosts.single:
            from jax.experimental import multihost_utils

            multihost_utils.sync_global_devices("tseeds-set-aside-corrupt-checkpoints")
        msg = ("WARNING: checkpoint(s) of the run do not restore; resuming from step "
               f"{good} ({self.ckpts.directory / str(good)}) instead:\n" + "\n".join(lines))
        log.warning(msg)
        print(msg, file=sys.stderr, flush=True)


def pack_extra(parts: dict[str, tuple[Any, Any]]) -> dict[str, Any] | None:
    """{"arrays": flat name -> numpy array, "json": dict} of the cross-step state of every part
    ({checkpoint key: (arrays tree, json meta or None)}), or None when there is none."""
    if not parts:
        return None
    tree = {key: t for key, (t, _) in parts.items()}
    meta = {key: m for key, (_, m) in parts.items() if m is not None}
    return {"arrays": _flatten(tree), "json": meta}


def unpack_extra(extra: dict[str, Any] | None) -> dict[str, tuple[Any, Any]]:
    """The inverse of `pack_extra`: {checkpoint key: (arrays tree or None, meta or None)}."""
    tree = _unflatten((extra or {}).get("arrays") or {})
    meta = (extra or {}).get("json") or {}
    return {key: (tree.get(key), meta.get(key)) for key in set(tree) | set(meta)}


def _flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, np.ndarray]:
    out = {}
    for key, value in tree.items():
        if "/" in key:
            raise ValueError(f"state key {key!r} contains '/'")
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flatten(value, name + "/"))
        else:
            out[name] = np.asarray(value)
    return out


def _unflatten(flat: dict[str, Any]) -> dict[str, Any]:
    tree: dict[str, Any] = {}
    for name, value in flat.items():
        node = tree
        *path, last = name.split("/")
        for p in path:
            node = node.setdefault(p, {})
        node[last] = value
    return tree
