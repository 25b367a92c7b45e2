"""One tokenizer interface over sentencepiece models and HF `tokenizer.json` files.

Token ids are plain Python ints; a sequence of ids is a `list[int]`. Both back ends encode text
*with* special-token recognition: a special token written in the text (e.g. `<|im_end|>` in a chat
template) becomes its single id, the same way HF `tokenizers` treats added special tokens, so a
formatted prompt encodes to the ids the reference implementation produces. BOS/EOS are added only
when asked (`add_bos`/`add_eos`), never implicitly.

Training lives in `tseeds_jax.data.tokenizer_train`; prompt formatting in
`tseeds_jax.data.templates`.
"""

from __future__ import annotations

import abc
import json
import os
from collections.abc import Iterable, Sequence

# Names under which HF checkpoints commonly spell their special tokens, most specific first; used
# only when tokenizer_config.json does not say which token plays which role.
_EOS_CANDIDATES = ("<|endoftext|>", "<｜end▁of▁sentence｜>", "<|end_of_text|>", "</s>", "<eos>",
                   "<|eos|>", "[EOS]")
_BOS_CANDIDATES = ("<｜begin▁of▁sentence｜>", "<|begin_of_text|>", "<s>", "<bos>", "<|bos|>",
                   "[BOS]")
_PAD_CANDIDATES = ("<|pad|>", "<pad>", "[PAD]", "<|finetune_right_pad_id|>")


class Tokenizer(abc.ABC):
    """Common interface. Subclasses set `vocab_size`, `bos_id` (None if absent), `eos_id`,
    `pad_id` and `extra_stop_ids` (ids other than EOS that end generation, e.g. `<|im_end|>`).
    """

    vocab_size: int
    bos_id: int | None
    eos_id: int
    pad_id: int
    extra_stop_ids: tuple[int, ...] = ()

    @abc.abstractmethod
    def _encode(self, text: str) -> list[int]: ...

    @abc.abstractmethod
    def _decode(self, ids: list[int], skip_special_tokens: bool) -> str: ...

    @abc.abstractmethod
    def token_to_id(self, token: str) -> int | None:
        """Id of `token` if it is a single vocabulary entry (special tokens included), else None."""

    @abc.abstractmethod
    def id_to_token(self, token_id: int) -> str:
        """The vocabulary entry of `token_id` (raw piece, not decoded text)."""

    def encode(self, text: str, *, add_bos: bool = False, add_eos: bool = False) -> list[int]:
        """Text -> ids. Special tokens written in `text` map to their single ids."""
        if not isinstance(text, str):
            raise TypeError(f"encode: text must be str, got {type(text).__name__}")
        ids = self._encode(text)
        if add_bos:
            if self.bos_id is None:
                raise ValueError("encode: add_bos=True but this tokenizer has no BOS token")
            ids = [self.bos_id, *ids]
        if add_eos:
            ids = [*ids, self.eos_id]
        return ids

    def decode(self, ids: Iterable[int], *, skip_special_tokens: bool = False) -> str:
        """Ids -> text. `ids` may be any iterable of ints (a numpy array works)."""
        ids = [int(i) for i in ids]
        bad = [i for i in ids if not 0 <= i < self.vocab_size]
        if bad:
            raise ValueError(f"decode: ids {bad[:5]} outside [0, vocab_size={self.vocab_size})")
        return self._decode(ids, skip_special_tokens)

    def encode_batch(self, texts: Sequence[str], **kwargs) -> list[list[int]]:
        return [self.encode(t, **kwargs) for t in texts]

    @property
    def stop_ids(self) -> tuple[int, ...]:
        """Ids that end a generation: EOS first, then `extra_stop_ids` (deduplicated)."""
        return tuple(dict.fromkeys((self.eos_id, *self.extra_stop_ids)))

    @property
    def special_ids(self) -> frozenset[int]:
        ids = {self.eos_id, self.pad_id, *self.extra_stop_ids}
        if self.bos_id is not None:
            ids.add(self.bos_id)
        return frozenset(ids)

    def require_token(self, token: str) -> int:
        """Id of `token`; ValueError naming the token if it is not one vocabulary entry."""
        token_id = self.token_to_id(token)
        if token_id is None:
            raise ValueError(f"token {token!r} is not a single entry of the vocabulary")
        return token_id

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(vocab_size={self.vocab_size}, bos_id={self.bos_id}, "
                f"eos_id={self.eos_id}, pad_id={self.pad_id}, stop_ids={self.stop_ids})")


