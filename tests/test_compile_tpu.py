"""`tseeds compile`: a tiny Thinking Seeds config compiled by XLA's TPU compiler for compile-only
v5p devices (libtpu, no TPU): the programs on a data/fsdp/tensor mesh (2 x 2 x 2) over the 8
devices of v5p:2x2x2, the command-line checks on v5p:2x2x1.

Checks: the learner update, a statistics pass and the sampler decode compile and fit; the update's
matmul FLOPs (counted loop by loop from the optimized HLO, scale/hlo_cost.py, plus the Pallas
kernels' FLOPs counted analytically) are within 10% of an independent count, 6 x params x tokens +
attention (8 x and 4/3 of the attention with remat), on an update with the compiler's windowed
loops (fsdp 8, slow); a Pallas kernel that cannot be partitioned makes the result not fit; bad input
gives one line naming the field and value, a non-zero exit and nothing in --out; the manifest of
--out accepts the same config and names a changed field.
"""

import json
import os

import pytest

from tseeds_jax.scale import topology

# libtpu (XLA's TPU compiler) is a pinned test package (requirements-test.txt): fail, never skip.
REASON = topology.libtpu_available()
assert REASON is None, f"libtpu unavailable: {REASON}"

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = os.path.join(ROOT, "configs", "tiny_thinking_seeds.py")
VOCAB = 512
# The CLI tests: data x fsdp over the 4 devices of v5p:2x2x1 (fast). The compiled-programs
# fixture: data x fsdp x tensor = 2 x 2 x 2 over the 8 devices of v5p:2x2x2 (before the model
# pinned its activations' layout, tensor=2 repeated 24% of the update's FLOPs; docs/scale.md).
MESH = (2, 2, 2)
FIXTURE_TOPOLOGY = "v5p:2x2x2"
CLI_MESH = (2, 2, 1)
# 16 sequences in micro-batches of 8 (two trips of the update's accumulation loop).
OVERRIDES = [f"--config.model.arch.vocab_size={VOCAB}", "--config.mesh.data=2",
             "--config.mesh.fsdp=2", "--config.mesh.tensor=1",
             "--config.optim.micro_batch_size=8", "--config.hardware.sampler_placement=sharded"]


def _load(mesh=CLI_MESH):
    import importlib.util

    spec = importlib.util.spec_from_file_location("tiny_ts", CONFIG)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    cd = mod.get_config()
    cd.model.arch.vocab_size = VOCAB
    cd.mesh.data, cd.mesh.fsdp, cd.mesh.tensor = mesh
    cd.optim.micro_batch_size = 8
    cd.hardware.sampler_placement = "sharded"
    return cd


@pytest.fixture(scope="module")
def result():
    from tseeds_jax.scale import compile_run

    return compile_run.compile_config(_load(MESH), topology=FIXTURE_TOPOLOGY,
                                      only=("learner", "stats", "sampler"),
                                      prefill_buckets="max")


def test_programs_compile_and_fit(result):
    names = {c.name for c in result.compiled}
    assert {"learner_update", "stats_forward", "sampler_decode"} <= names
    assert result.target.mesh.size == 8 and tuple(result.target.mesh.shape.values()) == MESH
    for c in result.compiled:
        assert 0 < c.peak <= result.usable, c.to_dict()
        assert c.memory["argument"] > 0 and c.flops > 0
    assert result.fits


def analytic_update_flops(cd, vocab: int = VOCAB) -> float:
    """6 x (parameters a token passes through) x tokens + attention, from the architecture; with
    remat the layers' forward runs twice (8 x params x tokens, attention 4/3)."""
    a = cd.model.arch
    d, f, v, nl = a.hidden_size, a.intermediate_size, vocab, a.num_hidden_layers
    h, k = a.num_attention_heads, a.num_key_value_heads
    e = d // h
    b = cd.rollout.batch_prompts * cd.rollout.group_size
    p, r = cd.data.max_prompt_len, cd.rollout.max_response_len
    t = p + r
    layer = d * (h * e) + 2 * d * (k * e) + (h * e) * d + 3 * d * f  # q, k, v, o, MLP
    layer += (h * e) + 2 * (k * e)  # qkv biases (qwen2)
    passes = 4 if cd.model.remat else 3  # forward (+ recomputed forward) + 2 x backward
    body = 2.0 * passes * nl * layer * b * t
    head = 6.0 * d * v * b * r  # the LM head runs on the response positions only
    attention = passes * nl * b * 4.0 * t * t * h * e  # QK^T and PV over the full T x T scores
    return body + head + attention


