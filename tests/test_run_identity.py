"""Run folders describe what their model started from (tseeds_jax/rl/run/source.py).

- `tseeds demo --quick --lora` runs (full and LoRA) start from a base that exists only in
  memory; their folders keep it (RUN_DIR/base_model) and `tseeds eval` on them gives the pass@k
  the demo reported (same problems, same sampling seed); a LoRA run's loaded onto a random base
  gave 0% before. A LoRA run whose saved base is gone does not load, naming it.
- A resumed run whose recorded base changed stops with an error naming the checkpoint's meta.
- A run folder written before these fields existed still resumes and loads.
"""

import json
import os
import shutil

import pytest

from tests.trainer_utils import parity_reward, tiny_cd
from tseeds_jax import checkpoint, cli
from tseeds_jax.hf.testing import write_random_hf_folder
from tseeds_jax.model import ModelConfig
from tseeds_jax.rl.config import TrainConfig
from tseeds_jax.rl.run.loaded import open_run
from tseeds_jax.rl.run.source import RunSourceError
from tseeds_jax.rl.setup import load_run, make_trainer


@pytest.mark.slow  # one warm start, a 2-step full and a 2-step LoRA run, the quick evaluations
def test_demo_runs_evaluate_to_what_the_demo_reported(tmp_path):
    out = str(tmp_path / "demo")
    assert cli.main(["demo", "--quick", "--methods", "dapo", "--lora", "--warm-steps", "10",
                     "--rl-steps", "2", "--out", out]) == 0
    for name in ("dapo_lora", "dapo"):
        run = os.path.join(out, "runs", name, "seed0")
        reported = json.load(open(os.path.join(run, "eval.json")))
        meta = open_run(run).meta["model_source"]
        assert meta["kind"] == "saved" and os.path.isdir(os.path.join(run, "base_model"))
        # the demo's final evaluation: its held-out problems, n samples each, sampling seed 7
        res = str(tmp_path / f"{name}.json")
        assert cli.main(["eval", run, "--n", str(reported["n"]), "--problems",
                         str(reported["num_problems"]), "--seed", "7", "--out", res]) == 0
        got = json.load(open(res))["single"]
        assert got["pass_at_k"] == reported["pass_at_k"], name
        assert got["mean_length"] == reported["mean_length"], name  # the same responses
    # a LoRA run needs its base; a full run's checkpoint holds every weight
    for name in ("dapo_lora", "dapo"):
        run = os.path.join(out, "runs", name, "seed0")
        shutil.move(os.path.join(run, "base_model"), str(tmp_path / f"aside-{name}"))
    with pytest.raises(RunSourceError, match="base model saved:.*dapo_lora/seed0/base_model is "
                                             "missing"):
        load_run(os.path.join(out, "runs", "dapo_lora", "seed0"))
    load_run(os.path.join(out, "runs", "dapo", "seed0"))


def _trainer(run_dir, base, **overrides):
    overrides = {"steps": 1, "model.init": f"hf:{base}", **overrides}
    cfg = TrainConfig.from_config(tiny_cd(run_dir, **overrides))
    return make_trainer(cfg, env_overrides={"reward_fn": parity_reward})


ARCH = dict(model_type="qwen2", vocab_size=21, hidden_size=32, intermediate_size=64,
            num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1)


def test_resume_with_a_changed_base_stops_and_old_runs_still_resume(tmp_path):
    base = tmp_path / "base"
    write_random_hf_folder(ModelConfig(**ARCH), base, seed=0)
    run = tmp_path / "run"
    _trainer(run, base).run()
    write_random_hf_folder(ModelConfig(**ARCH), base, seed=1)  # same shapes, other weights
    with pytest.raises(RunSourceError, match=r"ckpt/1 meta model_source.*sha256"):
        _trainer(run, base, steps=2).restore()
    # written as before the fields existed (no model_source / tokenizer in the meta)
    old = tmp_path / "old"
    trainer = _trainer(old, base)
    trainer.env.checkpointer.run_meta = {}
    trainer.run()
    meta = checkpoint.Checkpoints(old / "ckpt").read_meta()
    assert "model_source" not in meta and "tokenizer" not in meta
    resumed = _trainer(old, base, steps=2)
    assert resumed.restore() and resumed.step == 1
    load_run(str(old))
