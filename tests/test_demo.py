"""End-to-end: `tseeds demo --quick` writes the report with every section, and its checkpoints
load in `tseeds eval` (bounded: a few minutes on 2 idle cores)."""

import json
import os

import pytest

from tseeds_jax import cli
from tseeds_jax.eval.report import SECTIONS


@pytest.mark.slow
def test_demo_quick_writes_report_and_checkpoints_evaluate(tmp_path, capsys):
    out = str(tmp_path / "demo")
    assert cli.main(["demo", "--quick", "--out", out]) == 0
    text = open(os.path.join(out, "report.md")).read()
    for section in SECTIONS:
        assert section in text, section
    for label in ("On-policy DAPO", "Thinking Seeds (ratio", "Thinking Seeds (adaptive",
                  "Value-model calibration", "On-policy DAPO, 4 mini-batches"):
        assert label in text, label
    assert os.path.exists(os.path.join(out, "plots", "accuracy.png"))
    assert os.path.exists(os.path.join(out, "plots", "relay.png"))
    base = json.load(open(os.path.join(out, "base", "eval.json")))
    assert 0.0 <= base["avg_at_n"] <= 1.0
    res = str(tmp_path / "eval.json")
    assert cli.main(["eval", os.path.join(out, "runs", "dapo", "seed0"), "--n", "2",
                     "--problems", "4", "--relay-early", os.path.join(out, "base"),
                     "--out", res]) == 0
    got = json.load(open(res))
    assert set(got) >= {"single", "relay"} and got["single"]["num_problems"] == 4


def test_demo_rejects_unknown_methods(capsys):
    assert cli.main(["demo", "--methods", "dapo,ts_magic", "--out", "/nonexistent"]) == 2
    err = capsys.readouterr().err
    assert "--methods='dapo,ts_magic'" in err and "ts_magic" in err and "ts_adaptive" in err
