"""`tseeds convert`: HF safetensors folder <-> Orbax model checkpoint folder, PEFT LoRA adapter
folder <-> Orbax adapter checkpoint folder, and adapters merged into a full HF folder.

    tseeds convert hf-to-orbax HF_DIR OUT_DIR [--dtype bfloat16] [--overwrite]
    tseeds convert orbax-to-hf CKPT_DIR OUT_DIR [--dtype bfloat16] [--max-shard-size 5GB]
    tseeds convert peft-to-orbax PEFT_DIR OUT_DIR [--dtype float32] [--overwrite]
    tseeds convert orbax-to-peft ADAPTER_CKPT_DIR OUT_DIR [--base-model NAME] [--dtype float32]
    tseeds convert merge-lora BASE_DIR ADAPTER_DIR OUT_DIR [--dtype bfloat16] [--max-shard-size 5GB]

merge-lora: BASE_DIR is an HF folder or a model checkpoint folder, ADAPTER_DIR a PEFT folder or
an adapter checkpoint folder; OUT_DIR is an HF folder with W + scale * A @ B in every adapted
weight (what PEFT's merge_and_unload gives).
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
    c = sub.add_parser("peft-to-orbax", help="PEFT LoRA folder -> Orbax adapter checkpoint folder")
    c.add_argument("src", metavar="PEFT_DIR")
    c.add_argument("out", metavar="OUT_DIR")
    c.add_argument("--dtype", choices=_DTYPES, default=None,
                   help="stored adapter dtype (default float32)")
    c.add_argument("--overwrite", action="store_true", help="replace a non-empty OUT_DIR")
    d = sub.add_parser("orbax-to-peft", help="Orbax adapter checkpoint folder -> PEFT LoRA folder")
    d.add_argument("src", metavar="ADAPTER_CKPT_DIR")
    d.add_argument("out", metavar="OUT_DIR")
    d.add_argument("--dtype", choices=_DTYPES, default=None,
                   help="stored dtype of the PEFT weights (default: that of the checkpoint)")
    d.add_argument("--base-model", default=None, metavar="NAME",
                   help="base_model_name_or_path in adapter_config.json (default: the one "
                        "recorded in the checkpoint)")
    d.add_argument("--overwrite", action="store_true", help="replace a non-empty OUT_DIR")
    m = sub.add_parser("merge-lora", help="base (HF or model checkpoint) + adapters (PEFT or "
                       "adapter checkpoint) -> merged HF folder")
    m.add_argument("base", metavar="BASE_DIR")
    m.add_argument("src", metavar="ADAPTER_DIR")
    m.add_argument("out", metavar="OUT_DIR")
    m.add_argument("--dtype", choices=_DTYPES, default=None,
                   help="stored dtype of the merged weights (default: that of the base)")
    m.add_argument("--max-shard-size", default="5GB",
                   help="split safetensors above this size (bytes or e.g. 5GB; default 5GB)")
    m.add_argument("--overwrite", action="store_true", help="replace a non-empty OUT_DIR")
    return p


def _run(args):
    # Imported here so that `--help` does not pay for JAX.
    from tseeds_jax.hf.orbax_io import hf_to_orbax, orbax_to_hf
    from tseeds_jax.hf.peft_orbax import merge_into_hf, orbax_to_peft, peft_to_orbax

    if args.direction == "hf-to-orbax":
        return hf_to_orbax(args.src, args.out, dtype=args.dtype, overwrite=args.overwrite)
    if args.direction == "orbax-to-hf":
        return orbax_to_hf(args.src, args.out, dtype=args.dtype,
                           max_shard_size=args.max_shard_size, overwrite=args.overwrite)
    if args.direction == "peft-to-orbax":
        return peft_to_orbax(args.src, args.out, dtype=args.dtype, overwrite=args.overwrite)
    if args.direction == "orbax-to-peft":
        return orbax_to_peft(args.src, args.out, dtype=args.dtype,
                             base_model_name_or_path=args.base_model, overwrite=args.overwrite)
    return merge_into_hf(args.base, args.src, args.out, dtype=args.dtype,
                         max_shard_size=args.max_shard_size, overwrite=args.overwrite)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(sys.argv[1:] if argv is None else argv)
    try:
        out = _run(args)
    except (ConversionError, ConfigError, FileNotFoundError, FileExistsError, ValueError) as e:
        print(f"tseeds convert: error: {e}", file=sys.stderr)
        return 1
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
