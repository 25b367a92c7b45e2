"""A run's tokenizer in HF's format, for `tseeds export`: files `transformers.AutoTokenizer` loads.

- An HF tokenizer (`tokenizer.json`): its folder's tokenizer files, copied as they came.
- A sentencepiece model (`spm:` or the `train:char` character model): converted to a
  `tokenizer.json` (the `tokenizers` Unigram model over the same pieces and scores, the same
  whitespace handling, user-defined symbols as added tokens and control symbols as special
  tokens) plus `tokenizer_config.json` naming `PreTrainedTokenizerFast`. Only what converts
  exactly is converted: unigram and char models with identity normalisation. The converted
  tokenizer is checked against sentencepiece on the vocabulary's pieces and on `probe_texts`
  before anything is written; any other model, or a probe that encodes differently, raises
  `TokenizerExportError` naming the model file and the setting or text.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Sequence
from pathlib import Path

from tseeds_jax.data.tokenizer import HFTokenizer, SentencePieceTokenizer, Tokenizer

TOKENIZER_FILES = (
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model",
    "vocab.json", "merges.txt", "vocab.txt", "added_tokens.json", "chat_template.jinja",
    "chat_template.json",
)
_PROBES = ("Question: 3 + 4 + 5 = ?\nAnswer: 12", "  two  spaces, tabs\tand\nnewlines\n",
           "0123456789 +-*/=()", "hello world")


class TokenizerExportError(ValueError):
    """The tokenizer cannot be written in a form transformers loads identically."""


def export_tokenizer(tok: Tokenizer, out_dir: str | os.PathLike, *,
                     probe_texts: Sequence[str] = ()) -> list[str]:
    """Writes `tok` into `out_dir` in HF's format; returns the file names written."""
    out = Path(out_dir)
    if isinstance(tok, HFTokenizer):
        src = Path(tok.path).parent
        names = [n for n in TOKENIZER_FILES if (src / n).is_file()]
        for name in names:
            shutil.copy2(src / name, out / name)
        return names
    if isinstance(tok, SentencePieceTokenizer):
        return _write_sentencepiece(tok, out, probe_texts)
    raise TokenizerExportError(f"tokenizer {tok!r}: no HF form for a {type(tok).__name__}")


def _spec(tok: SentencePieceTokenizer):
    from sentencepiece import sentencepiece_model_pb2

    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(tok.serialized_proto())
    return proto


def build_hf_tokenizer(tok: SentencePieceTokenizer):
    """A `tokenizers.Tokenizer` equivalent to the sentencepiece model of `tok`."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    proto = _spec(tok)
    name = tok.path or "<sentencepiece bytes>"
    ts, ns = proto.trainer_spec, proto.normalizer_spec
    kinds = {1: "unigram", 2: "bpe", 3: "word", 4: "char"}
    kind = kinds.get(ts.model_type, str(ts.model_type))
    if kind not in ("unigram", "char"):
        raise TokenizerExportError(f"{name}: sentencepiece model_type={kind!r} has no exact "
                                   "tokenizer.json form here (unigram and char models do); "
                                   "train a unigram or char model, or use an HF tokenizer")
    if ns.name not in ("identity", "") or ns.precompiled_charsmap:
        raise TokenizerExportError(f"{name}: sentencepiece normalization_rule_name={ns.name!r}: "
                                   "only 'identity' converts exactly")
    if ns.remove_extra_whitespaces:
        raise TokenizerExportError(f"{name}: sentencepiece remove_extra_whitespaces=True does not "
                                   "convert exactly")
    if ts.treat_whitespace_as_suffix:
        raise TokenizerExportError(f"{name}: treat_whitespace_as_suffix=True does not convert")
    vocab = [(p.piece, float(p.score)) for p in proto.pieces]
    model = models.Unigram(vocab, unk_id=tok.unk_id, byte_fallback=bool(ts.byte_fallback))
    hf = Tokenizer(model)
    prepend = "always" if ns.add_dummy_prefix else "never"
    pre = [pre_tokenizers.Metaspace(replacement="▁", prepend_scheme=prepend,
                                    split=bool(ts.split_by_whitespace))]
    if ts.split_digits:
        pre.insert(0, pre_tokenizers.Digits(individual_digits=True))
    hf.pre_tokenizer = pre_tokenizers.Sequence(pre)
    dec = [decoders.Metaspace(replacement="▁", prepend_scheme=prepend)]
    if ts.byte_fallback:
        dec.insert(0, decoders.ByteFallback())
    hf.decoder = decoders.Sequence(dec)
    # Control symbols (pad/unk/bos/eos) are special; user-defined ones ("\n", template tokens)
    # are always one piece, as in sentencepiece.
    special, user = [], []
    for p in proto.pieces:
        if p.type in (2, 3):  # UNKNOWN, CONTROL
            special.append(AddedToken(p.piece, special=True, normalized=False))
        elif p.type == 4:  # USER_DEFINED
            user.append(AddedToken(p.piece, special=False, normalized=False))
    hf.add_special_tokens(special)
    hf.add_tokens(user)
    return hf


def _check(tok: SentencePieceTokenizer, hf, probes: Sequence[str]) -> None:
    texts = list(probes) + list(_PROBES)
    texts.append("".join(tok.id_to_token(i).replace("▁", " ") for i in range(tok.vocab_size)
                         if not tok._sp.is_control(i) and not tok._sp.is_unknown(i)))
    for text in texts:
        want = tok.encode(text)
        if tok.unk_id in want and text not in probes:
            continue  # characters outside the vocabulary: sentencepiece fuses their unknowns
        got = hf.encode(text, add_special_tokens=False).ids
        if got != want:
            raise TokenizerExportError(
                f"{tok.path}: the converted tokenizer encodes {text[:60]!r} to {got[:12]}, "
                f"sentencepiece to {want[:12]}; not exported")
    if hf.get_vocab_size(with_added_tokens=True) != tok.vocab_size:
        raise TokenizerExportError(f"{tok.path}: converted vocabulary has "
                                   f"{hf.get_vocab_size(with_added_tokens=True)} entries, "
                                   f"sentencepiece {tok.vocab_size}")


def _write_sentencepiece(tok: SentencePieceTokenizer, out: Path,
                         probes: Sequence[str]) -> list[str]:
    hf = build_hf_tokenizer(tok)
    _check(tok, hf, probes)
    hf.save(str(out / "tokenizer.json"))
    roles = {"eos_token": tok.eos_id, "pad_token": tok.pad_id, "unk_token": tok.unk_id}
    if tok.bos_id is not None:
        roles["bos_token"] = tok.bos_id
    tokens = {role: tok.id_to_token(i) for role, i in roles.items()}
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "add_bos_token": False,
              "add_eos_token": False, "clean_up_tokenization_spaces": False,
              "model_max_length": 1 << 30, **tokens}
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
    (out / "special_tokens_map.json").write_text(json.dumps(tokens, indent=2) + "\n")
    return ["tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"]
