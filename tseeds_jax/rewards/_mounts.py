"""The filesystem a sandboxed program sees: what is covered, what the interpreter needs bound back.

`plan` runs in the reward worker, on the host's view of the paths, before anything is mounted
(inside the new mount namespace the paths it resolves may already be covered). `apply` runs in the
setup child's private mount namespace. Every step that can fail raises `SetupError` naming the step
and carrying the OS error, so a broken sandbox reports *why* (docs/sandbox.md).

Coverage: a fresh tmpfs over /tmp (the program's working directory lives there) and small empty
tmpfs mounts over the hidden directories. Whatever the interpreter needs that lies under a covered
directory — its prefix, a venv, every directory and symlink met while resolving `sys.executable`
(a venv's `python` -> a pyenv `python` -> `python3.11`, or a symlinked directory on the way) — is
bound back read-only, or the symlink recreated, at the same path. A hidden directory that lies
inside such a kept directory is covered again afterwards.
"""

from __future__ import annotations

import dataclasses
import errno as errno_mod
import os
from pathlib import Path

import tseeds_jax.rewards._linux as lx

# Test-only hook (tests/test_sandbox_setup.py): "mount" makes the /tmp mount fail in the kernel
# (ENODEV: an unknown filesystem type); "exec" makes the program exec a missing interpreter.
FAIL_ENV = "TSEEDS_SANDBOX_TEST_FAIL"


class SetupError(Exception):
    """A sandbox setup step failed; `step` names it (which mount, which exec), `errno` the OS error."""

    def __init__(self, step: str, err: BaseException | str):
        self.step = step
        self.errno = getattr(err, "errno", None)
        self.error = str(err) or type(err).__name__
        super().__init__(f"{step}: {self.error}")

    def as_dict(self) -> dict:
        name = errno_mod.errorcode.get(self.errno) if self.errno is not None else None
        return {"step": self.step, "errno": self.errno, "errno_name": name, "error": self.error}


def step(name: str, fn, *args, **kwargs):
    """Run one setup step; any failure becomes a SetupError naming the step."""
    try:
        return fn(*args, **kwargs)
    except SetupError:
        raise
    except Exception as e:  # noqa: BLE001 - every failure of a step is reported the same way
        raise SetupError(name, e) from e


def under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def resolve(path: str) -> tuple[str, list[tuple[str, str]]]:
    """(real path, [(location, target)] of every symlink met while resolving `path`).

    Locations are in real-parent coordinates: where a kernel walking `path` meets each link once
    the links before it are followed — what must exist again inside the sandbox.
    """
    links: list[tuple[str, str]] = []
    budget = [40]  # the kernel's own limit on symlinks per walk

    def walk(p: str) -> str:
        cur = "/"
        for name in Path(os.path.normpath(p)).parts[1:]:
            nxt = os.path.join(cur, name)
            if os.path.islink(nxt):
                budget[0] -= 1
                if budget[0] < 0:
                    raise OSError(errno_mod.ELOOP, f"too many symlinks resolving {path}")
                target = os.readlink(nxt)
                links.append((nxt, target))
                cur = walk(os.path.join(cur, target))
            else:
                cur = nxt
        return cur

    return walk(os.path.abspath(path)), links


@dataclasses.dataclass(frozen=True)
class Plan:
    """tmp: the fresh /tmp; covers: the other tmpfs mount points (none inside another cover);
    keep: real directories bound back read-only; links: [(location, target)] symlinks recreated;
    recover: hidden directories inside a kept one, covered again after the binds; refused: needed
    directories that are themselves a covered root (binding them back would uncover it)."""

    tmp: str
    covers: tuple[str, ...]
    keep: tuple[str, ...]
    links: tuple[tuple[str, str], ...]
    recover: tuple[str, ...]
    refused: tuple[str, ...]


