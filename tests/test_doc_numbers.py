"""Every number in the docs has one source (issue 36): the tables and inline figures of README.md
and docs/*.md are rendered from the result records in docs/results/ (tseeds_jax.results_render),
and the docs state no superseded figure or claim.

Checks: each marked table and figure equals its record's rendering; no record's superseded printed
form (the 7B decode bound's 2,762 / 1,336 / 1,490, the 7B checkpoint's 71 GB, ...) appears
outside the record's own table; the sampler placement the docs say the paper variants ship with
is the configs' own; stale claims ("no flash attention", "did worse") are gone; the demo tables'
Holm verdicts agree with Welch tests (scipy) and Holm's procedure written out here, from the
per-seed values of the records; the demo's shipped 5-seed values equal the records'. Fast (< 10
s): nothing is compiled or trained.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil

import pytest
from scipy import stats

from tseeds_jax import results_record, results_render

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "docs", "results")
PAPER_CONFIGS = ("qwen25_math_7b_dapo17k", "r1_distill_qwen_1p5b_openr1", "qwen3_4b_thinking_code")
# Claims that were true once and are not now, with the reason; none may come back.
STALE_CLAIMS = {
    r"there is no flash attention": "splash attention runs on TPU; only the XLA attention "
                                    "materialises [t, t] scores",
    r"\bdid worse\b|\bdo worse\b|\bdoes worse\b": "no method is shown worse (p >= 0.05, Holm)",
    r"no `\[slots, vocab\]` logits cross the chips\.": "top-p gathers the vocabulary",
    r"halves its collective bytes": "a compile-only count, said as such with its figures",
    r"MFU bound": "the remat-inclusive figure is the compute-bound fraction",
    r"two-minute smoke": "--quick's time is a recorded measurement",
}


def _docs(root=ROOT) -> dict[str, str]:
    return {d: open(os.path.join(root, d)).read() for d in results_render.documents(root)}


def test_every_table_and_figure_is_rendered_from_its_record():
    problems = results_render.check(ROOT)
    assert not problems, "\n".join(problems) + "\nfix: python -m tseeds_jax.results_render"


def test_every_record_is_used_and_follows_the_schema():
    records = results_record.load_all(RESULTS)
    text = "".join(_docs().values())
    for name, rec in records.items():
        assert rec["kind"] in results_record.KINDS
        assert f"table:{name} -->" in text or f"fig:{name}." in text, f"{name} is printed nowhere"
        if rec["kind"] == "compile-only bound":
            assert "tpu" in rec["backend"], name  # compiled for a TPU: nothing ran there
        if not rec["transcribed"]:
            assert rec["machine"]["cores"] and rec["machine"]["flags"] is not None, name


def test_renderer_catches_an_edited_cell_a_stale_figure_and_a_missing_record(tmp_path):
    shutil.copytree(RESULTS, tmp_path / "docs" / "results")
    rec = results_record.load(os.path.join(RESULTS, "tpu_decode_layout.json"))
    table = results_render.render_table(rec)
    good = (f"<!-- BEGIN table:tpu_decode_layout -->\n{table}<!-- END table:tpu_decode_layout -->\n"
            "bound <!-- fig:tpu_decode_layout.bound_7b_decode -->7,266<!-- /fig --> tok/s/chip\n")
    (tmp_path / "README.md").write_text(good)
    assert results_render.check(str(tmp_path)) == []
    # a table cell edited by hand, a prose figure that is not the record's, a superseded value
    for bad, says in ((good.replace("**7,266**", "**7,300**"), "differs from its record"),
                      (good.replace("-->7,266<", "-->7,300<"), "differs from its record"),
                      (good + "the 7B decodes at 2,762 tok/s/chip\n", "'2,762', a superseded"),
                      (good + "at most 1,336 with them\n", "'1,336', a superseded"),
                      (good + "<!-- fig:nope.x -->1<!-- /fig -->\n", "no such recorded value")):
        (tmp_path / "README.md").write_text(bad)
        problems = results_render.check(str(tmp_path))
        assert any(says in p for p in problems), (says, problems)
    # 1,490 is the learner layout's row inside the record's own table, stale anywhere else
    (tmp_path / "README.md").write_text(good + "the 7B bound is 1,490\n")
    assert any("'1,490'" in p for p in results_render.check(str(tmp_path)))
    assert "1,490" in table


def _config_placements() -> dict[str, set[str]]:
    """{config: sampler placements of its Slice variants}, read from the config files' source."""
    out = {}
    for name in PAPER_CONFIGS:
        tree = ast.parse(open(os.path.join(ROOT, "configs", f"{name}.py")).read())
        out[name] = {kw.value.value for node in ast.walk(tree) if isinstance(node, ast.Call)
                     for kw in node.keywords if kw.arg == "sampler_placement"}
    return out


