"""Watching one bubblewrap run from the worker (`_bwrap.run` starts it): stdin fed, stdout capped,
stderr drained with its tail kept, the harness's dialog driven (`_common.Dialog`), the wall clock
enforced; and a run that never reached the program turned into the setup step that failed.
"""

from __future__ import annotations

import errno as errno_mod
import math
import os
import re
import select
import signal
import time

from tseeds_jax.rewards._common import RunResult, kill, sweep_uid

_STRERROR = {os.strerror(e): e for e in sorted(errno_mod.errorcode, reverse=True)}


def _layer(message: str) -> str:
    m = message.lower()
    if "namespace" in m or "uid map" in m or "gid map" in m or "setgroups" in m:
        return "user namespace"
    if "execvp" in m:
        return "interpreter"
    if "seccomp" in m:
        return "seccomp filter"
    if "loopback" in m:
        return "network namespace"
    if any(w in m for w in ("mount", "source path", "tmpfs", "pivot", "bind", "symlink", "mkdir")):
        return "allowlisted root (mount namespace)"
    return "sandbox setup"


def setup_error(stderr: bytes, python: str) -> dict:
    """The failing step from bwrap's (or the launcher's) stderr line, else the interpreter's."""
    lines = [ln for ln in stderr.decode(errors="replace").splitlines() if ln.strip()]
    line = next((ln for ln in lines if ln.startswith(("bwrap: ", "launcher: "))), None)
    if line is None:
        first = lines[0] if lines else "the sandbox ended before the program started"
        return {"step": f"start interpreter {python}", "errno": None, "errno_name": None,
                "error": first[:300], "layer": "interpreter"}
    what, _, why = line.partition(": ")[2].rpartition(": ")
    what, why = (what, why) if what else (why, "")
    errno = _STRERROR.get(why.strip())
    named = re.search(r"\((E[A-Z0-9]+)\)", why)
    if errno is None and named:
        errno = getattr(errno_mod, named.group(1), None)
    prefix = line.split(": ", 1)[0]
    step_name = "exec " + what[len("execvp "):] if what.startswith("execvp ") else f"{prefix}: {what}"
    return {"step": step_name, "errno": errno, "errno_name": errno_mod.errorcode.get(errno),
            "error": (why or what)[:300], "layer": _layer(line)}


def failed(error: dict, t0: float, python: str) -> RunResult:
    return RunResult("sandbox_error", None, "", f"sandbox setup failed: {error['step']}: {error['error']}",
                     time.monotonic() - t0, 0.0, {"backend": "bubblewrap", "python": python}, error)


def write_some(fd: int, pending: bytearray) -> bool:
    """Write what the pipe takes; False once the reader is gone."""
    try:
        del pending[:os.write(fd, pending[:65536])]
    except BlockingIOError:
        pass
    except BrokenPipeError:
        pending.clear()
        return False
    return True


def supervise(pid, sweep, limits, data, fds: dict, t0, python, seccomp, dialog=None) -> RunResult:
    """fds: w_in, r_out, r_err, r_st (the status/result channel), w_spec (the harness's fd 6)."""
    w_in, r_out, r_err, r_st, w_spec = (fds[k] for k in ("w_in", "r_out", "r_err", "r_st", "w_spec"))
    out, err, result = bytearray(), bytearray(), bytearray()
    open_fds = {r_out, r_err, r_st}
    pending = bytearray(data)
    os.set_blocking(w_in, False)
    os.set_blocking(w_spec, False)
    if not pending:
        os.close(w_in)
        w_in = None
    started, status, finished, deadline = False, None, False, t0 + limits.wall_s
    while open_fds:
        now = time.monotonic()
        due = deadline if dialog is None else min(deadline, dialog.deadline)
        if now >= due:
            status = "timeout"
            break
        wfds = [w_in] if w_in is not None else []
        if dialog is not None and dialog.outgoing and w_spec is not None:
            wfds.append(w_spec)
        r, w, _ = select.select(list(open_fds), wfds, [], due - now)
        if w_in in w and (not write_some(w_in, pending) or not pending):
            os.close(w_in)
            w_in = None
        if w_spec in w and not write_some(w_spec, dialog.outgoing):
            os.close(w_spec)
            w_spec = None
        for fd in r:
            chunk = os.read(fd, 65536)
            if not chunk:
                open_fds.discard(fd)
            elif fd == r_out:
                out += chunk
            elif fd == r_err:
                err += chunk
                if len(err) > 2 * limits.stderr_bytes:  # drained, never fatal: its tail is kept
                    del err[:-limits.stderr_bytes]
            else:
                chunk = chunk[0 if started else 1:]
                started = True
                result += chunk
                if dialog is not None and chunk:
                    dialog.received(chunk)
        if len(out) > limits.output_bytes or (dialog is None and len(result) > limits.output_bytes):
            status = "output_limit"
            break
        if dialog is not None and dialog.finished:
            finished = True  # every answer it needs has come: the run is ended, not waited for
            break
    for fd in (w_in, w_spec):
        if fd is not None:
            os.close(fd)
    done, wstatus, ru = os.wait4(pid, os.WNOHANG)
    if not done:
        kill(pid)  # bwrap; its child dies with it (--die-with-parent), and the pid namespace with that
        done, wstatus, ru = os.wait4(pid, 0)
    if sweep is not None and status is not None:
        sweep_uid(sweep)
    for fd in (r_out, r_err, r_st):
        os.close(fd)
    cpu = ru.ru_utime + ru.ru_stime
    isolation = {"backend": "bubblewrap", "allowlisted_root": True, "user": True, "mount": True, "net": True,
                 "pid": True, "ipc": True, "uts": True, "seccomp": seccomp, "weak": False,
                 "uid": sweep, "groups": [] if sweep is not None else "the caller's, unmapped",
                 "python": python}
    code = os.waitstatus_to_exitcode(wstatus)
    # bwrap exits with the program's status; a program killed by signal N gives 128 + N
    if code > 128:
        code = -(code - 128)
    tail = err[-limits.stderr_bytes:][-2000:].decode(errors="replace")
    if not started and status != "timeout":
        error = setup_error(bytes(err), python)
        tail = f"sandbox setup failed: {error['step']}: {error['error']}\n{tail}"[:2000]
        res = RunResult("sandbox_error", None, "", tail, time.monotonic() - t0, cpu, isolation, error)
    else:
        if finished:
            status = "ok"
        elif status is None:
            status = _status(code, cpu, tail, limits)
        res = RunResult(status, code, out[: limits.output_bytes].decode(errors="replace"), tail,
                        time.monotonic() - t0, cpu, isolation, result=bytes(result))
    if dialog is not None:
        dialog.ended(res.status)
    return res


def _status(code: int, cpu: float, tail: str, limits) -> str:
    if code == 0:
        return "ok"
    if code == -signal.SIGKILL and cpu >= 0.5 * math.ceil(limits.cpu_s):
        return "cpu_limit"  # tick-sampled RLIMIT_CPU vs precise rusage (see docs/sandbox.md)
    if "MemoryError" in tail:
        return "memory"
    return "killed" if code < 0 else "exit_nonzero"
