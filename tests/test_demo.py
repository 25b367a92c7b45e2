"""End-to-end: `tseeds demo --quick` writes the report with every section, and its checkpoints
load in `tseeds eval` (bounded: a few minutes on 2 idle cores)."""

import json
import os

import pytest

from tseeds_jax import cli
from tseeds_jax.eval.report import SECTIONS


@pytest.mark.slow
@pytest.mark.default_codegen  # 12 RL runs and their evaluations: run time, not compile time, dominates
def test_demo_quick_writes_report_and_checkpoints_evaluate(tmp_path, capsys):
    out = str(tmp_path / "demo")
    small = ["--warm-steps", "60", "--rl-steps", "4"]  # the code paths, not the learning
    assert cli.main(["demo", "--quick", "--lora", "--out", out] + small) == 0
    text = open(os.path.join(out, "report.md")).read()
    for section in SECTIONS:
        assert section in text, section
    for label in ("On-policy DAPO", "Thinking Seeds (ratio", "Thinking Seeds (mixture,",
                  "Thinking Seeds (mixture + spread", "Value-model calibration", "Comparison:"):
        assert label in text, label
    assert os.path.exists(os.path.join(out, "plots", "accuracy.png"))
    assert os.path.exists(os.path.join(out, "plots", "relay.png"))
    base = json.load(open(os.path.join(out, "base", "eval.json")))
    assert 0.0 <= base["avg_at_n"] <= 1.0
    # the run's result record: measured, with the load it ran under and the per-seed results
    from tseeds_jax import results_record

    rec = results_record.load(os.path.join(out, "demo_record.json"))
    assert rec["kind"] == "measured" and rec["command"].startswith("tseeds demo --quick")
    assert rec["values"]["wall_s"]["value"] > 0 and len(rec["values"]["load_avg"]["value"]
                                                        ["start"]) == 3
    assert rec["values"]["base_pass1"]["value"] == [round(100 * base["avg_at_n"], 2)]
    dapo = json.load(open(os.path.join(out, "runs", "dapo", "seed0", "eval.json")))
    assert rec["values"]["dapo_pass1"]["value"] == [[round(100 * dapo["avg_at_n"], 2)]]
    # a quick run is not the recorded 100-step experiment: no "with more seeds" comparison
    assert json.load(open(os.path.join(out, "demo.json")))["reference"] is None
    res = str(tmp_path / "eval.json")
    assert cli.main(["eval", os.path.join(out, "runs", "dapo", "seed0"), "--n", "2",
                     "--problems", "4", "--relay-early", os.path.join(out, "base"),
                     "--out", res]) == 0
    got = json.load(open(res))
    assert set(got) >= {"single", "relay"} and got["single"]["num_problems"] == 4
    # a second base, resumed from the record: base 0's runs are kept without warming it again
    capsys.readouterr()
    assert cli.main(["demo", "--quick", "--out", out, "--bases", "2", "--methods",
                     "dapo,ts_ratio", "--lora", "--resume"] + small) == 0
    log = capsys.readouterr()
    assert "base 0 seed 0: kept from the record" in log.out + log.err
    assert "base 0: sampled" not in log.out + log.err and "base 1: sampled" in log.out + log.err
    rec2 = results_record.load(os.path.join(out, "demo_record.json"))
    assert rec2["values"]["dapo_pass1"]["value"][0] == rec["values"]["dapo_pass1"]["value"][0]
    assert len(rec2["values"]["dapo_pass1"]["value"][1]) == 1
    assert os.path.exists(os.path.join(out, "runs", "ts_ratio", "base1", "seed0", "eval.json"))
    text = open(os.path.join(out, "report.md")).read()
    assert "Across the 2 base policies" in text and "- base 1: sampled" in text
    # --lora: LoRA DAPO and LoRA Thinking Seeds from both bases, each beside its full run
    for name in ("dapo_lora", "ts_ratio_lora"):
        for folder in ("seed0", os.path.join("base1", "seed0")):
            assert os.path.exists(os.path.join(out, "runs", name, folder, "eval.json"))
    assert "- On-policy DAPO, LoRA rank 8 vs On-policy DAPO (full parameters):" in text
    assert "- Thinking Seeds (ratio 0.5, T 8), LoRA rank 8 vs Thinking Seeds" in text


def test_demo_rejects_unknown_methods(capsys):
    assert cli.main(["demo", "--methods", "dapo,ts_magic", "--out", "/nonexistent"]) == 2
    err = capsys.readouterr().err
    assert "--methods='dapo,ts_magic'" in err and "ts_magic" in err and "ts_mixture_spread" in err