def placement_claims(docs: dict[str, str]) -> list[str]:
    """Sentences saying which sampler placement the paper variants ship with, that disagree with
    the configs."""
    shipped = set().union(*_config_placements().values())
    pat = re.compile(r"ships? with `hardware\.sampler_placement\s*=\s*\"(\w+)\"`")
    return [f"{doc}: says the variants ship with {m[1]!r}; the configs: {sorted(shipped)}"
            for doc, text in docs.items() for m in pat.finditer(text) if m[1] not in shipped]


def stale_claims(docs: dict[str, str]) -> list[str]:
    return [f"{doc}: {m[0]!r} ({why})" for doc, text in docs.items()
            for pat, why in STALE_CLAIMS.items() for m in re.finditer(pat, text)]


def test_docs_name_the_placement_the_configs_ship():
    assert _config_placements() == {n: {"decode"} for n in PAPER_CONFIGS}
    assert placement_claims(_docs()) == []
    # the claim the issue found (docs/scale.md before issue 36) is caught
    old = {"x.md": 'Every variant ships with `hardware.sampler_placement = "sharded"`.'}
    assert len(placement_claims(old)) == 1


def test_no_stale_claim_is_back():
    assert stale_claims(_docs()) == []
    assert len(stale_claims({"x.md": "scores are materialised: there is no flash attention"})) == 1


def _holm(pvalues: list[float]) -> list[bool]:
    """Holm's step-down procedure at 5%, written out independently of the report's code."""
    m = len(pvalues)
    kept, order = [False] * m, sorted(range(m), key=lambda i: pvalues[i])
    for rank, i in enumerate(order):
        if pvalues[i] > 0.05 / (m - rank):
            break
        kept[i] = True
    return kept


@pytest.mark.parametrize("name", ["demo_default_5seeds", "demo_hard_5seeds"])
def test_demo_tables_holm_verdicts_follow_from_the_per_seed_values(name):
    rec = results_record.load(os.path.join(RESULTS, f"{name}.json"))
    pass1 = {k[:-len("_pass1")]: v["value"] for k, v in rec["values"].items()}
    methods = list(pass1)  # dapo, ts_ratio, then the other seeded methods
    assert methods[:2] == ["dapo", "ts_ratio"] and len(methods) == 5
    pairs = [(m, "dapo") for m in methods[1:]] + [(m, "ts_ratio") for m in methods[2:]]
    ps = [stats.ttest_ind(pass1[a], pass1[b], equal_var=False).pvalue for a, b in pairs]
    verdict = dict(zip(pairs, _holm(ps), strict=True))
    rows = {row[0]: row for row in rec["table"]["rows"]}
    for (a, b), kept in verdict.items():
        row = list(rows.values())[methods.index(a)]
        cell = row[2 if b == "dapo" else 3]
        assert cell.endswith(f"Holm: {'yes' if kept else 'no'})" + ("**" if kept else "")), \
            (a, b, cell)
        assert cell.startswith("**") == kept, (a, b, cell)  # bold only where Holm keeps it
        mean = sum(pass1[a]) / 5 - sum(pass1[b]) / 5
        assert abs(float(cell.strip("*").split(" ")[0].replace("−", "-")) - mean) <= 0.11, cell
    per_seed = [row[1] for row in rows.values()]
    for m, cell in zip(methods, per_seed, strict=True):
        assert cell.endswith("(" + ", ".join(f"{x:.1f}" for x in pass1[m]) + ")"), cell


