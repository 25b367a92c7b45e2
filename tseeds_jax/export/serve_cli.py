"""`tseeds serve`: sampling/serve.py's server, with `--run RUN_DIR[@STEP]` serving a training
run's model (the one `tseeds eval` evaluates, rl/run/loaded.py), tokenizer and prompt template."""

from __future__ import annotations

from tseeds_jax.export.run_export import parse_run


def load_run_model(spec: str):
    """(model, tokenizer, template) of a training run's checkpoint, RUN_DIR or RUN_DIR@STEP."""
    from tseeds_jax.rl.run.loaded import open_run

    run = open_run(*parse_run(spec))
    return run.merged(), run.tokenizer, run.cfg.data.template


def main(argv: list[str] | None = None) -> int:
    from tseeds_jax.sampling import serve

    return serve.main(argv, load_run_model=load_run_model)
