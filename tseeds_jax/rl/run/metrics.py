"""Per-step metrics to JSONL and TensorBoard (only process 0 writes)."""

from __future__ import annotations

import json
import math
import os
import shutil
from typing import Any

import jax
import numpy as np
from etils import epath

from tseeds_jax.rl.run import run_files


def to_python(value: Any):
    """JSON-able form: arrays become lists, non-finite floats become None."""
    if isinstance(value, dict):
        return {k: to_python(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_python(v) for v in value]
    arr = np.asarray(value) if hasattr(value, "shape") or isinstance(value, (np.generic,)) else None
    if arr is not None:
        value = arr.tolist()
        return to_python(value) if isinstance(value, list) else _clean(value)
    return _clean(value)


def _clean(v):
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


class MetricsWriter:
    """Appends one JSON line per step to `metrics.jsonl`; scalars also go to TensorBoard.

    metrics.jsonl is the record of the run; TensorBoard's events are rebuilt from it when a run
    resumes (`truncate_after`), so that neither holds a step twice or misses one, wherever a
    kill landed (mid-line included)."""

    def __init__(self, run_dir: str, *, tensorboard: bool = True, remote: bool | None = None):
        """remote: write into a local mirror and `sync` to `run_dir` (default: for URL run dirs
        such as gs://; see rl/run/run_files.py)."""
        self.enabled = jax.process_index() == 0
        self.run_dir = run_dir
        self.remote = run_files.is_remote(run_dir) if remote is None else remote
        local = run_files.local_dir(run_dir, remote=self.remote)
        self.path = os.path.join(local, "metrics.jsonl")
        self.tb_dir = os.path.join(local, "tb")
        self._tb = None
        self._tensorboard = tensorboard
        self._n_tb = 0
        if not self.enabled:
            return
        os.makedirs(local, exist_ok=True)
        if self.remote and not run_files.pull(run_dir, "metrics.jsonl", remote=True):
            if os.path.exists(self.path):  # a mirror left by an earlier run of this name
                os.remove(self.path)
        self._open_tb()

    def sync(self) -> None:
        """Copies metrics.jsonl and the TensorBoard events to a remote run dir (after each
        checkpoint, so the remote record is never behind the checkpoint a resume starts from)."""
        self._push(reopen=True)

    def _push(self, *, reopen: bool) -> None:
        if not (self.enabled and self.remote):
            return
        run_files.push(self.run_dir, "metrics.jsonl", remote=True)
        if self._tb is not None:
            self._tb.close()
            self._tb = None
            run_files.push(self.run_dir, "tb", remote=True)
            if reopen:
                self._open_tb()

    def _open_tb(self) -> None:
        if self._tensorboard:
            from tensorboardX import SummaryWriter

            # A fresh event file per sync: only close() drains tensorboardX's writer thread.
            self._n_tb += 1
            self._tb = SummaryWriter(self.tb_dir, filename_suffix=f".{self._n_tb}")

    def truncate_after(self, step: int) -> None:
        """Keeps the lines of steps < `step` (a resumed run rewrites the others) and rebuilds
        the TensorBoard events from them. A torn last line (a kill mid-write) is dropped."""
        if not self.enabled:
            return
        keep = []
        if os.path.exists(self.path):
            with open(self.path) as f:
                for line in f:
                    try:
                        record = json.loads(line)
                    except json.JSONDecodeError:
                        continue  # only a kill mid-write leaves a partial line
                    if record["step"] < step:
                        keep.append(record)
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in keep)
        os.replace(tmp, self.path)  # atomic: a kill now leaves the old or the new file
        if self._tb is not None:
            self._tb.close()
            shutil.rmtree(self.tb_dir, ignore_errors=True)
            self._open_tb()
            for r in keep:
                self._tb_scalars(r)
            self._tb.flush()

    def _tb_scalars(self, record: dict[str, Any]) -> None:
        for k, v in record.items():
            if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool):
                self._tb.add_scalar(k, v, record["step"])

    def write(self, step: int, metrics: dict[str, Any]) -> None:
        if not self.enabled:
            return
        record = {"step": step, **to_python(metrics)}
        with open(self.path, "a") as f:
            f.write(json.dumps(record) + "\n")
        if self._tb is not None:
            self._tb_scalars(record)

    def close(self) -> None:
        self._push(reopen=False)
        if self._tb is not None:
            self._tb.close()
            self._tb = None


def read_metrics(run_dir: str) -> list[dict[str, Any]]:
    """The records of `run_dir/metrics.jsonl`, local or remote (gs://)."""
    text = (epath.Path(run_dir) / "metrics.jsonl").read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()]
