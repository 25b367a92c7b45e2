"""Server-side tokenization for `tseeds serve`: JetStream text requests (`text_content`).

A text prompt is rendered with the run's prompt template (data/templates.py: the chat format the
run trained with) and encoded with the run's tokenizer; JetStream's orchestrator then decodes
each generated token to text with `decode` and streams it back. Token-id requests
(`token_content`) bypass this tokenizer's `encode` and are served as before.

JetStream decodes one token at a time, with no context. A tokenizer drops a leading space when a
piece starts the text (sentencepiece's "▁", byte-level BPE's "Ġ" are fine), so each token is
decoded after an anchor token and the anchor's text removed: the concatenated stream equals the
tokenizer's decode of the whole response.
"""

from __future__ import annotations

import numpy as np

from tseeds_jax.data.templates import encode_prompt, stop_token_ids
from tseeds_jax.sampling.engine import BOS_SENTINEL, TokenIdTokenizer
from tseeds_jax.sampling.jetstream_compat import token_utils


class TextTokenizer(TokenIdTokenizer):
    """JetStream's tokenizer interface over one of ours (`data.tokenizer.Tokenizer`): the
    id-only tokenizer's BOS sentinel and stop tokens, with text encoded and decoded."""

    def __init__(self, tok, template: str = "raw", stop_tokens=()):
        super().__init__({int(t) for t in stop_tokens} or set(stop_token_ids(tok, template)))
        self.tok, self.template = tok, template
        anchor = tok.encode("a")
        self._anchor = anchor if len(anchor) == 1 else None

    def encode(self, s, is_bos: bool = True, max_prefill_length: int | None = None,
               jax_padding: bool = True, **kwargs):
        ids = np.asarray(encode_prompt(self.tok, self.template, s, strict=False), np.int32)
        if max_prefill_length is not None and ids.size + int(is_bos) > max_prefill_length:
            # the engine refuses it (an empty stream) rather than JetStream's padding failing
            return np.full((max_prefill_length,), -2, np.int32), max_prefill_length + 1
        return token_utils.pad_tokens(ids, BOS_SENTINEL, self.pad_id, is_bos=is_bos,
                                      max_prefill_length=max_prefill_length,
                                      jax_padding=jax_padding)

    def decode(self, token_ids, **kwargs) -> str:
        ids = [int(t) for t in token_ids]
        if self._anchor is None:
            return self.tok.decode(ids, skip_special_tokens=True)
        head = self.tok.decode(self._anchor, skip_special_tokens=True)
        full = self.tok.decode(self._anchor + ids, skip_special_tokens=True)
        return full[len(head):] if full.startswith(head) else \
            self.tok.decode(ids, skip_special_tokens=True)

    @property
    def pad_id(self) -> int:
        return int(self.tok.pad_id)

    @property
    def eos_id(self) -> int:
        return int(self.tok.eos_id)
