"""`python -m tseeds_jax.rewards.uid_sweep UID`: kill every process of UID (a sandbox uid of a reward
worker that was killed). Exit 0 when the sweep ran, 1 when it failed (the reason on stderr), 2 for a
bad argument. Run as its own process by `_pool.sweep`: the sweep forks, which a threaded trainer
must not do.
"""

from __future__ import annotations

import sys

from tseeds_jax.rewards._common import UID_BASE, sweep_uid


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not argv[0].isdigit() or not UID_BASE <= int(argv[0]) < UID_BASE + (1 << 22):
        print(f"usage: python -m tseeds_jax.rewards.uid_sweep UID (a sandbox uid in [{UID_BASE}, "
              f"{UID_BASE + (1 << 22)})), got {argv!r}", file=sys.stderr)
        return 2
    try:
        sweep_uid(int(argv[0]))
    except OSError as e:
        print(f"sweep of uid {argv[0]} failed: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
