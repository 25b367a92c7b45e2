"""The suite starts in a venv that also holds a peer stack (issue 56).

verl's wheel installs a top-level `tests` package into site-packages. While this folder was a
namespace package (no __init__.py), Python preferred that regular package to it, and
`tests/conftest.py`'s `from tests.xla_env import ...` failed before any test ran. A stand-in for
that wheel (a regular `tests` package later on the path than the checkout) is enough to show it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_collects_beside_another_top_level_tests_package(tmp_path):
    site = tmp_path / "site"
    (site / "tests").mkdir(parents=True)
    (site / "tests" / "__init__.py").write_text('"""A peer stack\'s own tests package."""\n')
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(site)])
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
         "tests/test_structure.py"], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "test_no_import_cycle_among_modules" in out.stdout
