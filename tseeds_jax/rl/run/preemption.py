"""Stopping a run cleanly: SIGTERM / SIGINT / a cloud preemption notice -> checkpoint -> exit.

A signal only sets a flag. At every step boundary all hosts exchange their flags (one allgather
of four int32 per host; on one process the same code without the collective), so every host
sees the same answer at the same step: the trainer checkpoints that step and stops. The same
exchange carries host 0's decision that a time-based or continuous checkpoint is due
(`every_minutes`, `continuous_s`), so hosts whose clocks differ still save the same steps, and
whether a final save still fits in the preemption notice's window (`window_s`, `fits_window`):
when it does not, the trainer only lets the write in flight commit and stops without starting
another (docs/tpu.md, "What each event loses").

Why not `jax.experimental.multihost_utils.reached_preemption_sync_point`: its notice comes from
a C++ SIGTERM handler that JAX installs in `jax.distributed.initialize`; the Python handler
below (needed for SIGINT and for single-process runs, where there is no preemption service)
replaces it, and the per-step flag exchange gives the same guarantee (every host stops at the
same step) on one host and on many with one code path. See docs/tpu.md, "Preemption".

Exit codes of `tseeds train` (read by tpu_scripts/worker.sh and babysit.sh):
  EXIT_RESUME (75, EX_TEMPFAIL from sysexits.h): stopped by SIGTERM or a preemption notice after
      writing a checkpoint; relaunching resumes;
  EXIT_INTERRUPTED (130 = 128 + SIGINT): stopped by Ctrl-C after writing a checkpoint; a person
      asked for it, so the babysitter does not relaunch.

Optional watcher of the GCE metadata server (`MetadataWatcher`): polls `instance/preempted`
(TRUE once a Spot/preemptible VM is being preempted) and `instance/maintenance-event`
(TERMINATE_ON_HOST_MAINTENANCE ahead of a host maintenance that stops the VM) and raises the same
flag as SIGTERM. TSEEDS_PREEMPTION_WATCH=1 turns it on, 0 off; by default it runs when JAX's
backend is TPU. TSEEDS_METADATA_URL replaces the server's base URL (tests use a local stand-in).
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
import urllib.request

import numpy as np

from tseeds_jax.rl.run import hosts as hosts_lib

log = logging.getLogger(__name__)

EXIT_RESUME = 75
EXIT_INTERRUPTED = 130
# Flag codes, ordered: when hosts disagree the larger wins (a preemption notice on one host
# makes the whole run exit "resume" even if another host also saw a Ctrl-C).
NONE, INTERRUPT, PREEMPT = 0, 1, 2
METADATA_URL = "http://metadata.google.internal/computeMetadata/v1/instance"


class Preempted(Exception):
    """The run stopped at a step boundary after checkpointing `step` (a signal or a notice)."""

    def __init__(self, step: int, code: int, reason: str, checkpoint: str | None):
        self.step, self.code, self.reason, self.checkpoint = step, code, reason, checkpoint
        super().__init__(f"stopped at step {step} ({reason}); checkpoint: {checkpoint}")

    @property
    def exit_code(self) -> int:
        return EXIT_RESUME if self.code == PREEMPT else EXIT_INTERRUPTED


class Interrupted(Preempted, KeyboardInterrupt):
    """`Preempted` by Ctrl-C: also a KeyboardInterrupt, so callers that stop on Ctrl-C (the
    demo, notebooks) keep doing so, now after a checkpoint."""


class PreemptionGuard:
    """Signal handlers + the per-step agreement. Use as a context manager around the loop.

        with PreemptionGuard(hosts, every_minutes=15) as guard:
            while ...:
                train_step()
                stop, timed = guard.agree()
                if stop or timed: save(); guard.saved()
                if stop: raise guard.preempted(step, where)

    every_minutes: a time-based checkpoint is due when host 0 last saved (or started) this many
    minutes ago; 0 disables. continuous_s: continuous checkpointing (as Orbax's
    ContinuousCheckpointingPolicy, decided by host 0 in the same exchange): a checkpoint is also
    due when no save is being written on host 0 (`agree(idle=...)`) and host 0 last saved at
    least this many seconds ago; 0 disables. window_s: the time between a preemption notice and
    the stop (GCE Spot: about 30 s); `agree` reports whether a final save fits in what is left of
    it (`fits_window`). clock: seconds, monotonic (tests pass a fake one).
    """

    def __init__(self, hosts: hosts_lib.Hosts | None = None, *, every_minutes: float = 0.0,
                 continuous_s: float = 0.0, window_s: float = 30.0,
                 clock=time.monotonic, watch: bool | None = None):
        if every_minutes < 0:
            raise ValueError(f"every_minutes={every_minutes!r}: must be >= 0 (0 disables)")
        if continuous_s < 0:
            raise ValueError(f"continuous_s={continuous_s!r}: must be >= 0 (0 disables)")
        if not window_s > 0:
            raise ValueError(f"window_s={window_s!r}: must be > 0 seconds")
        self.hosts = hosts or hosts_lib.Hosts.current()
        self.every_s = 60.0 * float(every_minutes)
        self.continuous_s = float(continuous_s)
        self.window_s = float(window_s)
        self._notice_at: float | None = None  # clock() of this host's first PREEMPT flag
        self.fits_window = True
        self.clock = clock
        self._code = NONE
        self._reason = ""
        self._lock = threading.Lock()
        self._last_save = clock()
        self._previous: dict[int, object] = {}
        self._watch = watch
        self._watcher: MetadataWatcher | None = None
        self.agreed_reason = ""

    # ---- flags ----
    def request(self, code: int, reason: str) -> None:
        """Raises this host's flag (thread-safe; signal handlers and the watcher call it)."""
        with self._lock:
            if code == PREEMPT and self._notice_at is None:
                self._notice_at = self.clock()
            if code > self._code:
                self._code, self._reason = code, reason

    @property
    def local_code(self) -> int:
        return self._code

    def _on_signal(self, signum, frame):
        if signum == signal.SIGINT:
            if self._code >= INTERRUPT:
                # A second Ctrl-C: the person does not want to wait for the step to end.
                raise KeyboardInterrupt
            self.request(INTERRUPT, "SIGINT")
        else:
            self.request(PREEMPT, signal.Signals(signum).name)
        # stderr, not logging: the note must reach the log even when logging is unconfigured.
        os.write(2, f"\n[tseeds] {signal.Signals(signum).name} received: stopping after this "
                    f"step, with a checkpoint\n".encode())

    # ---- agreement ----
    def agree(self, *, idle: bool = True, save_s: float = 0.0) -> tuple[int, bool]:
        """(stop code, checkpoint due), the same on every host. Collective: every host calls it
        once per step boundary.

        idle: no checkpoint is being written on this host (continuous checkpointing: host 0's
        value counts). save_s: how long a save takes until committed on this host (host 0's
        value counts). Sets `fits_window`: on a preemption notice, whether `save_s` fits in what
        is left of the notice window on every host (the host told first decides)."""
        now = self.clock()
        since = now - self._last_save
        due = int(self.hosts.index == 0 and (
            (self.every_s > 0 and since >= self.every_s)
            or (self.continuous_s > 0 and idle and since >= self.continuous_s)))
        with self._lock:
            # no notice (Ctrl-C, no stop at all): no deadline
            left = 1e6 if self._notice_at is None else self.window_s - (now - self._notice_at)
            # milliseconds, clipped: int32 rows
            mine = np.array([[self._code, due, int(min(max(left, -1e6), 1e6) * 1000),
                              int(min(max(save_s, 0.0), 1e6) * 1000)]], np.int32)
        every = hosts_lib.gather_rows(mine, self.hosts).reshape(-1, 4)
        code = int(every[:, 0].max())
        self.fits_window = bool(every[:, 2].min() >= every[0, 3])
        if code:
            with self._lock:
                self.agreed_reason = self._reason if self._code == code else \
                    f"host {int(np.argmax(every[:, 0]))} was asked to stop"
        return code, bool(every[0, 1])

    def saved(self) -> None:
        """A checkpoint was written: the time-based interval starts again."""
        self._last_save = self.clock()

    def preempted(self, step: int, code: int, checkpoint: str | None) -> Preempted:
        cls = Preempted if code == PREEMPT else Interrupted
        return cls(step, code, self.agreed_reason or "stop requested", checkpoint)

    # ---- lifecycle ----
    def __enter__(self) -> PreemptionGuard:
        watch = _watch_enabled(self._watch)  # a bad setting fails before anything changes
        # signal.signal works in the main thread only; elsewhere (a notebook's worker thread)
        # the loop still agrees on flags raised by `request` or the watcher.
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                self._previous[sig] = signal.signal(sig, self._on_signal)
        if watch:
            self._watcher = MetadataWatcher(self)
            self._watcher.start()
        return self

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()
        if self._watcher is not None:
            self._watcher.stop()
            self._watcher = None


