"""Unbiased pass@k (Chen et al. 2021) and avg@k over problems.

With n samples of a problem of which c are correct, pass@k = 1 - C(n-c, k) / C(n, k), computed
in the numerically stable product form 1 - prod_{i=n-c+1}^{n} (1 - k / i); it is 1 when n - c < k
(every k-subset holds a correct sample).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def _check_int(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"pass_at_k: {name}={value!r} must be an integer")
    return int(value)


def pass_at_k(n: int, c: int, k: int) -> float:
    """Probability that at least one of k samples drawn without replacement from the n is correct.

    Raises ValueError when n < 1, c outside [0, n], or k outside [1, n].
    """
    n, c, k = _check_int("n", n), _check_int("c", c), _check_int("k", k)
    if n < 1:
        raise ValueError(f"pass_at_k: n={n} must be >= 1")
    if not 0 <= c <= n:
        raise ValueError(f"pass_at_k: c={c} must be in [0, n={n}]")
    if not 1 <= k <= n:
        raise ValueError(f"pass_at_k: k={k} must be in [1, n={n}] (pass@k needs n >= k samples)")
    if n - c < k:
        return 1.0
    prod = 1.0
    for i in range(n - c + 1, n + 1):
        prod *= 1.0 - k / i
    return 1.0 - prod


def default_ks(n: int) -> list[int]:
    """1, 2, 4, ... up to n (and n itself)."""
    if n < 1:
        raise ValueError(f"default_ks: n={n} must be >= 1")
    ks, k = [], 1
    while k <= n:
        ks.append(k)
        k *= 2
    if ks[-1] != n:
        ks.append(n)
    return ks


def mean_pass_at_k(correct: Sequence[int], n: int, k: int) -> float:
    """pass@k averaged over problems, `correct[i]` the number of correct samples of problem i."""
    if len(correct) == 0:
        raise ValueError("mean_pass_at_k: no problems")
    return float(np.mean([pass_at_k(n, int(c), k) for c in correct]))


def avg_at_k(correct: Sequence[int], n: int) -> float:
    """avg@n: the mean fraction of correct samples per problem (expected pass@1)."""
    if len(correct) == 0:
        raise ValueError("avg_at_k: no problems")
    return float(np.mean(np.asarray(correct, np.float64) / n))