class SentencePieceTokenizer(Tokenizer):
    """A sentencepiece model (`.model` file or serialized proto bytes).

    Control symbols (pad/unk/bos/eos) are never matched in text; user-defined symbols (template
    tokens like `<|im_end|>`, and `\\n` for models trained by `train_sentencepiece`) always are.
    Special ids come from the model; a model without EOS is rejected, a model without PAD pads
    with EOS.
    """

    def __init__(self, model: str | os.PathLike | bytes, *, stop_tokens: Sequence[str] = ()):
        import sentencepiece as spm

        if isinstance(model, bytes):
            self.path = None
            self._sp = spm.SentencePieceProcessor(model_proto=model)
        else:
            self.path = os.fspath(model)
            if not os.path.isfile(self.path):
                raise ValueError(f"sentencepiece model file not found: {self.path!r}")
            try:
                self._sp = spm.SentencePieceProcessor(model_file=self.path)
            except Exception as e:  # sentencepiece raises bare RuntimeError/OSError
                raise ValueError(f"{self.path}: not a sentencepiece model ({e})") from e
        sp = self._sp
        self.vocab_size = int(sp.get_piece_size())
        eos = sp.eos_id()
        if eos < 0:
            raise ValueError(f"sentencepiece model {self.path or '<bytes>'} has no EOS id")
        self.eos_id = int(eos)
        self.bos_id = int(sp.bos_id()) if sp.bos_id() >= 0 else None
        self.pad_id = int(sp.pad_id()) if sp.pad_id() >= 0 else self.eos_id
        self.unk_id = int(sp.unk_id())
        self._piece_to_id = {sp.id_to_piece(i): i for i in range(self.vocab_size)}
        self.extra_stop_ids = tuple(self.require_token(t) for t in stop_tokens)

    def _encode(self, text: str) -> list[int]:
        return list(self._sp.encode(text, out_type=int))

    def _decode(self, ids: list[int], skip_special_tokens: bool) -> str:
        sp = self._sp
        if not skip_special_tokens:
            return sp.decode(ids)
        # User-defined symbols (template tokens) are kept by sp.decode; drop the special ones.
        keep = [i for i in ids if i not in self.special_ids and not sp.is_control(i)]
        return sp.decode(keep)

    def token_to_id(self, token: str) -> int | None:
        return self._piece_to_id.get(token)

    def id_to_token(self, token_id: int) -> str:
        return self._sp.id_to_piece(int(token_id))

    def serialized_proto(self) -> bytes:
        return self._sp.serialized_model_proto()

    def save(self, path: str | os.PathLike) -> str:
        path = os.fspath(path)
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path, "wb") as f:
            f.write(self.serialized_proto())
        return path


