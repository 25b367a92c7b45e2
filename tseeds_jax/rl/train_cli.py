"""`tseeds train --config configs/NAME.py [--config.a.b=value ...]`.

Exit codes: 0 done; 2 bad arguments or config; 75 stopped by SIGTERM or a preemption notice
after writing a checkpoint (relaunch to resume); 130 stopped by Ctrl-C (after a checkpoint, or
at once on a second Ctrl-C); 1 anything else (a traceback, a run whose checkpoints do not
restore). See docs/tpu.md, "Preemption".
"""

from __future__ import annotations

import json
import sys


def _parse(argv: list[str]):
    from absl import flags
    from ml_collections import config_flags

    fv = flags.FlagValues()
    # sys_argv: config_flags reads the config path early to define the --config.* overrides.
    config_flags.DEFINE_config_file("config", None, "path to a configs/*.py file", flag_values=fv,
                                    lock_config=True, sys_argv=["tseeds train", *argv])
    flags.DEFINE_integer("steps", None, "override config.steps", flag_values=fv)
    flags.DEFINE_bool("resume", True, "resume from the run dir's latest checkpoint", flag_values=fv)
    flags.DEFINE_string("compiled", None, "a `tseeds compile --out` folder (or its manifest.json): "
                        "refuse to decode on another layout than it was compiled for",
                        flag_values=fv)
    if any(a in ("-h", "--help") for a in argv):
        print(__doc__ + "\n" + fv.main_module_help())
        raise SystemExit(0)
    try:
        fv(["tseeds train", *argv])
    except (KeyError, AttributeError) as e:  # config_flags: an override of a field that is absent
        overrides = [a.split("=")[0] for a in argv if a.startswith("--config.")]
        print(f"tseeds train: no such config field {e} (overrides given: {overrides})",
              file=sys.stderr)
        raise SystemExit(2) from None
    except flags.Error as e:
        print(f"tseeds train: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    if fv.config is None:
        print("tseeds train: --config is required", file=sys.stderr)
        raise SystemExit(2)
    return fv


def progress_bar(total: int, initial: int):
    from tqdm.auto import tqdm

    bar = tqdm(total=total, initial=initial, unit="step", dynamic_ncols=True)

    def update(step, end, m):
        bar.update(step - bar.n)
        bar.set_postfix(acc=f"{m.get('accuracy', 0):.3f}", R=f"{m.get('reward', 0):.3f}",
                        H=f"{float(m.get('entropy/all', 0)):.2f}",
                        seed=f"{m.get('seed_length', 0):.1f}", tok_s=f"{m['tokens_per_second']:.0f}")

    return bar, update


def expect_compiled_layout(trainer, where: str) -> str | None:
    """Makes the run's weight sync refuse a decode layout other than the one `tseeds compile`
    recorded in `where` (checked at the first sync, before any sampling); a problem found now
    is returned as text."""
    from tseeds_jax.decode_layout import read_recorded

    try:
        path, recorded = read_recorded(where)
    except ValueError as e:
        return str(e)
    sync = getattr(trainer.env.sample_fn, "weight_sync", None)
    if (sync is None) != (recorded is None):
        return (f"--compiled={where!r}: compiled with decode_layout={recorded!r}, but this run's "
                f"hardware.sampler_placement is {trainer.cfg.hardware.sampler_placement!r}")
    if sync is not None:
        sync.expect_compiled(recorded, path)
    return None


def main(argv: list[str]) -> int:
    fv = _parse(argv)
    from tseeds_jax.rl.config import ConfigValueError, TrainConfig

    cd = fv.config
    if fv.steps is not None:
        cd.steps = fv.steps
    try:
        cfg = TrainConfig.from_config(cd)
    except (ConfigValueError, ValueError, TypeError) as e:
        print(f"tseeds train: invalid config: {e}", file=sys.stderr)
        return 2
    from tseeds_jax.rl.run.preemption import Preempted
    from tseeds_jax.rl.run.state_io import CheckpointError
    from tseeds_jax.rl.setup import make_trainer

    trainer = make_trainer(cfg, config_json=json.loads(cd.to_json_best_effort()))
    if fv.compiled:
        problem = expect_compiled_layout(trainer, fv.compiled)
        if problem:
            print(f"tseeds train: {problem}", file=sys.stderr)
            return 2
    try:
        if fv.resume and trainer.restore():
            print(f"resumed from step {trainer.step} in {cfg.run_dir}", flush=True)
    except CheckpointError as e:
        print(f"tseeds train: {e}", file=sys.stderr)
        return 1
    bar, update = progress_bar(cfg.steps, trainer.step) if cfg.progress else (None, None)
    try:
        trainer.run(progress=update)
    except Preempted as e:
        what = "preempted" if e.exit_code != 130 else "interrupted"
        print(f"\n{what} ({e.reason}): checkpoint written at step {e.step} in {cfg.run_dir}",
              file=sys.stderr, flush=True)
        return e.exit_code
    except KeyboardInterrupt:
        print(f"\ninterrupted twice: stopped at once, no checkpoint of this step; a restart "
              f"resumes from the latest checkpoint in {cfg.run_dir}", file=sys.stderr, flush=True)
        return 130
    finally:
        if bar is not None:
            bar.close()
    last = trainer.history[-1] if trainer.history else {}
    print(json.dumps({k: last.get(k) for k in ("accuracy", "reward", "loss")
                      if k in last}, default=float))
    print(f"metrics: {cfg.run_dir}/metrics.jsonl")
    return 0
