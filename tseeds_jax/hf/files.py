"""Output folders written all-or-nothing, and the tokenizer files that travel with a model."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

# Everything a tokenizer / generation setup may need next to the weights.
TOKENIZER_FILES = (
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model",
    "vocab.json", "merges.txt", "vocab.txt", "added_tokens.json", "chat_template.jinja",
    "chat_template.json", "generation_config.json",
)


def copy_tokenizer_files(src: str | os.PathLike, dst: str | os.PathLike) -> list[str]:
    """Copies the TOKENIZER_FILES present in `src` to `dst`; returns their names."""
    src, dst = Path(src), Path(dst)
    copied = []
    for name in TOKENIZER_FILES:
        if (src / name).is_file():
            shutil.copy2(src / name, dst / name)
            copied.append(name)
    return copied


@contextlib.contextmanager
def atomic_output_dir(dest: str | os.PathLike, *, overwrite: bool = False) -> Iterator[Path]:
    """Yields a fresh temporary folder next to `dest`; renames it to `dest` on success.

    On any exception the temporary folder is removed and `dest` is left as it was. An existing
    `dest` must be empty unless `overwrite=True` (then it is replaced).
    """
    dest = Path(dest).absolute()
    if dest.exists():
        if not dest.is_dir():
            raise FileExistsError(f"{dest}: exists and is not a directory")
        if any(dest.iterdir()) and not overwrite:
            raise FileExistsError(f"{dest}: exists and is not empty (pass overwrite=True)")
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.tmp-", dir=dest.parent))
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if dest.exists():
        # Move the old folder aside first so that `dest` is never a mix of old and new files.
        old = Path(tempfile.mkdtemp(prefix=f".{dest.name}.old-", dir=dest.parent))
        os.replace(dest, old / "x")
        os.replace(tmp, dest)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, dest)
