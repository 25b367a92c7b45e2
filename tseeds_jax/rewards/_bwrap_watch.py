"""Watching one bubblewrap run from the worker (`_bwrap.run` starts it): its pipes pumped by
`_pipes.RunPipes` (stdin fed, stdout capped, stderr's tail kept, the harness's dialog driven), the
wall clock enforced, the status channel read; and a run that never reached the program turned
into the setup step that failed.
"""

from __future__ import annotations

import errno as errno_mod
import os
import re
import time

from tseeds_jax.rewards._common import RunResult, kill, sweep_uid
from tseeds_jax.rewards._pipes import RunPipes, exit_status

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


def supervise(pid, sweep, limits, data, fds: dict, t0, python, seccomp, dialog=None) -> RunResult:
    """fds: w_in, r_out, r_err, r_st (the status/result channel), w_spec (the harness's fd 6)."""
    pipes = RunPipes(data, w_in=fds["w_in"], r_out=fds["r_out"], r_err=fds["r_err"], w_spec=fds["w_spec"],
                     channels=(fds["r_st"],), stderr_bytes=limits.stderr_bytes, dialog=dialog)
    result = bytearray()
    started, status, finished, deadline = False, None, False, t0 + limits.wall_s
    while pipes.open:
        now = time.monotonic()
        due = deadline if dialog is None else min(deadline, dialog.deadline)
        if now >= due:
            status = "timeout"
            break
        for _, chunk in pipes.poll(due - now):  # the status channel: b"s" once the program starts
            chunk = chunk[0 if started else 1:]
            started = True
            result += chunk
            if dialog is not None and chunk:
                dialog.received(chunk)
        if len(pipes.out) > limits.output_bytes or (dialog is None and len(result) > limits.output_bytes):
            status = "output_limit"
            break
        if dialog is not None and dialog.finished:
            finished = True  # every answer it needs has come: the run is ended, not waited for
            break
    pipes.close_writers()
    done, wstatus, ru = os.wait4(pid, os.WNOHANG)
    if not done:
        kill(pid)  # bwrap; its child dies with it (--die-with-parent), and the pid namespace with that
        done, wstatus, ru = os.wait4(pid, 0)
    if sweep is not None and status is not None:
        sweep_uid(sweep)
    pipes.close_readers()
    cpu = ru.ru_utime + ru.ru_stime
    isolation = {"backend": "bubblewrap", "allowlisted_root": True, "user": True, "mount": True, "net": True,
                 "pid": True, "ipc": True, "uts": True, "seccomp": seccomp, "weak": False,
                 "uid": sweep, "groups": [] if sweep is not None else "the caller's, unmapped",
                 "python": python}
    code = os.waitstatus_to_exitcode(wstatus)
    # bwrap exits with the program's status; a program killed by signal N gives 128 + N
    if code > 128:
        code = -(code - 128)
    tail = pipes.stderr_tail()
    if not started and status != "timeout":
        error = setup_error(bytes(pipes.err), python)
        tail = f"sandbox setup failed: {error['step']}: {error['error']}\n{tail}"[:2000]
        res = RunResult("sandbox_error", None, "", tail, time.monotonic() - t0, cpu, isolation, error)
    else:
        if finished:
            status = "ok"
        elif status is None:
            status = exit_status(code, cpu, tail, limits)
        res = RunResult(status, code, pipes.stdout(limits.output_bytes), tail,
                        time.monotonic() - t0, cpu, isolation, result=bytes(result))
    if dialog is not None:
        dialog.ended(res.status)
    return res