def _token_content(value) -> str | None:
    """tokenizer_config.json stores a token as a string or as {"content": ..., ...}."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


class HFTokenizer(Tokenizer):
    """An HF fast tokenizer (`tokenizer.json`) through the `tokenizers` library.

    `path` is a `tokenizer.json` file or a folder holding one. BOS/EOS/PAD come from, in order:
    the explicit arguments, the folder's `tokenizer_config.json`, well-known token names. Extra
    stop ids come from `stop_tokens` plus the folder's `generation_config.json` `eos_token_id`.
    """

    def __init__(self, path: str | os.PathLike, *, bos_token: str | None = None,
                 eos_token: str | None = None, pad_token: str | None = None,
                 stop_tokens: Sequence[str] = ()):
        from tokenizers import Tokenizer as _HFTok

        path = os.fspath(path)
        folder = path if os.path.isdir(path) else os.path.dirname(path)
        file = os.path.join(path, "tokenizer.json") if os.path.isdir(path) else path
        if not os.path.isfile(file):
            raise ValueError(f"HF tokenizer file not found: {file!r}")
        try:
            self._tok = _HFTok.from_file(file)
        except Exception as e:  # tokenizers raises its own Exception subclass
            raise ValueError(f"{file}: not a valid tokenizer.json ({e})") from e
        self.path = file
        self.vocab_size = int(self._tok.get_vocab_size(with_added_tokens=True))

        cfg = _read_json_if_exists(os.path.join(folder, "tokenizer_config.json"))
        bos_token = bos_token or _token_content(cfg.get("bos_token"))
        eos_token = eos_token or _token_content(cfg.get("eos_token"))
        pad_token = pad_token or _token_content(cfg.get("pad_token"))

        self.bos_id = self._resolve(bos_token, _BOS_CANDIDATES, "bos_token", required=False)
        eos_id = self._resolve(eos_token, _EOS_CANDIDATES, "eos_token", required=True)
        assert eos_id is not None
        self.eos_id = eos_id
        pad_id = self._resolve(pad_token, _PAD_CANDIDATES, "pad_token", required=False)
        self.pad_id = self.eos_id if pad_id is None else pad_id

        extra = [self.require_token(t) for t in stop_tokens]
        gen = _read_json_if_exists(os.path.join(folder, "generation_config.json")).get(
            "eos_token_id")
        if gen is not None:
            extra += [int(i) for i in (gen if isinstance(gen, list) else [gen])]
        self.extra_stop_ids = tuple(i for i in dict.fromkeys(extra) if i != self.eos_id)
        self._special = frozenset(
            int(i) for i, added in self._tok.get_added_tokens_decoder().items() if added.special)

    def _resolve(self, token: str | None, candidates: Sequence[str], role: str,
                 required: bool) -> int | None:
        if token is not None:
            token_id = self._tok.token_to_id(token)
            if token_id is None:
                raise ValueError(f"{self.path}: {role} {token!r} is not in the vocabulary")
            return int(token_id)
        for cand in candidates:
            token_id = self._tok.token_to_id(cand)
            if token_id is not None:
                return int(token_id)
        if required:
            raise ValueError(
                f"{self.path}: cannot tell which token is {role}; pass {role}= or add a "
                f"tokenizer_config.json (looked for {list(candidates)})")
        return None

    def _encode(self, text: str) -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=False).ids)

    def _decode(self, ids: list[int], skip_special_tokens: bool) -> str:
        return self._tok.decode(ids, skip_special_tokens=skip_special_tokens)

    def token_to_id(self, token: str) -> int | None:
        token_id = self._tok.token_to_id(token)
        return None if token_id is None else int(token_id)

    def id_to_token(self, token_id: int) -> str:
        token = self._tok.id_to_token(int(token_id))
        if token is None:
            raise ValueError(f"id_to_token: id {token_id} not in vocabulary")
        return token

    @property
    def special_ids(self) -> frozenset[int]:
        return super().special_ids | self._special


def _read_json_if_exists(path: str) -> dict:
    if not os.path.isfile(path):
        return {}
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}:{e.lineno}: malformed JSON ({e.msg})") from e
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data


def load_tokenizer(path: str | os.PathLike, **kwargs) -> Tokenizer:
    """Load by file type: `*.model` -> sentencepiece; `tokenizer.json` or a folder holding one ->
    HF; a folder holding only `tokenizer.model` -> sentencepiece. kwargs go to the constructor."""
    path = os.fspath(path)
    if os.path.isdir(path):
        if os.path.isfile(os.path.join(path, "tokenizer.json")):
            return HFTokenizer(path, **kwargs)
        if os.path.isfile(os.path.join(path, "tokenizer.model")):
            return SentencePieceTokenizer(os.path.join(path, "tokenizer.model"), **kwargs)
        raise ValueError(f"{path}: folder has neither tokenizer.json nor tokenizer.model")
    if path.endswith(".json"):
        return HFTokenizer(path, **kwargs)
    if path.endswith(".model"):
        return SentencePieceTokenizer(path, **kwargs)
    raise ValueError(f"load_tokenizer: cannot tell the tokenizer type of {path!r} "
                     "(expected a .model file, a tokenizer.json or a folder)")
