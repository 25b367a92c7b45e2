"""Flag parsing shared by `tseeds plan` and `tseeds compile`: a required `--config FILE[:VARIANT]`
with `--config.a.b=value` overrides, plus each command's own flags (dashes or underscores)."""

from __future__ import annotations

import sys
from collections.abc import Callable


def parse(prog: str, doc: str, argv: list[str], define: Callable) -> object:
    """`define(flags, fv)` adds the command's own flags to `fv`. Prints `doc` for -h/--help;
    a bad flag or a missing --config prints one line naming it and exits 2."""
    from absl import flags
    from ml_collections import config_flags

    fv = flags.FlagValues()
    config_flags.DEFINE_config_file("config", None, "path to a configs/*.py file", flag_values=fv,
                                    lock_config=True)
    define(flags, fv)
    if any(a in ("-h", "--help") for a in argv):
        print(doc)
        raise SystemExit(0)
    # --hbm-gib and --hbm_gib alike; --config.* overrides keep their spelling.
    argv = [_underscored(a) if a.startswith("--") and not a.startswith("--config") else a
            for a in argv]
    # config_flags reads `--config.*` overrides from sys.argv: make it this argv, also when
    # main() is called from Python.
    saved, sys.argv = sys.argv, [prog, *argv]
    try:
        fv([prog, *argv])
    except flags.Error as e:
        print(f"{prog}: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    finally:
        sys.argv = saved
    if fv.config is None:
        print(f"{prog}: --config is required", file=sys.stderr)
        raise SystemExit(2)
    return fv


def _underscored(arg: str) -> str:
    name, eq, value = arg.partition("=")
    return name.replace("-", "_").replace("__", "--", 1) + eq + value
