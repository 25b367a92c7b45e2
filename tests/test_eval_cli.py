"""`tseeds eval` rejects bad input with a clear message and exit status 2."""

import os

from tseeds_jax.eval import cli


def test_missing_checkpoint(tmp_path, capsys):
    assert cli.main([str(tmp_path / "nope"), "--n", "2"]) == 2
    assert "not found" in capsys.readouterr().err


def test_folder_without_checkpoints(tmp_path, capsys):
    os.makedirs(tmp_path / "run" / "ckpt")
    assert cli.main([str(tmp_path / "run")]) == 2
    assert "no checkpoints" in capsys.readouterr().err


def test_k_above_n(tmp_path, capsys):
    assert cli.main([str(tmp_path), "--n", "4", "--k", "1,8"]) == 2
    assert "k=8 is not in [1, n=4]" in capsys.readouterr().err


def test_bad_step_spec(tmp_path, capsys):
    assert cli.main([f"{tmp_path}@last"]) == 2
    assert "DIR@STEP" in capsys.readouterr().err
