"""Small run-dir files (metrics.jsonl, TensorBoard events, a trained tokenizer) on any run root.

Orbax writes checkpoints to a `gs://` run dir itself. The other files of a run are written by
libraries that only know local paths (tensorboardX without google-cloud-storage, sentencepiece) or
need appends, which object stores do not have. For a remote run dir they live in a local mirror
directory and are copied to the run dir through `etils.epath` (gcsfs underneath for `gs://`):
`pull` when a run starts or resumes, `push` after every checkpoint, so the remote copy is never
behind the last committed checkpoint. For a local run dir the mirror *is* the run dir and both
are no-ops.
"""

from __future__ import annotations

import hashlib
import os
import tempfile

from etils import epath

MIRROR_ENV = "TSEEDS_LOCAL_MIRROR"  # parent folder of the local mirrors (default: the temp dir)


def is_remote(run_dir: str) -> bool:
    """A URL-style run dir (gs://, s3://, ...) rather than a local path."""
    return "://" in str(run_dir)


def local_dir(run_dir: str, *, remote: bool | None = None) -> str:
    """Where the run's small files are written on this host: the run dir itself when it is local,
    else a mirror folder named after the run dir (stable across restarts of the same run).
    `remote` overrides `is_remote(run_dir)`: tests use a local folder as a stand-in remote."""
    remote = is_remote(run_dir) if remote is None else remote
    if not remote:
        return str(run_dir)
    key = str(run_dir) if is_remote(run_dir) else "stand-in://" + os.path.abspath(run_dir)
    base = os.environ.get(MIRROR_ENV) or os.path.join(tempfile.gettempdir(), "tseeds-mirror")
    return os.path.join(base, hashlib.sha1(key.encode()).hexdigest()[:16])


def _copy_tree(src: epath.Path, dst: epath.Path) -> None:
    if src.is_dir():
        dst.mkdir(parents=True, exist_ok=True)
        for child in src.iterdir():
            _copy_tree(child, dst / child.name)
    else:
        dst.parent.mkdir(parents=True, exist_ok=True)  # no-op on object stores
        src.copy(dst, overwrite=True)


def pull(run_dir: str, name: str, *, remote: bool | None = None) -> bool:
    """Copies `run_dir/name` (a file or folder) into the local mirror; True if it existed."""
    remote = is_remote(run_dir) if remote is None else remote
    if not remote:
        return False
    src = epath.Path(run_dir) / name
    if not src.exists():
        return False
    _copy_tree(src, epath.Path(local_dir(run_dir, remote=True)) / name)
    return True


def push(run_dir: str, name: str, *, remote: bool | None = None) -> None:
    """Copies the mirror's `name` (a file or folder) to `run_dir/name`, replacing what was there."""
    remote = is_remote(run_dir) if remote is None else remote
    if not remote:
        return
    src = epath.Path(local_dir(run_dir, remote=True)) / name
    if not src.exists():
        return
    dst = epath.Path(run_dir) / name
    if dst.is_dir():
        dst.rmtree()  # a rebuilt TensorBoard folder replaces the old events, not adds to them
    _copy_tree(src, dst)
