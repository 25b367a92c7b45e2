"""Test-only checkpoint-write observers, for `tseeds_jax.checkpoint.WRITE_OBSERVERS`: installed
by the tests (in-process: `monkeypatch.setattr(checkpoint, "WRITE_OBSERVERS", [...])`) or by the
subprocess entry scripts they launch; never by the library.

`delay_observer(s)`: at both moments of a write, prints "TSEEDS_TEST_SAVE <where>" on stderr and
sleeps `s` seconds, so that a test can kill the process in the middle of that write.
`delay_observer(s, announce=False, only="orbax-uncommitted")`: every write held `s` seconds
before Orbax commits it (a slow filesystem).
"""

import sys
import time

from tseeds_jax import checkpoint


def delay_observer(seconds: float, *, announce: bool = True, only: str = ""):
    def observer(where: str) -> None:
        if not where.startswith(only):
            return
        if announce:
            print(f"TSEEDS_TEST_SAVE {where}", file=sys.stderr, flush=True)
        time.sleep(seconds)

    return observer


def announce_and_wait(seconds: float) -> None:
    """For a subprocess's whole life: announce and hold every write `seconds` (0: nothing)."""
    if seconds > 0:
        checkpoint.WRITE_OBSERVERS.append(delay_observer(seconds))


def slow_commit(seconds: float) -> None:
    """For a subprocess's whole life: hold every write `seconds` before its commit (0: nothing)."""
    if seconds > 0:
        checkpoint.WRITE_OBSERVERS.append(
            delay_observer(seconds, announce=False, only="orbax-uncommitted"))