def test_the_demo_ships_the_recorded_five_seed_values():
    from tseeds_jax.demo.reference import RECORDED

    for task in ("default", "hard"):
        rec = results_record.load(os.path.join(RESULTS, f"demo_{task}_5seeds.json"))
        values = {k[:-len("_pass1")]: v["value"] for k, v in rec["values"].items()}
        assert RECORDED[task]["pass1"] == values, task
        assert f"demo_{task}_5seeds.json" in RECORDED[task]["label"]


def test_record_errors_name_the_file_field_and_value(tmp_path):
    path = tmp_path / "x.json"
    rec = results_record.make("x", "what", "measured", "cmd", backend="cpu",
                              values={"a": {"value": 1, "unit": "s"}})
    results_record.write(str(path), rec)
    assert results_record.load(str(path)) == json.loads(path.read_text())
    for field, value, says in (("kind", "guess", "field 'kind' = 'guess'"),
                               ("values", {"a": 3}, "field 'values.a' = 3"),
                               ("name", "y", "field 'name' = 'y'"),
                               ("values", {"a": {"value": 1, "unit": "s", "from": "b:x:1"}},
                                "field 'values.a.from' = 'b:x:1'")):
        path.write_text(json.dumps({**rec, field: value}))
        with pytest.raises(results_record.RecordError, match=re.escape(says)) as e:
            results_record.load(str(path))
        assert str(path) in str(e.value)
    path.write_text(json.dumps({**rec, "transcribed": True}))
    with pytest.raises(results_record.RecordError, match="'source' is missing"):
        results_record.load(str(path))


def test_compile_record_option_writes_a_compile_only_record(tmp_path):
    """`tseeds compile --record PATH` on a stand-in result (no compile: the summary and program
    list are what the command's own result object provides)."""
    from tseeds_jax.scale import compile_cli

    class Program:
        name, phase, peak, flops, bytes_accessed, ici_bytes, compile_s = (
            "learner_update", "learner", 3 << 30, 2e15, 4e12, 1e11, 12.0)

    class Target:
        topology = "v5p:2x2x1"

    class Result:
        compiled, target = [Program()], Target()

        def summary(self):
            return {"topology": "v5p:2x2x1", "learner_roofline_s": 4.5,
                    "learner_compute_bound_fraction": 0.97, "phase_peak": {"learner": 3 << 30},
                    "fits": True, "mesh": {"data": 2}}

    path = tmp_path / "compiled.json"
    compile_cli._write_record(str(path), Result(), ["--config", "c.py"])
    rec = results_record.load(str(path))
    assert rec["kind"] == "compile-only bound" and rec["command"] == "tseeds compile --config c.py"
    assert rec["values"]["learner_roofline_s"] == {"value": 4.5, "unit": "s"}
    assert rec["values"]["phase_peak__learner"] == {"value": 3 << 30, "unit": "bytes per device"}
    assert rec["values"]["learner_compute_bound_fraction"] == {"value": 0.97, "unit": "fraction"}
    assert not [k for k in rec["values"] if "mfu" in k]
    assert "fits" not in rec["values"]  # booleans are not figures
    assert rec["table"]["rows"] == [["learner_update", "learner", "3.00", "2e+03", "4e+03",
                                     "100", "12"]]


def test_compile_printout_does_not_call_the_remat_inclusive_figure_mfu():
    src = open(os.path.join(ROOT, "tseeds_jax", "scale", "compile_cli.py")).read()
    printed = re.findall(r'f"[^"]*"', src)
    assert not [s for s in printed if "MFU" in s]
    assert any("compute-bound" in s for s in printed)


