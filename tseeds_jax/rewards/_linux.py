"""Thin ctypes wrappers for the Linux calls the sandbox needs and Python 3.11 lacks.

`unshare` (os.unshare is 3.12+), `mount`, `prctl` (no-new-privs, parent-death signal) and a seccomp
filter that refuses every socket family except AF_UNIX. Everything here is called only in freshly
forked, single-threaded children of a reward worker; none of it is used in the trainer process.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import platform
import struct

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


def set_dumpable() -> None:
    """Make /proc/self ours again after a uid change (the kernel hands it to root until exec)."""
    _check(_libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0), "prctl(DUMPABLE)")


def set_child_subreaper() -> None:
    _check(_libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), "prctl(CHILD_SUBREAPER)")


def set_parent_death_signal(sig: int) -> None:
    _check(_libc.prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0), "prctl(PDEATHSIG)")


# --- seccomp: allow everything except non-AF_UNIX sockets and io_uring (which can open sockets) ---
_ARCH = {  # machine -> (AUDIT_ARCH_*, __NR_socket, __NR_io_uring_setup, has x32 ABI)
    "x86_64": (0xC000003E, 41, 425, True),
    "aarch64": (0xC00000B7, 198, 425, False),
}
_RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000
_RET_KILL_PROCESS = 0x80000000
_LD_W_ABS, _JEQ_K, _JGE_K, _RET_K = 0x20, 0x15, 0x35, 0x06
AF_UNIX = 1


def seccomp_supported() -> bool:
    return platform.machine() in _ARCH


def _socket_filter() -> bytes:
    arch, nr_socket, nr_uring, x32 = _ARCH[platform.machine()]
    # (code, jump-true label, jump-false label, k); labels are resolved to relative offsets below.
    prog = [("ld", 4), ("jeq", arch, "nr", "kill"), ("nr:ld", 0)]
    if x32:
        prog.append(("jge", 0x40000000, "deny", None))  # x32 syscalls alias the 64-bit ones
    prog += [
        ("jeq", nr_uring, "deny", None),
        ("jeq", nr_socket, "dom", "allow"),
        ("dom:ld", 16),  # args[0] (domain), low 32 bits on a little-endian machine
        ("jeq", AF_UNIX, "allow", "deny"),
        ("allow:ret", _RET_ALLOW),
        ("deny:ret", _RET_ERRNO | errno.EACCES),
        ("kill:ret", _RET_KILL_PROCESS),
    ]
    labels = {}
    for i, ins in enumerate(prog):
        if ":" in ins[0]:
            labels[ins[0].split(":")[0]] = i
    out = b""
    for i, ins in enumerate(prog):
        op = ins[0].split(":")[-1]
        if op == "ld":
            out += struct.pack("HBBI", _LD_W_ABS, 0, 0, ins[1])
        elif op == "ret":
            out += struct.pack("HBBI", _RET_K, 0, 0, ins[1])
        else:
            jt = 0 if ins[2] is None else labels[ins[2]] - i - 1
            jf = 0 if ins[3] is None else labels[ins[3]] - i - 1
            out += struct.pack("HBBI", _JEQ_K if op == "jeq" else _JGE_K, jt, jf, ins[1])
    return out


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def socket_filter_bytes() -> bytes:
    """The filter as an array of `struct sock_filter` (what `bwrap --add-seccomp-fd` reads)."""
    return _socket_filter()


def install_socket_filter() -> None:
    """Refuse socket(2) for every family but AF_UNIX (EACCES) and io_uring_setup; needs no-new-privs."""
    code = _socket_filter()
    buf = ctypes.create_string_buffer(code, len(code))
    prog = _SockFprog(len(code) // 8, ctypes.cast(buf, ctypes.c_void_p))
    _check(_libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(prog), 0, 0), "seccomp")
