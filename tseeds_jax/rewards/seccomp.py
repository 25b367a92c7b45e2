"""The seccomp filter every sandboxed program runs under (both backends; docs/sandbox.md).

Refused with EACCES (the program sees an ordinary OSError):
  - socket(2) for every family but AF_UNIX, and io_uring_setup (it can open sockets): no network;
  - add_key, request_key, keyctl: the trainer's session keyring is out of reach (a key read,
    overwritten or planted there would be a channel between programs and out of the run);
  - SysV IPC (shmget/shmat/shmctl/shmdt, semget/semop/semtimedop/semctl, msgget/msgsnd/msgrcv/
    msgctl), POSIX message queues (mq_open) and memfd_create/memfd_secret: memory they hold counts
    toward no process, so RLIMIT_AS would not bound it;
  - unshare, setns, and clone with any namespace flag: no nested user/pid/net/... namespaces
    (kernel attack surface); clone3 gets ENOSYS, so the C library falls back to clone, whose
    flags the filter can read (clone3 passes them in memory);
  - ptrace, process_vm_readv/writev, pidfd_getfd: one process of a sandbox cannot read or steer
    another (the assert checker of `harness` runs beside the program);
  - bpf, perf_event_open, userfaultfd: kernel attack surface no test needs.
Any other architecture than the native one (x86-64 or aarch64; the x32 ABI too) is killed.
"""

from __future__ import annotations

import errno
import functools
import platform
import struct

_DENY_NAMES = (
    "add_key", "request_key", "keyctl",
    "shmget", "shmat", "shmctl", "shmdt", "semget", "semop", "semtimedop", "semctl",
    "msgget", "msgsnd", "msgrcv", "msgctl", "mq_open", "memfd_create", "memfd_secret",
    "unshare", "setns", "ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd",
    "bpf", "perf_event_open", "userfaultfd", "io_uring_setup",
)
# syscall numbers (asm/unistd_64.h for x86-64, asm-generic/unistd.h for aarch64)
_NR = {
    "x86_64": dict(
        socket=41, clone=56, clone3=435, add_key=248, request_key=249, keyctl=250, shmget=29,
        shmat=30, shmctl=31, shmdt=67, semget=64, semop=65, semtimedop=220, semctl=66, msgget=68,
        msgsnd=69, msgrcv=70, msgctl=71, mq_open=240, memfd_create=319, memfd_secret=447,
        unshare=272, setns=308, ptrace=101, process_vm_readv=310, process_vm_writev=311,
        pidfd_getfd=438, bpf=321, perf_event_open=298, userfaultfd=323, io_uring_setup=425),
    "aarch64": dict(
        socket=198, clone=220, clone3=435, add_key=217, request_key=218, keyctl=219, shmget=194,
        shmat=196, shmctl=195, shmdt=197, semget=190, semop=193, semtimedop=192, semctl=191,
        msgget=186, msgsnd=189, msgrcv=188, msgctl=187, mq_open=180, memfd_create=279,
        memfd_secret=447, unshare=97, setns=268, ptrace=117, process_vm_readv=270,
        process_vm_writev=271, pidfd_getfd=438, bpf=280, perf_event_open=241, userfaultfd=282,
        io_uring_setup=425),
}
_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
# CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET (CLONE_NEWTIME only via
# clone3/unshare, both refused)
CLONE_NS_FLAGS = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000
AF_UNIX = 1

_RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000
_RET_KILL_PROCESS = 0x80000000
_LD_W_ABS, _JEQ_K, _JGE_K, _JSET_K, _RET_K = 0x20, 0x15, 0x35, 0x45, 0x06


def supported() -> bool:
    return platform.machine() in _NR


def refused_syscalls() -> tuple[str, ...]:
    """Names of the syscalls refused outright (socket and clone are refused by argument)."""
    return _DENY_NAMES + ("clone3",)


def _program(machine: str) -> list[tuple]:
    nr = _NR[machine]
    # (label:op, k, jump-true label, jump-false label); labels are resolved to offsets by `_assemble`
    prog = [("ld", 4), ("jeq", _AUDIT_ARCH[machine], "nr", "kill"), ("nr:ld", 0)]
    if machine == "x86_64":
        prog.append(("jge", 0x40000000, "deny", None))  # x32 syscalls alias the 64-bit ones
    prog += [("jeq", nr[name], "deny", None) for name in _DENY_NAMES]
    prog += [
        ("jeq", nr["clone3"], "nosys", None),
        ("jeq", nr["clone"], "flags", None),
        ("jeq", nr["socket"], "dom", "allow"),
        ("flags:ld", 16),  # args[0] low 32 bits (little-endian): clone's flags on both arches
        ("jset", CLONE_NS_FLAGS, "deny", "allow"),
        ("dom:ld", 16),  # socket's domain
        ("jeq", AF_UNIX, "allow", "deny"),
        ("allow:ret", _RET_ALLOW),
        ("deny:ret", _RET_ERRNO | errno.EACCES),
        ("nosys:ret", _RET_ERRNO | errno.ENOSYS),
        ("kill:ret", _RET_KILL_PROCESS),
    ]
    return prog


def _assemble(prog: list[tuple]) -> bytes:
    labels = {ins[0].split(":")[0]: i for i, ins in enumerate(prog) if ":" in ins[0]}
    ops = {"jeq": _JEQ_K, "jge": _JGE_K, "jset": _JSET_K}
    out = b""
    for i, ins in enumerate(prog):
        op = ins[0].split(":")[-1]
        if op in ("ld", "ret"):
            out += struct.pack("HBBI", _LD_W_ABS if op == "ld" else _RET_K, 0, 0, ins[1])
            continue
        jt = 0 if ins[2] is None else labels[ins[2]] - i - 1
        jf = 0 if len(ins) < 4 or ins[3] is None else labels[ins[3]] - i - 1
        if not (0 <= jt < 256 and 0 <= jf < 256):
            raise ValueError(f"seccomp jump out of range at instruction {i}")
        out += struct.pack("HBBI", ops[op], jt, jf, ins[1])
    return out


@functools.cache
def filter_bytes(machine: str | None = None) -> bytes:
    """The filter as an array of `struct sock_filter` (what `bwrap --add-seccomp-fd` reads)."""
    return _assemble(_program(machine or platform.machine()))
