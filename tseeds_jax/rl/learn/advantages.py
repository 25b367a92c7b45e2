"""Host-side advantages: GRPO group-relative, DAPO overlong penalty (dynamic sampling's group filter:
rl/rollout/stats.py).

Shape letters: B samples (responses) of a generation batch, T response positions, G group size
(responses per prompt). Everything here is numpy on host, once per training step.

Group ids: either an int array `group_ids_B` (same id = same prompt, any order) or contiguous groups of
`group_size` G (samples [0, G) are prompt 0, ...). Pass exactly one.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def _scores(scores_B, name: str = "scores_B") -> np.ndarray:
    s = np.asarray(scores_B, dtype=np.float64)
    if s.ndim != 1:
        raise ValueError(f"{name} must have shape [B], got {s.shape}")
    if not np.all(np.isfinite(s)):
        raise ValueError(f"{name} must be finite, got {s[~np.isfinite(s)][:5]}")
    return s


def group_index(
    n: int, group_ids_B: Any = None, group_size: int | None = None
) -> tuple[np.ndarray, int]:
    """Dense group index in [0, n_groups) per sample (first-appearance order) and n_groups."""
    if (group_ids_B is None) == (group_size is None):
        raise ValueError("pass exactly one of group_ids_B and group_size")
    if group_size is not None:
        if not isinstance(group_size, (int, np.integer)) or group_size < 1:
            raise ValueError(f"group_size must be a positive int, got {group_size!r}")
        if n % group_size:
            raise ValueError(f"batch size {n} is not a multiple of group_size={group_size}")
        return np.arange(n) // group_size, n // group_size
    ids = np.asarray(group_ids_B)
    if ids.shape != (n,):
        raise ValueError(f"group_ids_B must have shape ({n},), got {ids.shape}")
    if not np.issubdtype(ids.dtype, np.integer):
        raise TypeError(f"group_ids_B must be integers, got dtype {ids.dtype}")
    _, first, inv = np.unique(ids, return_index=True, return_inverse=True)
    # Relabel so that group order is the order of first appearance (stable, readable).
    order = np.argsort(np.argsort(first, kind="stable"), kind="stable")
    return order[inv.reshape(-1)], len(first)


def grpo_advantages(
    scores_B,
    group_ids_B=None,
    *,
    group_size: int | None = None,
    norm_by_std: bool = True,
    eps: float = 1e-6,
) -> np.ndarray:
    """GRPO outcome advantages A_i = (s_i - μ_g) / (σ_g + eps), float64 [B].

    σ_g is the unbiased (N-1) std as torch.std in verl. A singleton group uses μ = 0, σ = 1 (verl),
    so A = s / (1 + eps). `norm_by_std=False` is Dr.GRPO: A = s - μ_g. An all-equal group gives 0.
    Broadcast to tokens with `token_advantages`.
    """
    s = _scores(scores_B)
    gidx, n_groups = group_index(len(s), group_ids_B, group_size)
    count = np.bincount(gidx, minlength=n_groups).astype(np.float64)
    mean = np.bincount(gidx, weights=s, minlength=n_groups) / count
    sq = np.bincount(gidx, weights=(s - mean[gidx]) ** 2, minlength=n_groups)
    std = np.sqrt(sq / np.maximum(count - 1.0, 1.0))
    single = count == 1
    mean = np.where(single, 0.0, mean)
    std = np.where(single, 1.0, std)
    if norm_by_std:
        return (s - mean[gidx]) / (std[gidx] + eps)
    return s - mean[gidx]


def token_advantages(adv_B, mask_BT) -> np.ndarray:
    """A[i, t] = A_i · m[i, t] ([B] -> [B, T]), as verl returns them."""
    adv = _scores(adv_B, "adv_B")
    m = np.asarray(mask_BT)
    if m.ndim != 2 or m.shape[0] != adv.shape[0]:
        raise ValueError(f"mask_BT must have shape ({adv.shape[0]}, T), got {m.shape}")
    return adv[:, None] * m.astype(np.float64)


def overlong_penalty(
    response_lengths_B, *, max_resp_len: int, buffer_len: int, penalty_factor: float = 1.0
) -> np.ndarray:
    """DAPO soft overlong punishment (verl DAPORewardManager), float64 [B], added to the reward.

    expected = max_resp_len - buffer_len;  penalty = min(-(len - expected) / buffer_len · factor, 0):
    0 up to `expected` tokens, then linear down to -factor at `max_resp_len`.
    """
    lengths = np.asarray(response_lengths_B)
    if lengths.ndim != 1:
        raise ValueError(f"response_lengths_B must have shape [B], got {lengths.shape}")
    if np.any(lengths < 0):
        raise ValueError("response_lengths_B must be >= 0")
    if not buffer_len > 0:
        raise ValueError(f"buffer_len must be > 0, got {buffer_len!r}")
    if not max_resp_len >= buffer_len:
        raise ValueError(f"max_resp_len={max_resp_len!r} must be >= buffer_len={buffer_len!r}")
    exceed = lengths.astype(np.float64) - (max_resp_len - buffer_len)
    return np.minimum(-exceed / buffer_len * penalty_factor, 0.0)
