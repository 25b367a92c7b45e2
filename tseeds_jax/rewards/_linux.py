"""Thin ctypes wrappers for the Linux calls the sandbox needs and Python 3.11 lacks.

`unshare` (os.unshare is 3.12+), `mount`, `prctl` (no-new-privs, parent-death signal) and installing
the seccomp filter of `seccomp`. Everything here is called only in freshly
forked, single-threaded children of a reward worker; none of it is used in the trainer process.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

import tseeds_jax.rewards.seccomp as seccomp

CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000

MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_NOATIME = 1024
MS_NODIRATIME = 2048
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
MS_RELATIME = 1 << 21
MS_STRICTATIME = 1 << 24

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_SECCOMP = 22
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38
SECCOMP_MODE_FILTER = 2

_libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
_libc.unshare.argtypes = [ctypes.c_int]
_libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def unshare(flags: int) -> None:
    """unshare(2); raises OSError (EPERM/EINVAL) when the system refuses."""
    _check(_libc.unshare(flags), f"unshare({flags:#x})")


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    enc = lambda s: None if s is None else s.encode()  # noqa: E731
    _check(_libc.mount(enc(source), enc(target), enc(fstype), flags, enc(data)), f"mount({target})")


def set_no_new_privs() -> None:
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(NO_NEW_PRIVS)")


def set_dumpable(on: bool = True) -> None:
    """on: make /proc/self ours again after a uid change (the kernel hands it to root until exec).
    off: no process of our uid may read our memory or fds through /proc, or ptrace us."""
    _check(_libc.prctl(PR_SET_DUMPABLE, int(on), 0, 0, 0), "prctl(DUMPABLE)")


def set_child_subreaper() -> None:
    _check(_libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), "prctl(CHILD_SUBREAPER)")


def set_parent_death_signal(sig: int) -> None:
    _check(_libc.prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0), "prctl(PDEATHSIG)")


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def seccomp_supported() -> bool:
    return seccomp.supported()


def install_filter() -> None:
    """Install `seccomp.filter_bytes()` in this process (needs no-new-privs)."""
    code = seccomp.filter_bytes()
    buf = ctypes.create_string_buffer(code, len(code))
    prog = _SockFprog(len(code) // 8, ctypes.cast(buf, ctypes.c_void_p))
    _check(_libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(prog), 0, 0), "seccomp")