def plan(hidden: list[str], needed: list[str], tmp: str = "/tmp") -> Plan:
    """Plan the mounts hiding `hidden` (real directories) and `tmp` while keeping every path in
    `needed` (files or directories, as the program's exec and the interpreter's startup name them)."""
    tmp = os.path.realpath(tmp)
    roots = sorted({tmp, *hidden}, key=lambda p: (len(p), p))
    covers: list[str] = []
    for r in roots:  # parents sort first; a directory inside a cover is covered already
        if not any(under(r, c) for c in covers):
            covers.append(r)
    keep: list[str] = []
    links: list[tuple[str, str]] = []
    refused: list[str] = []
    for p in needed:
        real, met = resolve(p)
        d = real if os.path.isdir(real) else os.path.dirname(real)
        links += met
        if any(under(c, d) for c in covers):
            refused.append(d)
        elif any(under(d, c) for c in covers):
            keep.append(d)
    kept: list[str] = []
    for d in sorted(set(keep), key=lambda p: (len(p), p)):
        if not any(under(d, k) for k in kept):
            kept.append(d)
    link_set: list[tuple[str, str]] = []
    for loc, target in links:
        covered = any(under(loc, c) for c in covers)
        if covered and not any(under(loc, k) for k in kept) and (loc, target) not in link_set:
            link_set.append((loc, target))
    recover = [h for h in hidden if any(under(h, k) and h != k for k in kept)]
    return Plan(tmp, tuple(c for c in covers if c != tmp), tuple(kept), tuple(link_set),
                tuple(recover), tuple(refused))


_OPT_FLAGS = {
    "nosuid": lx.MS_NOSUID, "nodev": lx.MS_NODEV, "noexec": lx.MS_NOEXEC,
    "noatime": lx.MS_NOATIME, "nodiratime": lx.MS_NODIRATIME, "relatime": lx.MS_RELATIME,
}
# statvfs f_flag bits -> mount flags (a bind remount must repeat them: in a user namespace they
# are locked, and leaving one out is EPERM)
_ST_FLAGS = {2: lx.MS_NOSUID, 4: lx.MS_NODEV, 8: lx.MS_NOEXEC, 1024: lx.MS_NOATIME,
             2048: lx.MS_NODIRATIME, 4096: lx.MS_RELATIME}


def _opt_flags(opts: str) -> int:
    return sum(_OPT_FLAGS.get(o, 0) for o in set(opts.split(",")))


def _fd_flags(fd: int) -> int:
    f = os.fstatvfs(fd).f_flag
    out = sum(m for bit, m in _ST_FLAGS.items() if f & bit)
    return out if f & (1024 | 4096) else out | lx.MS_STRICTATIME


def _remount_all_readonly() -> list[str]:
    """Every writable mount but /proc, /sys, /dev read-only; returns those the kernel refused."""
    refused = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        mp, opts = fields[4].replace("\\040", " "), fields[5]
        if any(under(mp, p) for p in ("/proc", "/sys", "/dev")) or "ro" in opts.split(","):
            continue
        try:
            lx.mount(None, mp, None, lx.MS_REMOUNT | lx.MS_BIND | lx.MS_RDONLY | _opt_flags(opts))
        except OSError:
            refused.append(mp)  # best effort (documented); reported in the isolation details
    return refused


def _cover(path: str, size: str, hook: bool = False) -> None:
    fstype = "tmpfs"
    if hook and os.environ.get(FAIL_ENV) == "mount":
        fstype = "tseeds-test-no-such-fs"
    step(f"mount tmpfs on {path}", lx.mount, "tmpfs", path, fstype, lx.MS_NOSUID | lx.MS_NODEV,
         f"size={size},mode=755")


def apply(p: Plan, tmpfs_mb: int) -> list[str]:
    """In a private mount namespace: make the planned view. Returns mounts left writable."""
    step("make mounts private (mount / MS_REC|MS_PRIVATE)", lx.mount, None, "/", None,
         lx.MS_REC | lx.MS_PRIVATE)
    # Opened before anything is covered: the binds below reach the directories through these.
    fds = [(k, step(f"open {k}", os.open, k, os.O_PATH | os.O_DIRECTORY)) for k in p.keep]
    writable = _remount_all_readonly()
    _cover(p.tmp, f"{tmpfs_mb}m", hook=True)
    for c in p.covers:
        _cover(c, "1m")
    for target, fd in fds:
        step(f"mkdir {target}", os.makedirs, target, exist_ok=True)
        step(f"bind {target}", lx.mount, f"/proc/self/fd/{fd}", target, None, lx.MS_BIND | lx.MS_REC)
        flags = lx.MS_REMOUNT | lx.MS_BIND | lx.MS_RDONLY | lx.MS_NOSUID | lx.MS_NODEV | _fd_flags(fd)
        step(f"remount read-only {target}", lx.mount, None, target, None, flags)
        os.close(fd)
    for loc, target in p.links:
        step(f"mkdir {os.path.dirname(loc)}", os.makedirs, os.path.dirname(loc), exist_ok=True)
        step(f"symlink {loc} -> {target}", os.symlink, target, loc)
    for h in p.recover:
        _cover(h, "1m")
    return writable