# The smallest update found with the TPU compiler's windowed loops (`windowed_dot_general_body_ag`
# / `_rs`): fsdp 8 on v5p:2x2x2 with >= 1024 tokens per device per micro-batch (at 512, or on
# v5p:2x2x1's 4 devices, libtpu 0.0.42.1 keeps plain all-gathers). Two sequences of T=512 per
# device, D 256, bfloat16 compute, remat.
WINDOWED = dict(hidden_size=256, intermediate_size=1024, num_attention_heads=4,
                num_key_value_heads=4)


@pytest.mark.slow
def test_update_flops_with_windowed_loops_and_remat():
    """Counted loop by loop (hlo_cost), the update's matmul FLOPs + the Pallas kernels' are within
    10% of 8 x params x tokens + 4/3 x attention (remat), while XLA's own cost analysis, which counts
    each windowed loop's body once, is far below. (The tiny fixture above is no FLOPs check: at D 64
    XLA writes some matmuls as multiply + reduce, and its T=48 is padded to the attention kernel's
    128-token blocks.)"""
    import jax

    from tseeds_jax.scale import compile_run, hlo_cost

    cd = _load((1, 8, 1))
    cd.model.arch.update(WINDOWED)
    cd.rollout.max_response_len = 496  # T = 512 with the 16-token prompts
    cd.optim.micro_batch_size = 16
    cd.model.dtype, cd.model.remat = "bfloat16", True
    # TPU runs use the default matmul precision (tests/conftest.py sets "highest" for CPU numerics;
    # Mosaic's splash kernel cannot contract bfloat16 at float32 precision)
    with jax.default_matmul_precision("default"):
        res = compile_run.compile_config(cd, topology="v5p:2x2x2", only=("learner",),
                                         keep_executables=True)
    upd = res.by_name("learner_update")
    loops = hlo_cost.hlo_cost(upd.executable.as_text()).loops
    windowed = [n for name, n in loops if "windowed_dot_general_body" in name]
    assert windowed and all(n > 1 for n in windowed), loops
    expected = analytic_update_flops(cd)
    total = upd.matmul_flops * res.target.mesh.size
    assert abs(total / expected - 1) <= 0.10, (total / expected, upd.to_dict())
    assert upd.compiler_flops * res.target.mesh.size < 0.8 * expected  # what it undercounts
    assert upd.ici_bytes > 0 and set(upd.collective_bytes) >= {"all-gather"}, upd.to_dict()


def _cli(tmp_path, *extra):
    from tseeds_jax.scale import compile_cli

    return compile_cli.main(["--config", CONFIG, *OVERRIDES, "--topology", "v5p:2x2x1", *extra])


