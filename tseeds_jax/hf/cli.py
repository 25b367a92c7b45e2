"""`tseeds convert`: HF safetensors folder <-> Orbax model checkpoint folder.

    tseeds convert hf-to-orbax HF_DIR OUT_DIR [--dtype bfloat16] [--overwrite]
    tseeds convert orbax-to-hf CKPT_DIR OUT_DIR [--dtype bfloat16] [--max-shard-size 5GB]
"""

from __future__ import annotations

import argparse
import sys

from tseeds_jax.hf.errors import ConversionError
from tseeds_jax.model.config import ConfigError

_DTYPES = ("float32", "bfloat16", "float16")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tseeds convert", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="direction", required=True)
    a = sub.add_parser("hf-to-orbax", help="HF folder -> Orbax model checkpoint folder")
    a.add_argument("src", metavar="HF_DIR")
    a.add_argument("out", metavar="OUT_DIR")
    a.add_argument("--dtype", choices=_DTYPES, default=None,
                   help="stored parameter dtype (default: that of the HF weights)")
    a.add_argument("--overwrite", action="store_true", help="replace a non-empty OUT_DIR")
    b = sub.add_parser("orbax-to-hf", help="Orbax model checkpoint folder -> HF folder")
    b.add_argument("src", metavar="CKPT_DIR")
    b.add_argument("out", metavar="OUT_DIR")
    b.add_argument("--dtype", choices=_DTYPES, default=None,
                   help="stored dtype of the HF weights (default: that of the checkpoint)")
    b.add_argument("--max-shard-size", default="5GB",
                   help="split safetensors above this size (bytes or e.g. 5GB; default 5GB)")
    b.add_argument("--overwrite", action="store_true", help="replace a non-empty OUT_DIR")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(sys.argv[1:] if argv is None else argv)
    # Imported here so that `--help` does not pay for JAX.
    from tseeds_jax.hf.orbax_io import hf_to_orbax, orbax_to_hf

    try:
        if args.direction == "hf-to-orbax":
            out = hf_to_orbax(args.src, args.out, dtype=args.dtype, overwrite=args.overwrite)
        else:
            out = orbax_to_hf(args.src, args.out, dtype=args.dtype,
                              max_shard_size=args.max_shard_size, overwrite=args.overwrite)
    except (ConversionError, ConfigError, FileNotFoundError, FileExistsError, ValueError) as e:
        print(f"tseeds convert: error: {e}", file=sys.stderr)
        return 1
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
