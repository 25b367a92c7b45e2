"""The weak grading mode: the previous (namespace, denylist) sandbox, used only under the switch
`sandbox_allow_weak_isolation` when bubblewrap cannot build the allowlisted root, and beside it in
benchmarks/bench_rewards.py.

`run_program` must be called from a single-threaded process (it forks): the reward worker processes
of `_pool` are such processes; `tseeds_jax.rewards.code` sends work there. Process tree per run:

    worker (root) -> setup child (root; new mount/net/pid/ipc namespaces, mounts) -> program
                                                     (pid 1 of its pid namespace, unprivileged uid)

The worker talks to the program through pipes (stdin fed from the test input, stdout/stderr read
with caps), enforces the wall-clock limit, and on exit or timeout kills the program's pid namespace
and every process of the sandbox uid. The uid is unique per worker (UID_BASE + worker pid), so
RLIMIT_NPROC and the kill sweep never touch another sandbox's processes.

The mounts are planned here, on the host's view of the paths (`_mounts.plan`: the interpreter may
live under /tmp or a hidden directory), and made in the setup child (`_children`, `_mounts.apply`).
Every setup step that fails is reported as `RunResult.error` (step and OS error), never silently.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time

import tseeds_jax.rewards._mounts as _mounts
from tseeds_jax.rewards._children import SAFE_PATH, setup_child
from tseeds_jax.rewards._common import (
    PROJECT_ROOT,
    UID_BASE,
    Dialog,
    RunResult,
    SandboxLimits,
    harness_args,
    interpreter_failure,
    interpreter_paths,
    kill,
    reachable_by_others,
    sweep_uid,
    warn_once,
)
from tseeds_jax.rewards._mounts import SetupError, step
from tseeds_jax.rewards._pipes import RunPipes, exit_status


def _hidden_paths(extra: tuple[str, ...]) -> list[str]:
    paths = ["/root", "/home", "/dev/shm", "/var/tmp", "/run/lock"]
    if PROJECT_ROOT:
        paths.append(PROJECT_ROOT)
    paths += list(extra)
    out = []
    for p in paths:
        rp = os.path.realpath(p)
        if rp != "/" and os.path.isdir(rp) and rp not in out:
            out.append(rp)
    return out


def _fallback_python() -> str:
    """The interpreter when there is no mount namespace and the program runs as a foreign uid."""
    if reachable_by_others(sys.executable):
        return sys.executable
    # e.g. a venv or pyenv under /root: unreachable for the sandbox uid; a system interpreter is
    # the only way to run the program at all.
    for d in SAFE_PATH.split(":"):
        cand = os.path.join(d, "python3")
        if os.path.exists(cand) and reachable_by_others(cand):
            return cand
    return sys.executable


def _setup_failed(err: SetupError, t0: float) -> RunResult:
    return RunResult("sandbox_error", None, "", f"sandbox setup failed: {err}", time.monotonic() - t0,
                     0.0, {}, err.as_dict())


def run_program(
    source: str,
    stdin: str = "",
    limits: SandboxLimits | None = None,
    *,
    extra_hidden: tuple[str, ...] = (),
    seccomp: bool = True,
    harness: tuple[str, Dialog] | None = None,
) -> RunResult:
    """Run Python `source` with `stdin` in the sandbox; never raises for program misbehaviour.
    harness: (mode, dialog) as for the bubblewrap backend (`_bwrap.run`).

    Must be called from a single-threaded process (see module docstring).
    """
    if not isinstance(source, str) or not isinstance(stdin, str):
        raise TypeError(f"source and stdin must be str, got {type(source).__name__}/{type(stdin).__name__}")
    limits = limits or SandboxLimits()
    t0 = time.monotonic()
    root = os.geteuid() == 0
    uid = UID_BASE + os.getpid() if root else None
    try:
        # Planned here, on the host's view: inside the new namespace these paths may be covered.
        plan = step("plan mounts", _mounts.plan, _hidden_paths(tuple(extra_hidden)), interpreter_paths())
        fallback_python = step("find an interpreter", _fallback_python) if root else sys.executable
        fallback_dir = step("make work directory", tempfile.mkdtemp, prefix="tseeds_sbx_")
    except SetupError as e:
        return _setup_failed(e, t0)
    os.chmod(fallback_dir, 0o711)
    workdir = os.path.join(fallback_dir, "work")
    os.mkdir(workdir, 0o700)
    cfg = {
        "source": source,
        "limits": limits,
        "sandbox_uid": uid,
        "seccomp": seccomp,
        "plan": plan,
        "refused": list(plan.refused),
        "python": sys.executable,
        "fallback_python": fallback_python,
        "fallback_workdir": workdir,
        # read here: inside the setup child's mount namespace the checkout may be hidden
        "harness": harness_args(harness[0], 0) if harness else None,
    }
    r_res, w_res = os.pipe()
    r_spec, w_spec = os.pipe()  # the harness's fd 6: what its dialog sends
    r_in, w_in = os.pipe()
    r_out, w_out = os.pipe()
    r_err, w_err = os.pipe()
    r_st, w_st = os.pipe2(os.O_CLOEXEC)
    setup_pid = os.fork()
    if setup_pid == 0:
        for fd in (w_in, r_out, r_err, r_st, r_res, w_spec):
            os.close(fd)
        setup_child(cfg, {"stdin": r_in, "stdout": w_out, "stderr": w_err, "status": w_st,
                          "result": w_res, "spec": r_spec})
    for fd in (r_in, w_out, w_err, w_st, w_res, r_spec):
        os.close(fd)
    dialog = harness[1] if harness else None
    try:
        res = _supervise(setup_pid, uid, limits, stdin.encode(), (w_in, r_out, r_err, r_st, r_res, w_spec),
                         t0, dialog)
    finally:
        shutil.rmtree(fallback_dir, ignore_errors=True)
    if dialog is not None:
        dialog.ended(res.status)
    return res


def _supervise(setup_pid, uid, limits, data, fds, t0, dialog) -> RunResult:
    w_in, r_out, r_err, r_st, r_res, w_spec = fds
    pipes = RunPipes(data, w_in=w_in, r_out=r_out, r_err=r_err, w_spec=w_spec, channels=(r_st, r_res),
                     stderr_bytes=limits.stderr_bytes, dialog=dialog)
    st, res = bytearray(), bytearray()
    status, prog_pid, exit_line, deadline = None, None, None, t0 + limits.wall_s
    st_pos, finished = 0, False
    while pipes.open:
        now = time.monotonic()
        due = deadline if dialog is None or exit_line is not None else min(deadline, dialog.deadline)
        if exit_line is not None and now > deadline + 1.0:
            break  # program gone; something (a stray child) still holds the pipes
        if exit_line is None and now >= due:
            status = "timeout"
            break
        for fd, chunk in pipes.poll(max(0.0, due - now) + 0.01):
            if fd == r_res:
                if dialog is not None:
                    dialog.received(chunk[1:] if not res and chunk.startswith(b"s") else chunk)
                res += chunk
                continue
            st += chunk
            lines = bytes(st[st_pos:]).decode(errors="replace").split("\n")
            st_pos = len(st) - len(lines[-1].encode())
            for line in lines[:-1]:
                if line.startswith("pid "):
                    prog_pid = int(line.split()[1])
                elif line.startswith("exit "):
                    exit_line = line
                    deadline = min(deadline, time.monotonic() + 1.0)
                    if uid is not None:
                        sweep_uid(uid)  # background children die with the program
                elif line.startswith("err "):
                    deadline = min(deadline, time.monotonic() + 1.0)
        if len(pipes.out) > limits.output_bytes or (dialog is None and len(res) > limits.output_bytes):
            status = "output_limit"
            break
        if dialog is not None and dialog.finished:
            finished = True  # every answer it needs has come: the run is ended, not waited for
            break
    pipes.close_writers()
    if exit_line is None and prog_pid is not None:
        kill(prog_pid)  # pid 1 of its namespace: the kernel kills the rest of the namespace
    if uid is not None:
        sweep_uid(uid)
    # Let the setup child reap the program and strays (a zombie handed to the system init may
    # linger and count against RLIMIT_NPROC), then make sure it is gone.
    for _ in range(400):
        done, setup_status = os.waitpid(setup_pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.005)
    else:
        kill(setup_pid)
        _, setup_status = os.waitpid(setup_pid, 0)
    if uid is not None:
        sweep_uid(uid)
    pipes.close_readers()
    wall = time.monotonic() - t0
    lines = st.decode(errors="replace").splitlines()
    iso = next((json.loads(ln[4:]) for ln in lines if ln.startswith("iso ")), {})
    info = next((json.loads(ln.split(" ", 2)[2]) for ln in lines if ln.startswith("pid ")), {})
    isolation = {k: bool(iso.get(k)) for k in ("net", "mount", "pid", "seccomp")}
    isolation.update(uid=uid, python=info.get("python"), writable_mounts=info.get("writable_mounts", []))
    for what in ("net", "mount", "pid"):
        if prog_pid is not None and not isolation[what]:
            warn_once(f"sandbox: no new {what} namespace available; see docs/sandbox.md")
    exit_code, cpu = None, 0.0
    if exit_line is not None:
        wstatus, cpu = int(exit_line.split()[1]), float(exit_line.split()[2])
        exit_code = os.waitstatus_to_exitcode(wstatus)
    stderr_tail = pipes.stderr_tail()
    error = next((json.loads(ln[4:]) for ln in lines if ln.startswith("err ")), None)
    if error is None and status is None and exit_line is None and not finished:
        # The setup child died without a word (killed, or it crashed before reporting).
        error = {"step": "sandbox setup", "errno": None, "errno_name": None,
                 "error": f"setup process ended with status {os.waitstatus_to_exitcode(setup_status)}"}
    if error is None and status is None and not finished:
        error = interpreter_failure(exit_code, stderr_tail, isolation["python"])
    if error is not None:
        status = "sandbox_error"
        stderr_tail = f"sandbox setup failed: {error['step']}: {error['error']}\n{stderr_tail}"[:2000]
    elif finished:
        status = "ok"
    elif status is None:
        status = exit_status(exit_code, cpu, stderr_tail, limits)
    return RunResult(
        status,
        exit_code,
        pipes.stdout(limits.output_bytes),
        stderr_tail,
        wall,
        cpu,
        isolation,
        error,
        result=bytes(res[1:] if res.startswith(b"s") else res),  # b"s": the harness started
    )


