"""Train small tokenizers locally (seconds): sentencepiece from strings or files, and a byte-level
BPE `tokenizer.json` through HF `tokenizers` (for tests of the HF code paths; no downloads).

Sentencepiece models trained here use ids pad=0, unk=1, bos=2, eos=3, identity normalisation
(text is never rewritten, so decode(encode(x)) == x for every character the model covers), no
dummy-prefix space, and `\\n` plus the given special tokens as user-defined symbols (always one
piece; the trainer reads one sentence per line and would otherwise never see a newline).
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Iterable, Iterator, Sequence

from tseeds_jax.data.tokenizer import HFTokenizer, SentencePieceTokenizer

SP_MODEL_TYPES = ("unigram", "bpe", "char", "word")
_NUM_SP_CONTROL = 4  # pad, unk, bos, eos


def _lines(texts: Iterable[str]) -> Iterator[str]:
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(f"train_sentencepiece: texts[{i}] is {type(text).__name__}, not str")
        for line in text.split("\n"):
            if line:
                yield line


def train_sentencepiece(texts: Iterable[str], *, vocab_size: int, model_type: str = "unigram",
                        special_tokens: Sequence[str] = (), stop_tokens: Sequence[str] = (),
                        byte_fallback: bool = False, character_coverage: float = 1.0,
                        hard_vocab_limit: bool = False, num_threads: int = 1,
                        out: str | os.PathLike | None = None) -> SentencePieceTokenizer:
    """Train a sentencepiece model on `texts` (any iterable of strings; newlines split sentences).

    `model_type`: "unigram" | "bpe" | "char" (character level: one piece per character, the
    smallest vocabularies) | "word". `vocab_size` is an upper bound unless `hard_vocab_limit`
    (sentencepiece stops early when the corpus has fewer pieces). `special_tokens` (e.g.
    `templates.template_special_tokens("qwen_math")`) become single pieces; `stop_tokens` (a
    subset) are added to the tokenizer's stop ids. `byte_fallback` encodes unseen characters as
    UTF-8 bytes (needs vocab_size > 256 + specials) instead of `<unk>`. Writes the model to `out`
    when given. Returns the loaded tokenizer.
    """
    import sentencepiece as spm

    if model_type not in SP_MODEL_TYPES:
        raise ValueError(f"train_sentencepiece: model_type {model_type!r} not in {SP_MODEL_TYPES}")
    symbols = list(dict.fromkeys(["\n", *special_tokens]))
    if any(not isinstance(s, str) or not s for s in symbols):
        raise ValueError(f"train_sentencepiece: special_tokens must be non-empty strings, got "
                         f"{list(special_tokens)}")
    missing_stop = [s for s in stop_tokens if s not in symbols]
    if missing_stop:
        raise ValueError(f"train_sentencepiece: stop_tokens {missing_stop} not in special_tokens")
    minimum = _NUM_SP_CONTROL + len(symbols) + 1 + (256 if byte_fallback else 0)
    if not isinstance(vocab_size, int) or vocab_size < minimum:
        raise ValueError(f"train_sentencepiece: vocab_size={vocab_size!r} too small; needs >= "
                         f"{minimum} ({_NUM_SP_CONTROL} control + {len(symbols)} special"
                         f"{' + 256 bytes' if byte_fallback else ''} + 1)")
    lines = list(_lines(texts))
    if not lines:
        raise ValueError("train_sentencepiece: texts hold no non-empty line")
    writer = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(lines), model_writer=writer, model_type=model_type,
            vocab_size=vocab_size, hard_vocab_limit=hard_vocab_limit,
            pad_id=0, unk_id=1, bos_id=2, eos_id=3, user_defined_symbols=symbols,
            normalization_rule_name="identity", remove_extra_whitespaces=False,
            add_dummy_prefix=False, allow_whitespace_only_pieces=True, split_digits=True,
            byte_fallback=byte_fallback, character_coverage=character_coverage,
            max_sentence_length=1 << 16, num_threads=num_threads, minloglevel=2)
    except RuntimeError as e:
        raise ValueError(f"train_sentencepiece: sentencepiece refused the settings "
                         f"(vocab_size={vocab_size}, model_type={model_type}): {e}") from e
    tokenizer = SentencePieceTokenizer(writer.getvalue(), stop_tokens=stop_tokens)
    if out is not None:
        tokenizer.save(out)
        tokenizer.path = os.fspath(out)
    return tokenizer


def train_sentencepiece_from_files(paths: Sequence[str | os.PathLike], **kwargs
                                   ) -> SentencePieceTokenizer:
    """`train_sentencepiece` over UTF-8 text files (errors name the file that cannot be read)."""
    def texts() -> Iterator[str]:
        for p in paths:
            p = os.fspath(p)
            if not os.path.isfile(p):
                raise ValueError(f"tokenizer training input not found: {p!r}")
            try:
                with open(p, encoding="utf-8") as f:
                    yield from f
            except UnicodeDecodeError as e:
                raise ValueError(f"{p}: not UTF-8 text ({e})") from e
    return train_sentencepiece(texts(), **kwargs)


def train_hf_bpe(texts: Iterable[str], *, vocab_size: int, out_dir: str | os.PathLike,
                 special_tokens: Sequence[str] = ("<|endoftext|>", "<|im_start|>", "<|im_end|>"),
                 eos_token: str = "<|endoftext|>", bos_token: str | None = None,
                 pad_token: str | None = None) -> HFTokenizer:
    """Train a byte-level BPE (GPT-2/Qwen style: no normaliser, lossless) and write
    `out_dir/tokenizer.json` + `tokenizer_config.json`. Any text round-trips exactly."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    for role, tok in (("eos_token", eos_token), ("bos_token", bos_token),
                      ("pad_token", pad_token)):
        if tok is not None and tok not in special_tokens:
            raise ValueError(f"train_hf_bpe: {role} {tok!r} not in special_tokens")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(special_tokens),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(list(texts), trainer=trainer)
    out_dir = os.fspath(out_dir)
    os.makedirs(out_dir, exist_ok=True)
    tok.save(os.path.join(out_dir, "tokenizer.json"))
    cfg = {"eos_token": eos_token, "bos_token": bos_token, "pad_token": pad_token}
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f, indent=1)
    return HFTokenizer(out_dir)
