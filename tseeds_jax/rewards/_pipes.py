"""The worker's side of one sandboxed run's pipes, shared by both backends' supervisors
(`_bwrap_watch.supervise`, `weak_isolation._supervise`): the test input fed without blocking,
stdout kept, stderr drained with only its tail kept, and the harness's dialog (`_common.Dialog`)
sent on the harness's fd 6. Each backend's own channels (bubblewrap's status/result pipe; the weak
mode's status and result pipes) are read here too and their chunks handed back, because the two
protocols differ while the select loop must not.
"""

from __future__ import annotations

import math
import os
import select
import signal

CHUNK = 65536


def write_some(fd: int, pending: bytearray) -> bool:
    """Write what the pipe takes; False once the reader is gone."""
    try:
        del pending[:os.write(fd, pending[:CHUNK])]
    except BlockingIOError:
        pass
    except BrokenPipeError:
        pending.clear()
        return False
    return True


class RunPipes:
    """w_in: the program's stdin; r_out / r_err: its stdout / stderr; w_spec: the harness's fd 6;
    channels: the backend's other read ends, whose chunks `poll` returns."""

    def __init__(self, data: bytes, *, w_in: int, r_out: int, r_err: int, w_spec: int,
                 channels: tuple[int, ...], stderr_bytes: int, dialog=None):
        self.r_out, self.r_err, self.w_spec = r_out, r_err, w_spec
        self.readers = (r_out, r_err, *channels)
        self.open = set(self.readers)
        self.out, self.err = bytearray(), bytearray()
        self.stderr_bytes, self.dialog = stderr_bytes, dialog
        self.pending = bytearray(data)
        os.set_blocking(w_in, False)
        os.set_blocking(w_spec, False)
        self.w_in = w_in
        if not self.pending:
            os.close(w_in)
            self.w_in = None

    def poll(self, timeout: float) -> list[tuple[int, bytes]]:
        """One select round: feed stdin and the dialog, then read every ready pipe. Returns the
        (fd, chunk) pairs of the backend's channels, in the order read; an ended pipe leaves `open`."""
        wfds = [self.w_in] if self.w_in is not None else []
        if self.dialog is not None and self.dialog.outgoing and self.w_spec is not None:
            wfds.append(self.w_spec)
        r, w, _ = select.select(list(self.open), wfds, [], timeout)
        if self.w_in in w and (not write_some(self.w_in, self.pending) or not self.pending):
            os.close(self.w_in)
            self.w_in = None
        if self.w_spec in w and not write_some(self.w_spec, self.dialog.outgoing):
            os.close(self.w_spec)
            self.w_spec = None
        got = []
        for fd in r:
            chunk = os.read(fd, CHUNK)
            if not chunk:
                self.open.discard(fd)
            elif fd == self.r_out:
                self.out += chunk
            elif fd == self.r_err:
                self.err += chunk
                if len(self.err) > 2 * self.stderr_bytes:  # drained, never fatal: its tail is kept
                    del self.err[:-self.stderr_bytes]
            else:
                got.append((fd, chunk))
        return got

    def close_writers(self) -> None:
        for fd in (self.w_in, self.w_spec):
            if fd is not None:
                os.close(fd)
        self.w_in = self.w_spec = None

    def close_readers(self) -> None:
        for fd in self.readers:
            os.close(fd)

    def stdout(self, output_bytes: int) -> str:
        return self.out[:output_bytes].decode(errors="replace")

    def stderr_tail(self) -> str:
        return self.err[-self.stderr_bytes:][-2000:].decode(errors="replace")


def exit_status(code: int | None, cpu: float, stderr_tail: str, limits) -> str:
    """The status of a program that ended by itself (no timeout, no output limit, no setup error)."""
    if code == 0:
        return "ok"
    # The kernel enforces RLIMIT_CPU on tick-sampled CPU time, while rusage reports the precise
    # run time; on a loaded machine the kill came at 0.83 s of rusage for a 1 s limit.
    if code == -signal.SIGKILL and cpu >= 0.5 * math.ceil(limits.cpu_s):
        return "cpu_limit"
    if "MemoryError" in stderr_tail:
        return "memory"
    return "killed" if code is not None and code < 0 else "exit_nonzero"
