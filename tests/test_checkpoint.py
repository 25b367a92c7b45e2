"""Orbax checkpoint helpers: exact restore (optax state, numpy, meta), keep-last-N, historical
snapshots, restore onto a mesh sharding, and no half-written checkpoints."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.sharding import NamedSharding, PartitionSpec

from tseeds_jax import checkpoint as ckpt
from tseeds_jax.model.sharding import make_mesh


def _state(seed=0):
    rng = np.random.default_rng(seed)
    params = {"w": jnp.asarray(rng.normal(size=(8, 4)), jnp.float32),
              "layers": {"b": jnp.asarray(rng.normal(size=(4,)), jnp.bfloat16)}}
    opt = optax.adamw(1e-3).init(params)
    return {"params": params, "opt": opt, "step": 7, "rng": np.arange(3, dtype=np.uint32),
            "loss_ema": np.float32(0.25)}


def _assert_same(a, b):
    assert jax.tree.structure(a) == jax.tree.structure(b)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        assert np.asarray(x).dtype == np.asarray(y).dtype
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_save_restore_exact_with_target(tmp_path):
    state = _state()
    with ckpt.Checkpoints(tmp_path / "c") as c:
        assert c.latest_step() is None and c.steps() == []
        assert c.save(10, state, meta={"data_pos": 3, "config": {"lr": 1e-3}})
        restored, meta = c.restore(target=ckpt.abstract_target(state))
    _assert_same(restored, state)
    assert isinstance(restored["opt"][0], optax.ScaleByAdamState)
    assert meta == {"data_pos": 3, "config": {"lr": 1e-3}}


def test_keep_last_n_and_listing(tmp_path):
    state = _state()
    with ckpt.Checkpoints(tmp_path, keep_last=2) as c:
        for step in (1, 2, 3, 5):
            c.save(step, state, meta={"step": step})
        assert c.steps() == [3, 5] and c.latest_step() == 5
        assert c.read_meta() == {"step": 5} and c.read_meta(3) == {"step": 3}
        with pytest.raises(FileNotFoundError, match="step 1"):
            c.restore(1)
    # A new manager on the same folder sees the same steps (resume).
    with ckpt.Checkpoints(tmp_path, keep_last=2) as c:
        assert c.steps() == [3, 5]


def test_historical_checkpoints_survive_garbage_collection(tmp_path):
    with ckpt.Checkpoints(tmp_path, keep_last=1) as c:
        c.save(1, _state(0))
        c.save_historical("behavior-0001", _state(1)["params"], meta={"cycle": 1})
        c.save(2, _state(2))
        c.save_historical("behavior-0002", _state(3)["params"])
        c.save(3, _state(4))
        assert c.steps() == [3]
        assert c.historical_names() == ["behavior-0001", "behavior-0002"]
        params, meta = c.restore_historical("behavior-0001",
                                            target=ckpt.abstract_target(_state(1)["params"]))
        _assert_same(params, _state(1)["params"])
        assert meta == {"cycle": 1}
        with pytest.raises(FileExistsError):
            c.save_historical("behavior-0001", _state(0)["params"])
        c.delete_historical("behavior-0001")
        assert c.historical_names() == ["behavior-0002"]
        with pytest.raises(FileNotFoundError, match="behavior-0001"):
            c.restore_historical("behavior-0001")
        for bad in ("", "../x", "a/b", ".hidden"):
            with pytest.raises(ValueError, match="historical checkpoint name"):
                c.save_historical(bad, {})


def test_restore_onto_mesh_sharding(tmp_path):
    state = {"w": jnp.arange(64.0).reshape(8, 8), "b": jnp.ones((8,))}
    ckpt.save_pytree(tmp_path / "p", state, meta={"k": "v"})
    mesh = make_mesh({"data": 2, "fsdp": 2, "tensor": 2})
    shardings = {"w": NamedSharding(mesh, PartitionSpec("fsdp", "tensor")),
                 "b": NamedSharding(mesh, PartitionSpec())}
    restored, meta = ckpt.restore_pytree(tmp_path / "p", ckpt.abstract_target(state, shardings))
    assert restored["w"].sharding == shardings["w"] and len(restored["w"].addressable_shards) == 8
    _assert_same(restored, state)
    assert meta == {"k": "v"} and ckpt.read_meta(tmp_path / "p") == {"k": "v"}


def test_interrupted_save_is_invisible_and_errors_are_clear(tmp_path):
    with ckpt.Checkpoints(tmp_path) as c:
        c.save(1, _state())
        # What a crash mid-save leaves behind: Orbax's temporary folder, never a step.
        (tmp_path / "2.orbax-checkpoint-tmp-1234").mkdir()
        assert c.steps() == [1]
        with pytest.raises(ValueError, match="step=-1"):
            c.save(-1, _state())
        with pytest.raises(TypeError, match="meta"):
            c.save(4, _state(), meta=["not", "a", "dict"])
    with pytest.raises(FileNotFoundError, match="no checkpoints"):
        ckpt.Checkpoints(tmp_path / "empty").restore()
    with pytest.raises(ValueError, match="keep_last"):
        ckpt.Checkpoints(tmp_path / "x", keep_last=0)
    with pytest.raises(FileNotFoundError):
        ckpt.restore_pytree(tmp_path / "missing")
    ckpt.save_pytree(tmp_path / "p", {"a": np.zeros(2)})
    with pytest.raises(FileExistsError):
        ckpt.save_pytree(tmp_path / "p", {"a": np.zeros(2)})


def test_async_save_then_wait(tmp_path):
    state = _state()
    c = ckpt.Checkpoints(tmp_path, async_save=True)
    c.save(1, state)
    c.wait()
    assert c.steps() == [1]
    restored, _ = c.restore(1, target=ckpt.abstract_target(state))
    _assert_same(restored, state)
    c.close()