def test_demo_hard_task_settings_and_unknown_task(capsys):
    from tseeds_jax.demo.experiment import DemoConfig, with_task

    dc = with_task(DemoConfig(out="x"), "hard")
    assert dc.task_name == "hard" and dc.task_params == {"min_terms": 8, "max_terms": 9,
                                                         "min_digits": 1, "max_digits": 1}
    assert (dc.prompt_width, dc.response_width) == (20, 96)
    assert dc.warm.error_rate == 0.25 and dc.warm.steps == DemoConfig().warm.steps
    assert with_task(DemoConfig(out="x"), "default") == DemoConfig(out="x")
    with pytest.raises(ValueError, match="'nope'"):
        with_task(dc, "nope")
    with pytest.raises(SystemExit):
        cli.main(["demo", "--task", "nope", "--out", "/nonexistent"])
    assert "--task" in capsys.readouterr().err


def test_demo_resume_keeps_only_runs_with_the_same_identity(tmp_path):
    from tseeds_jax.demo.experiment import DemoConfig, _finished, default_methods, run_identity

    dc = DemoConfig(out=str(tmp_path))
    dapo, ratio = default_methods()[:2]
    run_dir = tmp_path / "runs" / "dapo" / "seed0"
    run_dir.mkdir(parents=True)
    ident = run_identity(dc, dapo, 0.28125)
    (run_dir / "method.json").write_text(json.dumps({"method": "dapo", "identity": ident}))
    assert _finished(str(run_dir), ident) is None  # no eval.json: not finished
    (run_dir / "eval.json").write_text(json.dumps({"avg_at_n": 0.5}))
    assert _finished(str(run_dir), run_identity(dc, dapo, 0.28125)) == {"avg_at_n": 0.5}
    # another base policy, method, setting or task: run again
    assert _finished(str(run_dir), run_identity(dc, dapo, 0.28)) is None
    assert _finished(str(run_dir), run_identity(dc, ratio, 0.28125)) is None
    import dataclasses

    from tseeds_jax.demo.experiment import with_task

    assert _finished(str(run_dir), run_identity(dataclasses.replace(dc, rl_steps=5), dapo,
                                                0.28125)) is None
    assert _finished(str(run_dir), run_identity(with_task(dc, "hard"), dapo, 0.28125)) is None
    # the seeds and the method list do not change a run
    assert _finished(str(run_dir), run_identity(dataclasses.replace(dc, seeds=(0, 1, 2, 3, 4),
                                                                    methods=("dapo",)),
                                                dapo, 0.28125)) == {"avg_at_n": 0.5}
    # another base is another run, also with the same pass@1
    assert _finished(str(run_dir), run_identity(dc, dapo, 0.28125, base=1)) is None


def test_demo_options_for_bases_and_per_method_seeds(capsys):
    from tseeds_jax.demo.cli import _parser, configure

    dc, err = configure(_parser().parse_args(["--bases", "5", "--seeds", "1", "--method-seeds",
                                              "dapo=2,ts_ratio=2", "--task", "hard"]))
    assert err is None and dc.bases == (0, 1, 2, 3, 4) and dc.seeds == (0,)
    assert dc.method_seeds == (("dapo", 2), ("ts_ratio", 2)) and dc.task_name == "hard"
    dc, _ = configure(_parser().parse_args([]))
    assert dc.bases == (0, 1, 2) and dc.seeds == (0,)  # the default: 3 bases x 1 seed
    dc, _ = configure(_parser().parse_args(["--quick"]))
    assert dc.bases == (0,) and dc.seeds == (0,)
    for argv, says in ((["--bases", "0"], "--bases=0 must be >= 1"),
                       (["--method-seeds", "cure=2"], "'cure=2' is not METHOD=COUNT"),
                       (["--method-seeds", "dapo=x"], "'dapo=x'")):
        assert cli.main(["demo", "--out", "/nonexistent"] + argv) == 2
        assert says in capsys.readouterr().err, argv
    from tseeds_jax.demo import cli as demo_cli

    assert "--bases" in demo_cli._parser().format_help()


def test_demo_lora_option_adds_the_lora_variants_beside_their_full_parameter_methods(capsys):
    from tseeds_jax.demo.cli import _parser, configure
    from tseeds_jax.demo.experiment import default_methods, rl_config

    dc, err = configure(_parser().parse_args(["--lora", "--quick"]))
    assert err is None
    assert dc.methods == ("dapo", "ts_ratio", "ts_mixture", "ts_mixture_spread", "dapo_lora",
                          "ts_ratio_lora")
    methods = {m.name: m for m in default_methods()}
    for full, lora in (("dapo", "dapo_lora"), ("ts_ratio", "ts_ratio_lora")):
        cfg, _ = rl_config(dc, "/nonexistent/tok.model", "/nonexistent/run", 0, methods[lora])
        ref, _ = rl_config(dc, "/nonexistent/tok.model", "/nonexistent/run", 0, methods[full])
        assert cfg.lora.rank == 8 and ref.lora.rank == 0
        assert cfg.optim.train_layers == "all" and ref.optim.train_layers == "head"
        assert cfg.seeds == ref.seeds and (cfg.optim.lr, ref.optim.lr) == (1e-3, 1e-2)
    assert cli.main(["demo", "--out", "/nonexistent", "--lora", "--methods", "ts_mixture"]) == 2
    assert "has a LoRA variant" in capsys.readouterr().err
