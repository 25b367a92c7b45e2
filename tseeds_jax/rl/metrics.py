"""Per-step metrics to JSONL and TensorBoard (only process 0 writes)."""

from __future__ import annotations

import json
import math
import os
from typing import Any

import jax
import numpy as np


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
    """Appends one JSON line per step to `metrics.jsonl`; scalars also go to TensorBoard."""

    def __init__(self, run_dir: str, *, tensorboard: bool = True):
        self.enabled = jax.process_index() == 0
        self.path = os.path.join(run_dir, "metrics.jsonl")
        self._tb = None
        if not self.enabled:
            return
        os.makedirs(run_dir, exist_ok=True)
        if tensorboard:
            from tensorboardX import SummaryWriter

            self._tb = SummaryWriter(os.path.join(run_dir, "tb"))

    def truncate_after(self, step: int) -> None:
        """Drops lines of steps >= `step` (a resumed run rewrites them)."""
        if not self.enabled or not os.path.exists(self.path):
            return
        with open(self.path) as f:
            keep = [line for line in f if line.strip() and json.loads(line)["step"] < step]
        with open(self.path, "w") as f:
            f.writelines(keep)

    def write(self, step: int, metrics: dict[str, Any]) -> None:
        if not self.enabled:
            return
        record = {"step": step, **to_python(metrics)}
        with open(self.path, "a") as f:
            f.write(json.dumps(record) + "\n")
        if self._tb is not None:
            for k, v in record.items():
                if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool):
                    self._tb.add_scalar(k, v, step)

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()


def read_metrics(run_dir: str) -> list[dict[str, Any]]:
    path = os.path.join(run_dir, "metrics.jsonl")
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]