def _watch_enabled(watch: bool | None) -> bool:
    if watch is not None:
        return watch
    env = os.environ.get("TSEEDS_PREEMPTION_WATCH", "auto").strip().lower()
    if env in ("1", "true", "yes"):
        return True
    if env in ("0", "false", "no"):
        return False
    if env != "auto":
        raise ValueError(f"TSEEDS_PREEMPTION_WATCH={env!r}: use 1, 0 or auto")
    import jax

    return jax.default_backend() == "tpu"


class MetadataWatcher:
    """A daemon thread that polls the GCE metadata server every `interval_s` seconds and
    raises the guard's PREEMPT flag on a preemption or a terminating maintenance event.

    Unreachable server or odd answers: logged once, then ignored (a VM outside GCE, a firewall):
    the signal handlers still work."""

    def __init__(self, guard: PreemptionGuard, *, base_url: str | None = None,
                 interval_s: float | None = None, timeout_s: float = 2.0):
        self.guard = guard
        self.base_url = (base_url or os.environ.get("TSEEDS_METADATA_URL")
                         or METADATA_URL).rstrip("/")
        self.interval_s = float(interval_s if interval_s is not None
                                else os.environ.get("TSEEDS_METADATA_POLL_S", "5"))
        self.timeout_s = timeout_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="tseeds-preemption-watch",
                                        daemon=True)
        self._warned = False

    def _get(self, name: str) -> str:
        req = urllib.request.Request(f"{self.base_url}/{name}",
                                     headers={"Metadata-Flavor": "Google"})
        with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
            return resp.read().decode().strip()

    def check_once(self) -> str | None:
        """The reason to stop, if the server announces one (also raises the guard's flag)."""
        reason = None
        try:
            if self._get("preempted").upper() == "TRUE":
                reason = "GCE metadata: instance/preempted=TRUE"
            else:
                event = self._get("maintenance-event")
                # MIGRATE_ON_HOST_MAINTENANCE keeps the VM running; only TERMINATE stops it.
                if event.upper().startswith("TERMINATE"):
                    reason = f"GCE metadata: instance/maintenance-event={event}"
        except OSError as e:
            if not self._warned:
                log.warning("preemption watcher: %s unreachable (%s); relying on SIGTERM",
                            self.base_url, e)
                self._warned = True
            return None
        if reason is not None:
            self.guard.request(PREEMPT, reason)
            os.write(2, f"\n[tseeds] {reason}: stopping after this step\n".encode())
        return reason

    def _loop(self) -> None:
        while not self._stop.is_set():
            if self.check_once() is not None:
                return
            self._stop.wait(self.interval_s)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=self.timeout_s + 1)
