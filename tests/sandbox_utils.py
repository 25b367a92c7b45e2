"""Helpers for the sandbox tests: throw-away venvs holding nothing but the project's path, and
reward workers restarted with another interpreter or environment."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path

import tseeds_jax
from tseeds_jax.rewards import _pool

PROJECT_PATH = str(Path(tseeds_jax.__file__).resolve().parents[1])  # the checkout being tested


def make_venv(where: Path, project: str = PROJECT_PATH) -> str:
    """A venv at `where` (no pip, nothing installed) whose only addition is `project` on its path;
    returns its interpreter (a symlink to the base interpreter, as `python -m venv` makes it)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True, timeout=120)
    python = str(where / "bin" / "python")
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True, timeout=60,
    ).stdout.strip()
    Path(purelib, "tseeds_project.pth").write_text(project + "\n")
    return python


@contextlib.contextmanager
def workers(python: str | None = None, **env: str):
    """Reward workers started with `python` and `env` added to the environment, for the block."""
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    _pool.restart_shared(python)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        _pool.restart_shared(None)
