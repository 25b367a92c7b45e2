"""The `tseeds` command: parses the sub-command name and dispatches; it computes nothing.

Each sub-command lives in its own module with a `main(argv) -> int` function, imported only when
that sub-command runs, so `tseeds --help` stays fast and one broken extra never breaks the others.
"""

from __future__ import annotations

import importlib
import sys

# name -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("tseeds_jax.demo.cli", "run the embedded default experiment (on-policy vs Thinking Seeds)"),
    "train": ("tseeds_jax.rl.train_cli", "train with an ml_collections config"),
    "eval": ("tseeds_jax.eval.cli", "avg@k / pass@k and relay evaluation of checkpoints"),
    "report": ("tseeds_jax.eval.report_cli", "write the markdown report with plots for a run folder"),
    "export": ("tseeds_jax.export.cli", "export a trained run as an HF (or PEFT) folder"),
    "convert": ("tseeds_jax.hf.cli", "convert HF safetensors <-> Orbax checkpoints"),
    "serve": ("tseeds_jax.export.serve_cli", "serve a checkpoint with JetStream's gRPC server"),
    "plan": ("tseeds_jax.scale.plan_cli", "per-device memory plan for a config"),
    "compile": ("tseeds_jax.scale.compile_cli", "compile a config's step programs for its TPU target"),
    "tokenizer": ("tseeds_jax.data.tokenizer_cli", "train or inspect a tokenizer"),
    "doctor": ("tseeds_jax.rewards.doctor_cli", "check that the code sandbox runs programs here"),
}


def _usage() -> str:
    width = max(map(len, COMMANDS))
    rows = "\n".join(f"  {name:<{width}}  {text}" for name, (_, text) in COMMANDS.items())
    return f"usage: tseeds COMMAND [ARGS...]\n\ncommands:\n{rows}\n\n`tseeds COMMAND --help` for details."


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(_usage())
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"tseeds: unknown command {name!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    # Before anything imports JAX: no libtpu probing (and its errors) where no TPU is attached.
    from tseeds_jax.platforms import choose_platform

    choose_platform(name)
    module = importlib.import_module(COMMANDS[name][0])
    return int(module.main(rest) or 0)


if __name__ == "__main__":
    sys.exit(main())
