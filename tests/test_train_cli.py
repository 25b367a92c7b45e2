"""`tseeds train` on every shipped tiny Thinking Seeds config (bounded steps), and its errors."""

import json
import os

import pytest

from tseeds_jax.rl import train_cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = ["tiny_dapo", "tiny_seeds_ratio", "tiny_seeds_entropy", "tiny_seeds_state",
        "tiny_minibatch_dapo"]


def _small(run_dir):
    # a smaller model than the config's so that the CI run stays short
    return [f"--config.run_dir={run_dir}", "--config.progress=False",
            "--config.model.arch.num_hidden_layers=1", "--config.model.arch.hidden_size=32",
            "--config.model.arch.intermediate_size=64", "--config.rollout.max_response_len=20",
            "--config.seeds.refresh_interval=2"]


@pytest.mark.slow
@pytest.mark.parametrize("name", TINY)
def test_shipped_tiny_config_trains(tmp_path, name, capsys):
    cfg = os.path.join(ROOT, "configs", f"{name}.py")
    args = [f"--config={cfg}", "--steps=3", *_small(tmp_path)]
    if name in ("tiny_dapo", "tiny_minibatch_dapo"):
        args.remove("--config.seeds.refresh_interval=2")
    assert train_cli.main(args) == 0
    lines = [json.loads(x) for x in open(tmp_path / "metrics.jsonl")]
    assert [x["step"] for x in lines] == [0, 1, 2]
    assert all(x["loss"] is not None for x in lines)
    assert (tmp_path / "ckpt" / "3").is_dir()
    # started again, the run resumes at its end and has nothing left to do
    assert train_cli.main(args) == 0
    assert "resumed from step 3" in capsys.readouterr().out


def test_bad_config_value_exits_2_naming_the_field(tmp_path, capsys):
    cfg = os.path.join(ROOT, "configs", "tiny_seeds_ratio.py")
    assert train_cli.main([f"--config={cfg}", "--config.seeds.ratio=1.5",
                           f"--config.run_dir={tmp_path}"]) == 2
    assert "config.seeds.ratio=1.5" in capsys.readouterr().err


def test_missing_config_and_unknown_override_exit_2(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        train_cli.main([])
    assert e.value.code == 2
    with pytest.raises(SystemExit) as e:
        train_cli.main([f"--config={ROOT}/configs/tiny_dapo.py", "--config.seeds.nope=1"])
    assert e.value.code == 2


@pytest.mark.slow
def test_broken_checkpoint_falls_back_loudly_and_none_restoring_exits_1(tmp_path, capsys):
    """A truncated array file in the newest checkpoint: a warning naming its path, then the
    run resumes from the one before (docs/tpu.md, "Preemption"). When no checkpoint restores,
    exit 1 with every path."""
    cfg = os.path.join(ROOT, "configs", "tiny_dapo.py")
    args = [f"--config={cfg}", "--steps=2", "--config.checkpoint_every=1", *_small(tmp_path)]
    args.remove("--config.seeds.refresh_interval=2")
    assert train_cli.main(args) == 0
    capsys.readouterr()
    data = sorted((tmp_path / "ckpt" / "2" / "state" / "d").iterdir(),
                  key=lambda p: p.stat().st_size)[-1]
    data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])
    assert train_cli.main([*args, "--steps=3"]) == 0
    out = capsys.readouterr()
    assert "WARNING" in out.err and f"{tmp_path / 'ckpt' / '2'}:" in out.err
    assert "resumed from step 1" in out.out
    assert (tmp_path / "ckpt" / "corrupt" / "2").is_dir() and (tmp_path / "ckpt" / "3").is_dir()
    lines = [json.loads(x) for x in open(tmp_path / "metrics.jsonl")]
    assert [x["step"] for x in lines] == [0, 1, 2]
    # a model that matches no checkpoint: exit 1, nothing moved
    assert train_cli.main([*args, "--steps=4", "--config.model.arch.hidden_size=16"]) == 1
    err = capsys.readouterr().err
    assert "no checkpoint of the run restores" in err and str(tmp_path / "ckpt" / "3") in err
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir() if p.name.isdigit()) == ["2", "3"]