def test_a_quoted_cell_that_drifts_from_its_table_is_caught(tmp_path):
    """A value with `from` (RECORD:ROW:COL) must be part of that table cell."""
    shutil.copytree(RESULTS, tmp_path / "docs" / "results")
    (tmp_path / "README.md").write_text("")
    path = tmp_path / "docs" / "results" / "adaptive_seeds_demo_figures.json"
    rec = json.loads(path.read_text())
    entry = rec["values"]["mixture_all_equal"]
    assert entry["from"] == "demo_default_5seeds:2:4"  # `mixture`'s all-equal cell
    assert results_render.check(str(tmp_path)) == []
    for field, value, says in (("value", "29.4 ± 3.3", "is not in demo_default_5seeds:2:4"),
                               ("from", "demo_default_5seeds:9:4", "names no table cell"),
                               ("from", "nope:0:0", "names no table cell")):
        path.write_text(json.dumps({**rec, "values": {**rec["values"],
                                                      "mixture_all_equal": {**entry, field: value}}}))
        problems = results_render.check(str(tmp_path))
        assert any(says in p for p in problems), (field, problems)


def _docsection():
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "docsection", os.path.join(ROOT, "benchmarks", "docsection.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_record_tables_moves_a_benchmarks_printed_tables_into_records(tmp_path):
    ds = _docsection()
    body = ("Command: `x`\n\n| part | s |\n|---|---:|\n| a \\| b | 0.5 |\n| c | 1.25 |\n\n"
            "text\n\n| k | v |\n|---|---|\n| n | 3 |\n")
    new, recs = ds.record_tables(body, [("t_one", "first"), ("t_two", "second")], "measured",
                                 "python x.py", backend="cpu", values={"v": {"value": 2, "unit": "x"}})
    assert [r["name"] for r in recs] == ["t_one", "t_two"]
    assert recs[0]["table"] == {"columns": ["part", "s"], "rows": [["a \\| b", "0.5"], ["c", "1.25"]]}
    assert recs[1]["table"] == {"columns": ["k", "v"], "rows": [["n", "3"]]}
    assert recs[0]["values"] == {"v": {"value": 2, "unit": "x"}} and "values" not in recs[1]
    assert new.count("<!-- BEGIN table:") == 2 and "| c | 1.25 |" in new and "text" in new
    for rec in recs:
        results_record.write(str(tmp_path / "docs" / "results" / f"{rec['name']}.json"), rec)
    (tmp_path / "README.md").write_text(new + "\n" + ds.fig(recs[0], "v") + "\n")
    assert results_render.check(str(tmp_path)) == []
    with pytest.raises(ValueError, match="2 tables for record names"):
        ds.record_tables(body, [("a", "a"), ("b", "b"), ("c", "c")], "measured", "x", backend="cpu")


def test_every_table_of_benchmarks_md_is_rendered_from_a_record():
    text = open(os.path.join(ROOT, "docs", "benchmarks.md")).read()
    marked = "".join(m["body"] for m in results_render._TABLE.finditer(text))
    tables = [line for line in text.splitlines() if line.startswith("|---")]
    assert tables and all(line in marked for line in tables)
    stray = re.sub(results_render._TABLE, "", text)
    assert not [line for line in stray.splitlines() if line.startswith("|")], \
        "a hand-written table in docs/benchmarks.md: its script should write a record"


def test_readme_demo_figures_follow_from_the_per_seed_values():
    """The README's 3-seed difference and p of the default demo (seeds 0-2 of the 5-seed record)
    and the hard task's `mixture` vs DAPO p, recomputed with Welch's test (scipy)."""
    fig = results_record.load(os.path.join(RESULTS, "readme_demo_figures.json"))["values"]
    seeds = {t: {k[:-len("_pass1")]: v["value"] for k, v in results_record.load(
        os.path.join(RESULTS, f"demo_{t}_5seeds.json"))["values"].items()}
        for t in ("default", "hard")}
    a, b = seeds["default"]["ts_mixture_spread"][:3], seeds["default"]["dapo"][:3]
    assert abs((sum(a) - sum(b)) / 3 - fig["spread_vs_dapo_3seeds"]["value"]) < 0.05
    p3 = stats.ttest_ind(a, b, equal_var=False).pvalue
    assert round(p3, 2) == fig["spread_vs_dapo_3seeds_p"]["value"]
    assert p3 > 0.05 / 5  # not kept by Holm over 5 comparisons, whatever the other four are
    ph = stats.ttest_ind(seeds["hard"]["ts_mixture"], seeds["hard"]["dapo"], equal_var=False).pvalue
    assert round(ph, 3) == fig["hard_mixture_vs_dapo_p"]["value"]


def test_the_readmes_sampler_speeds_before_the_remeasurement_are_caught():
    records = results_record.load_all(RESULTS)
    old = ("model samples at ~1,000 tokens/s at batch 1 (2.9-3.1x HF) and ~7,000-7,700 at batch 32\n"
           "(1.63-1.69x HF)")  # README.md before the 2026-12-03 run
    hits = results_render.stale_hits(old, records, "README.md")
    assert len(hits) == 2 and all("sampler_speed" in h for h in hits), hits


def test_a_quoted_result_below_a_table_that_differs_from_its_record_is_caught(tmp_path):
    """Issue 46: "+14.9" changed to "+24.9" in docs/demo_results.md's prose passed the check;
    a difference, interval or p-value quoted below a rendered table must be its record's."""
    shutil.copytree(RESULTS, tmp_path / "docs" / "results")
    shutil.copy(os.path.join(ROOT, "README.md"), tmp_path / "README.md")
    for doc in os.listdir(os.path.join(ROOT, "docs")):
        if doc.endswith(".md"):
            shutil.copy(os.path.join(ROOT, "docs", doc), tmp_path / "docs" / doc)
    assert results_render.check(str(tmp_path)) == []
    path = tmp_path / "docs" / "demo_results.md"
    text = path.read_text()
    assert "(ratio +14.9," in text
    path.write_text(text.replace("(ratio +14.9,", "(ratio +24.9,"))
    problems = results_render.check(str(tmp_path))
    assert any("below table:demo_hard_peers" in p and "+24.9" in p for p in problems), problems
    # a synthetic table: the sign, both ends of an interval and a p-value are checked
    rec = results_record.load(os.path.join(RESULTS, "demo_hard_peers.json"))
    table = (f"<!-- BEGIN table:demo_hard_peers -->\n{results_render.render_table(rec)}"
             "<!-- END table:demo_hard_peers -->\n")
    path.write_text("")
    for prose, bad in (("ratio +14.9 ± 3.8 (p=0.00), QuestA p = 0.02; p < 0.05 is the level",
                        None),
                       ("ratio -14.9 over DAPO", "-14.9"), ("ratio +14.9 ± 4.8", "4.8"),
                       ("QuestA p = 0.03", "0.03"),
                       ("## Next\nratio +24.9 in another section", None)):
        (tmp_path / "README.md").write_text(table + prose + "\n")
        problems = results_render.check(str(tmp_path))
        assert (problems == []) if bad is None else any(bad in p for p in problems), (prose,
                                                                                    problems)


def test_no_record_command_holds_an_absolute_path_and_new_ones_are_made_portable():
    """Issue 46: a record's command names no absolute path of the machine it ran on."""
    bad = re.compile(r"(?<![\w.~:/-])/[\w.+@-]+")
    for name, rec in results_record.load_all(RESULTS).items():
        assert not bad.search(rec["command"]), (name, rec["command"])
    cmd = ("tseeds demo --out /tmp/x --record /repo/docs/results/a.json; /usr/bin/time -v y "
           "--a=/repo/runs/q,b http://x.org/a")
    assert results_record.portable_command(cmd, "/repo") == (
        "tseeds demo --out x --record docs/results/a.json; time -v y --a=runs/q,b "
        "http://x.org/a")
    rec = results_record.make("x", "what", "measured", "tseeds demo --out /tmp/run1",
                              backend="cpu")
    assert rec["command"] == "tseeds demo --out run1"
