"""A trained run out of its folder: `tseeds export` (HF / PEFT folders with the run's tokenizer,
run_export.py) and `tseeds serve --run` (serve_cli.py). Above `hf`, `rl` and `sampling`: it uses
all three, none of them uses it."""
