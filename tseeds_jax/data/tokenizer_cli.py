"""`tseeds tokenizer`: train a sentencepiece model locally, or inspect any supported tokenizer.

  tseeds tokenizer train --input corpus.txt [--input more.txt] --vocab-size 512 --out tok.model
      [--model-type unigram|bpe|char|word] [--template qwen_math] [--special-token TOKEN]...
  tseeds tokenizer inspect tok.model|tokenizer.json|FOLDER [--text "..."] [--template plain]
"""

from __future__ import annotations

import argparse
import json
import sys

import tseeds_jax.data.templates as templates
from tseeds_jax.data.tokenizer import load_tokenizer
from tseeds_jax.data.tokenizer_train import SP_MODEL_TYPES, train_sentencepiece_from_files


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tseeds tokenizer", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="action", required=True)
    t = sub.add_parser("train", help="train a sentencepiece model on UTF-8 text files")
    t.add_argument("--input", action="append", required=True, metavar="TEXT",
                   help="UTF-8 text file (repeat for several)")
    t.add_argument("--vocab-size", type=int, required=True)
    t.add_argument("--out", required=True, metavar="MODEL", help="output .model path")
    t.add_argument("--model-type", default="unigram", choices=SP_MODEL_TYPES)
    t.add_argument("--template", action="append", default=[],
                   help="add the special tokens of a prompt template "
                        f"{sorted(templates.TEMPLATES)}")
    t.add_argument("--special-token", action="append", default=[], help="extra special token")
    t.add_argument("--byte-fallback", action="store_true")
    t.add_argument("--hard-vocab-limit", action="store_true",
                   help="fail unless exactly --vocab-size pieces can be made")
    t.add_argument("--threads", type=int, default=1)
    i = sub.add_parser("inspect", help="print special ids and optionally encode a text")
    i.add_argument("path", help="a .model file, a tokenizer.json or a folder holding one")
    i.add_argument("--text", help="text to encode and decode")
    i.add_argument("--template", help="render --text with this prompt template first")
    return p


def _train(args) -> int:
    specials: list[str] = []
    for name in args.template:
        specials += templates.template_special_tokens(name)
    specials += args.special_token
    stop = [s for name in args.template for s in templates.get_template(name).stop_tokens]
    tok = train_sentencepiece_from_files(
        args.input, vocab_size=args.vocab_size, model_type=args.model_type,
        special_tokens=list(dict.fromkeys(specials)), stop_tokens=list(dict.fromkeys(stop)),
        byte_fallback=args.byte_fallback, hard_vocab_limit=args.hard_vocab_limit,
        num_threads=args.threads, out=args.out)
    print(json.dumps({"out": args.out, "vocab_size": tok.vocab_size, "bos_id": tok.bos_id,
                      "eos_id": tok.eos_id, "pad_id": tok.pad_id, "stop_ids": tok.stop_ids}))
    return 0


def _inspect(args) -> int:
    tok = load_tokenizer(args.path)
    info = {"type": type(tok).__name__, "vocab_size": tok.vocab_size, "bos_id": tok.bos_id,
            "eos_id": tok.eos_id, "pad_id": tok.pad_id, "stop_ids": list(tok.stop_ids)}
    if args.text is not None:
        if args.template:
            text = templates.get_template(args.template).render(args.text)
            ids = templates.encode_prompt(tok, args.template, args.text, strict=False)
            info["stop_ids"] = list(templates.stop_token_ids(tok, args.template))
        else:
            text, ids = args.text, tok.encode(args.text)
        info.update(text=text, ids=ids, pieces=[tok.id_to_token(t) for t in ids],
                    decoded=tok.decode(ids), round_trip=tok.decode(ids) == text)
    print(json.dumps(info, ensure_ascii=False))
    return 0


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    try:
        return _train(args) if args.action == "train" else _inspect(args)
    except (ValueError, TypeError) as e:
        print(f"tseeds tokenizer: error: {e}", file=sys.stderr)
        return 1
