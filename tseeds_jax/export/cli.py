"""`tseeds export RUN_DIR[@STEP] OUT [--format hf|merged|peft] [--dtype bfloat16]`: a trained
run out as an HF folder (config.json, safetensors, generation_config.json, tokenizer) that
transformers, vLLM and SGLang load, or a LoRA run's PEFT adapter folder.

    tseeds export runs/x OUT                       # the latest checkpoint, HF folder
    tseeds export runs/x@40 OUT --dtype bfloat16   # step 40, bfloat16 weights
    tseeds export runs/lora OUT --format peft      # adapters; base_model_name_or_path = the base
    tseeds export runs/lora OUT --format merged    # adapters merged into the base, HF folder

Use `tseeds export` for training runs; `tseeds convert` stays for checkpoint-to-checkpoint
work (HF <-> model checkpoint folders, PEFT <-> adapter checkpoint folders). docs/export.md.
"""

from __future__ import annotations

import argparse
import sys

_DTYPES = ("float32", "bfloat16", "float16")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tseeds export", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run", metavar="RUN_DIR[@STEP]", help="training run folder (local or gs://)")
    p.add_argument("out", metavar="OUT", help="output folder")
    p.add_argument("--format", dest="fmt", choices=("hf", "merged", "peft"), default="hf",
                   help="hf (default; a LoRA run merged), merged (LoRA runs), peft (LoRA runs)")
    p.add_argument("--dtype", choices=_DTYPES, default=None,
                   help="stored weight dtype (default: the run's parameter dtype)")
    p.add_argument("--max-shard-size", default="5GB",
                   help="split safetensors above this size (bytes or e.g. 5GB; default 5GB)")
    p.add_argument("--base-model", default=None, metavar="NAME_OR_DIR",
                   help="peft: base_model_name_or_path (default: the run's hf: base folder)")
    p.add_argument("--overwrite", action="store_true", help="replace a non-empty OUT")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(sys.argv[1:] if argv is None else argv)
    from tseeds_jax.export.run_export import export_run

    try:
        out = export_run(args.run, args.out, fmt=args.fmt, dtype=args.dtype,
                         max_shard_size=(int(args.max_shard_size) if args.max_shard_size.isdigit()
                                         else args.max_shard_size), base_model=args.base_model,
                         overwrite=args.overwrite)
    except (ValueError, FileNotFoundError, FileExistsError, KeyError) as e:
        # ConversionError, RunSourceError and TokenizerExportError are ValueErrors
        print(f"tseeds export: error: {e}", file=sys.stderr)
        return 1
    print(f"wrote {out} ({args.fmt})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
