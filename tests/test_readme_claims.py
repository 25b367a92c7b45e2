"""README claims about a training run's outputs: TensorBoard events hold the logged scalars, and
the sampler-vs-learner log-prob gap is ~0 when both use the same parameters and grows when they do
not. (Ctrl-C leaving a checkpoint is tested with the preemption tests.)

The event files are read back with a reader written here from the TFRecord framing (length,
masked CRC-32C of the length, payload, masked CRC-32C of the payload) and the Event protobuf
schema, not with tensorboardX's own code.
"""

from __future__ import annotations

import glob
import json
import os
import struct

import jax
import numpy as np
import pytest

import tseeds_jax.rl.trainer as trainer_mod
from tests.trainer_utils import tiny_trainer


# ---- TFRecord reader -------------------------------------------------------------------------
def _crc32c_table() -> list[int]:
    poly = 0x82F63B78  # Castagnoli, bit-reflected
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ poly if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc32c_table()


def crc32c(data: bytes) -> int:
    c = 0xFFFFFFFF
    for b in data:
        c = _TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def _masked(crc: int) -> int:
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def test_crc32c_known_vectors():
    # RFC 3720 (iSCSI) appendix B.4 test vectors.
    assert crc32c(b"123456789") == 0xE3069283
    assert crc32c(bytes(32)) == 0x8A9136AA
    assert crc32c(bytes([0xFF] * 32)) == 0x62A8AB43


def read_records(path: str) -> list[bytes]:
    with open(path, "rb") as f:
        data = f.read()
    out, pos = [], 0
    while pos < len(data):
        header = data[pos : pos + 8]
        (length,) = struct.unpack("<Q", header)
        (len_crc,) = struct.unpack("<I", data[pos + 8 : pos + 12])
        assert len_crc == _masked(crc32c(header)), f"{path}: bad length CRC at byte {pos}"
        payload = data[pos + 12 : pos + 12 + length]
        (data_crc,) = struct.unpack("<I", data[pos + 12 + length : pos + 16 + length])
        assert data_crc == _masked(crc32c(payload)), f"{path}: bad payload CRC at byte {pos}"
        out.append(payload)
        pos += 16 + length
    return out


def read_scalars(tb_dir: str) -> dict[tuple[str, int], float]:
    """{(tag, step): value} of every scalar summary in the event files under `tb_dir`."""
    from tensorboardX.proto import event_pb2

    files = sorted(glob.glob(os.path.join(tb_dir, "events.out.tfevents.*")))
    assert files, f"no event files in {tb_dir}"
    scalars = {}
    for path in files:
        for rec in read_records(path):
            event = event_pb2.Event.FromString(rec)
            for v in event.summary.value:
                if v.HasField("simple_value"):
                    scalars[(v.tag, event.step)] = v.simple_value
                elif v.HasField("tensor") and v.tensor.float_val:
                    scalars[(v.tag, event.step)] = v.tensor.float_val[0]
    return scalars


def test_tensorboard_events_hold_every_logged_scalar(tmp_path):
    tr = tiny_trainer(tmp_path, **{"seeds.refresh_interval": 2, "seeds.ratio": 0.5})
    tr.run(steps=2)
    with open(tmp_path / "metrics.jsonl") as f:
        logged = [json.loads(line) for line in f]
    assert [r["step"] for r in logged] == [0, 1]
    scalars = read_scalars(str(tmp_path / "tb"))
    expected = {(k, r["step"]): v for r in logged for k, v in r.items()
                if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool)}
    # What the README promises is among them.
    for tag in ("reward", "accuracy", "entropy/all", "ratio_mean/seed", "clipfrac/cont",
                "sampler_learner_gap", "time_rollout", "time_learner"):
        assert (tag, 1) in expected, tag
    missing = sorted(set(expected) - set(scalars))
    assert not missing, f"scalars logged to metrics.jsonl but not to TensorBoard: {missing}"
    for key, value in expected.items():
        # Event scalars are float32.
        assert scalars[key] == np.float32(value), (key, scalars[key], value)


# ---- sampler-vs-learner gap -------------------------------------------------------------------
def _gap_after_one_step(tmp_path, noise: float, **overrides) -> float:
    """The gap metric of one on-policy step whose sampler runs on the learner's parameters plus
    Gaussian noise of scale `noise` (0: the same parameters)."""
    tr = tiny_trainer(tmp_path, **{"seeds.refresh_interval": 1, **overrides})
    if noise:
        cast = trainer_mod._cast

        def perturbed(params, dtype):
            leaves, treedef = jax.tree_util.tree_flatten(cast(params, dtype))
            keys = jax.random.split(jax.random.key(7), len(leaves))
            leaves = [x + noise * jax.random.normal(k, x.shape, x.dtype)
                      for x, k in zip(leaves, keys, strict=True)]
            return jax.tree_util.tree_unflatten(treedef, leaves)

        # `_cast` makes the sampler's copy of the parameters only; the learner keeps its own.
        mp = pytest.MonkeyPatch()
        mp.setattr(trainer_mod, "_cast", perturbed)
        try:
            m = tr.train_step()
        finally:
            mp.undo()
    else:
        m = tr.train_step()
    tr.writer.close()
    sync = getattr(tr.env.sample_fn, "weight_sync", None)
    assert (sync is not None and sync.count == 1) == \
        (overrides.get("hardware.sampler_placement") == "decode")  # one reshard per step
    return float(m["sampler_learner_gap"])


def test_sampler_learner_gap_is_zero_untrained_and_grows_with_param_difference(tmp_path):
    same = _gap_after_one_step(tmp_path / "same", 0.0)
    small = _gap_after_one_step(tmp_path / "small", 0.02)
    large = _gap_after_one_step(tmp_path / "large", 0.2)
    # Same parameters: only float32 rounding between the sampler's cached decode and the
    # learner's full forward (mean |delta log-prob| per continuation token).
    assert 0.0 <= same < 1e-4, same
    assert small > 100 * max(same, 1e-6), (same, small)
    assert large > 2 * small, (small, large)


def test_sampler_learner_gap_is_zero_on_the_decode_layout(tmp_path):
    # The learner on fsdp 8, the sampler on its decode layout (4 tensor-parallel pairs, the
    # vocabulary split over each pair): the same parameters give the same log-probs.
    gap = _gap_after_one_step(tmp_path, 0.0, **{"mesh.fsdp": 8,
                                                "hardware.sampler_placement": "decode",
                                                "hardware.sampler_tensor": 2})
    assert 0.0 <= gap < 1e-4, gap
