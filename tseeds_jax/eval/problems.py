"""Held-out evaluation problems: a split of a procedural source by a hash of the prompt text.

The split is a property of the prompt string, so a warm-up or RL stream built on the training side
never shows a held-out prompt, whatever generator seed either side uses.
"""

from __future__ import annotations

import zlib

from tseeds_jax.data.compact_arith import CompactChainSum
from tseeds_jax.eval.evaluate import Problem

EVAL_SPLIT_SEED = 10_007  # generator seed of the held-out problems


def is_held_out(prompt: str, modulus: int = 8) -> bool:
    """Held-out split by a hash of the prompt text: never used for warm-up or RL prompts."""
    return zlib.crc32(prompt.encode()) % modulus == 0


class SplitSource:
    """The examples of a `CompactChainSum` on one side of the prompt-hash split.

    Index i maps to the first example at or after i (cyclically) on the requested side, so the
    source stays indexable without enumerating the whole range up front.
    """

    def __init__(self, source: CompactChainSum, *, held_out: bool):
        self.source, self.held_out = source, held_out

    def __len__(self) -> int:
        return len(self.source)

    def _index(self, index: int) -> int:
        n = len(self.source)
        for j in range(n):
            i = (int(index) + j) % n
            if is_held_out(self.source[i]["prompt"]) == self.held_out:
                return i
        raise IndexError("SplitSource: no example on the requested side of the split")

    def __getitem__(self, index: int):
        return self.source[self._index(index)]

    def solution(self, index: int, **kwargs) -> str:
        return self.source.solution(self._index(index), **kwargs)

    @staticmethod
    def alphabet() -> str:
        return CompactChainSum.alphabet()


def held_out_problems(source, encode, count: int, *, max_prompt_len: int | None = None):
    """The first `count` distinct held-out problems of `source` (any indexable example source)."""
    if count < 1:
        raise ValueError(f"held_out_problems: count={count} must be >= 1")
    src = SplitSource(source, held_out=True)
    out, seen = [], set()
    for i in range(len(source)):
        ex = src[i]
        if ex["prompt"] in seen:
            continue
        seen.add(ex["prompt"])
        ids = tuple(encode(ex["prompt"]))
        if max_prompt_len is not None and len(ids) > max_prompt_len:
            continue
        out.append(Problem(ids, ex["reference"], ex["prompt"]))
        if len(out) == count:
            return out
    raise ValueError(f"held_out_problems: the source has fewer than {count} held-out problems")