def test_unknown_topology_is_one_line(tmp_path, capsys):
    out = tmp_path / "out"
    assert _cli(tmp_path, "--topology", "v9z:2x2", "--only", "stats", "--out", str(out)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--topology='v9z:2x2'" in err[0], err
    assert not out.exists()


def test_unknown_accelerator_is_one_line(capsys):
    from tseeds_jax.scale import compile_cli

    code = compile_cli.main(["--config", CONFIG, *OVERRIDES, "--only", "stats",
                             "--config.hardware.accelerator=v9z-8"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "accelerator" in err[0] and "v9z-8" in err[0], err


def test_mesh_that_does_not_divide_is_one_line(tmp_path, capsys):
    out = tmp_path / "out"
    assert _cli(tmp_path, "--config.mesh.fsdp=3", "--only", "stats", "--out", str(out)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "config.mesh=" in err[0] and "'fsdp': 3" in err[0], err
    assert not out.exists()


def test_scheduler_memory_percent_out_of_range_is_one_line(tmp_path, capsys):
    out = tmp_path / "out"
    code = _cli(tmp_path, "--scheduler-memory-percent", "150", "--only", "stats", "--out",
                str(out))
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "--scheduler-memory-percent=150" in err[0], err
    assert not out.exists()


def test_scheduler_memory_percent_reaches_the_compiler(capsys):
    """The option is passed to libtpu (an unknown option name would fail the compile) and
    recorded in the summary."""
    from tseeds_jax.scale import compile_programs as cp

    assert cp.compiler_options(0) == {}
    with pytest.raises(ValueError, match="expected 1..100"):
        cp.compiler_options(101)
    code = _cli(None, "--scheduler-memory-percent", "40", "--only", "stats", "--json")
    summary = json.loads(capsys.readouterr().out)["summary"]
    assert code == 0 and summary["scheduler_memory_percent"] == 40, summary


def test_config_that_does_not_fit_names_largest_program(tmp_path, capsys):
    out = tmp_path / "out"
    code = _cli(tmp_path, "--config.hardware.hbm_gib_per_device=0.001", "--only", "stats",
                "--out", str(out))
    err = [x for x in capsys.readouterr().err.strip().splitlines() if "does not fit" in x]
    assert code == 1 and len(err) == 1 and "stats_forward" in err[0] and "GiB" in err[0], err
    assert not out.exists()


def lowered_fingerprints(cd, *, topology: str | None = None, only=None) -> dict[str, str]:
    """sha256 of every program's lowered HLO for `cd` now (lowering only, no compile): what a
    launch passes to `check_manifest(hlo_sha256=...)` (`tseeds compile --check` does this)."""
    from tseeds_jax.scale import compile_programs as cp
    from tseeds_jax.scale import compile_run

    t = compile_run.make_target(cd, topology=topology)
    return {prog.name: cp.lower(prog, t.family)[1]
            for prog in compile_run.programs_for(t, only or cp.PHASES)}


def test_manifest_checks_config_and_programs(tmp_path, capsys):
    from tseeds_jax.scale import compile_manifest

    out = tmp_path / "out"
    assert _cli(tmp_path, "--only", "stats", "--out", str(out)) == 0
    assert (out / "manifest.json").exists() and (out / "stats_forward.xla").stat().st_size > 0
    cd = _load()
    hlo = lowered_fingerprints(cd, topology="v5p:2x2x1", only=("stats",))
    manifest = compile_manifest.check_manifest(str(out), cd, topology="v5p:2x2x1",
                                               hlo_sha256=hlo)
    assert set(manifest["programs"]) == {"stats_forward"}
    cd.rollout.max_response_len = 64
    with pytest.raises(compile_manifest.ManifestMismatch, match="rollout.max_response_len=64"):
        compile_manifest.check_manifest(str(out), cd)
    with pytest.raises(compile_manifest.ManifestMismatch, match="stats_forward"):
        compile_manifest.check_manifest(str(out), _load(), hlo_sha256={"stats_forward": "0" * 64})


def test_plan_compare_puts_plan_beside_compiled(result):
    from tseeds_jax.scale import compile_cli, plan_cli

    plan, _ = plan_cli.build_plan(_load(MESH), num_devices=8, hbm_gib=95)
    c = plan_cli.compare(plan, result)
    for phase in ("learner", "stats", "sampler"):
        row = c["phases"][phase]
        assert row["compiled"] == max(x.peak for x in result.compiled if x.phase == phase)
        assert row["plan"] == plan.phase_total("resident") + plan.phase_total(phase)
    assert c["compiled_peak"] == max(r["compiled"] for r in c["phases"].values())
    assert f"compiled for {FIXTURE_TOPOLOGY}" in plan_cli.render_compared(c)
    # each phase flagged by its own ratio (no max-against-max line)
    for row in c["phases"].values():
        assert row["within"] == (abs(row["plan"] / row["compiled"] - 1) <= 0.15)
    text = compile_cli.markdown(result, plan)
    assert "plan / compiled per phase" in text and "per-device peak: plan" not in text
    assert all(f"{ph} " in compile_cli.plan_line(result, plan) for ph in c["phases"])
    assert "with collectives" in text and "GB collectives" in text


# ------------------------------------------------------------------ tseeds compile --check DIR


@pytest.fixture(scope="module")
def compiled_dir(tmp_path_factory):
    """A folder written by `tseeds compile --only stats --out DIR` for the test config."""
    from tseeds_jax.scale import compile_cli

    out = tmp_path_factory.mktemp("compiled") / "out"
    argv = ["--config", CONFIG, *OVERRIDES, "--topology", "v5p:2x2x1", "--only", "stats"]
    assert compile_cli.main([*argv, "--out", str(out)]) == 0
    return out


def _check(where, *extra):
    from tseeds_jax.scale import compile_cli

    return compile_cli.main(["--config", CONFIG, *OVERRIDES, "--check", str(where), *extra])


def test_check_accepts_what_was_compiled(compiled_dir, capsys):
    # the default --only (every group): only the manifest's programs are lowered and compared;
    # the topology comes from the manifest (the tiny config names no accelerator)
    assert _check(compiled_dir) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and out[0].startswith(f"{compiled_dir} matches: 1 programs, config "
                                               "sha256 "), out
    assert out[0].endswith("topology v5p:2x2x1"), out
    assert _check(compiled_dir / "manifest.json", "--topology", "v5p:2x2x1") == 0  # the file


def test_check_names_a_changed_override(compiled_dir, capsys):
    assert _check(compiled_dir, "--config.optim.micro_batch_size=4") == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "config.optim.micro_batch_size=4: compiled with 8" in err[0], err


def test_check_names_a_changed_topology(compiled_dir, capsys):
    assert _check(compiled_dir, "--topology", "v5p:2x2x2") == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'v5p:2x2x2'" in err[0] and "'v5p:2x2x1'" in err[0], err


def test_check_names_a_program_whose_hlo_changed(compiled_dir, tmp_path, capsys):
    import json
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(compiled_dir, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["programs"]["stats_forward"]["hlo_sha256"] = "0" * 64
    (copy / "manifest.json").write_text(json.dumps(manifest))
    assert _check(copy) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'stats_forward': its HLO changed" in err[0], err


@pytest.mark.parametrize("where, extra, says", [
    ("empty", (), "no manifest.json there"),
    ("missing", (), "no such folder"),
    ("empty", ("--out", "elsewhere"), "--check and --out"),
    ("other", (), "not a `tseeds compile --out` manifest (no config, config_sha256"),
])
def test_check_bad_input_is_one_line(where, extra, says, tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "manifest.json").write_text("{}\n")
    extra = tuple(str(tmp_path / x) if x == "elsewhere" else x for x in extra)
    assert _check(tmp_path / where, *extra) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0], err
    assert not (tmp_path / "elsewhere").exists()


def test_pallas_kernel_that_cannot_be_partitioned_does_not_fit(tmp_path, capsys, monkeypatch):
    """A target on which XLA cannot partition the Pallas kernel: the kernel called on the sharded
    tokens directly, without the shard_map wrapper (kernels/sharded.py) that makes it
    partitionable. XLA refuses the Mosaic call; the command must not say "fits" nor write a
    manifest, since a run's kernel "auto" is Pallas on TPU (the chunked recompile is shown only)."""
    import jax
    from tseeds_jax.kernels import sharded

    monkeypatch.setattr(sharded, "over_tokens", lambda fn, h, w, t: fn(h, w, t))
    jax.clear_caches()  # the learner's jitted functions traced by earlier tests: retrace
    out = tmp_path / "out"
    try:
        code = _cli(tmp_path, "--only", "stats", "--out", str(out))
    finally:
        monkeypatch.undo()
        jax.clear_caches()
    cap = capsys.readouterr()
    err = [x for x in cap.err.strip().splitlines() if x.startswith("tseeds compile:")]
    assert code == 1 and len(err) == 1, cap.err[-2000:]
    assert "does not fit" in err[0] and "Pallas" in err[0] and "stats_forward" in err[0], err
    assert "fits: NO" in cap.out and "fits: yes" not in cap.out, cap.out
    assert "kernel_impl=chunked" in cap.out  # the chunked recompile is shown, named as such
    assert not out.exists()
