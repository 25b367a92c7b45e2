"""Host-side advantages and sample selection: GRPO, DAPO dynamic sampling, DAPO overlong penalty.

Shape letters: B samples (responses) of a generation batch, T response positions, G group size
(responses per prompt). Everything here is numpy on host, once per training step.

Group ids: either an int array `group_ids_B` (same id = same prompt, any order) or contiguous groups of
`group_size` G (samples [0, G) are prompt 0, ...). Pass exactly one.
"""

from __future__ import annotations

import enum
from typing import Any

import jax
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


def dynamic_sampling_keep_mask(metric_B, group_ids_B=None, *, group_size: int | None = None):
    """DAPO `filter_groups`: keep the samples of groups whose metric is not all equal.

    A group is kept when its population std is > 0 or it has a single sample. We test max > min,
    which is the same condition without np.std's rounding (np.std of equal floats can be ~1e-17).
    Returns a bool [B] mask.
    """
    s = _scores(metric_B, "metric_B")
    gidx, n_groups = group_index(len(s), group_ids_B, group_size)
    gmax = np.full(n_groups, -np.inf)
    gmin = np.full(n_groups, np.inf)
    np.maximum.at(gmax, gidx, s)
    np.minimum.at(gmin, gidx, s)
    count = np.bincount(gidx, minlength=n_groups)
    keep_group = (gmax > gmin) | (count == 1)
    return keep_group[gidx]


class OnExhausted(str, enum.Enum):
    """What `DynamicSamplingAccumulator` does when the generation-batch cap is reached."""

    RAISE = "raise"  # verl: error out
    PROCEED = "proceed"  # train on the groups kept so far (fewer prompts than the target)


class DynamicSamplingAccumulator:
    """Collects kept groups across generation batches until `target_prompts` groups are kept.

        acc = DynamicSamplingAccumulator(target_prompts=32, max_gen_batches=10)
        while not acc.ready:
            batch, metric_B, gids_B = generate_and_score()
            acc.add(batch, metric_B, gids_B)        # may raise when the cap is hit (RAISE)
        batch, group_ids_B = acc.take()             # exactly target_prompts groups (or fewer on
                                                    # PROCEED), group ids relabelled 0..n-1

    `batch` is any pytree of arrays whose leading axis is B (numpy/jax arrays). Groups keep their
    arrival order; `take` truncates to the first `target_prompts` groups (verl truncates the
    concatenated batch to train_batch_size·n rows, the same for contiguous groups of size n) and
    resets the accumulator. Compute advantages after `take` (verl does so after filtering).
    `max_gen_batches <= 0` means no cap.
    """

    def __init__(self, target_prompts: int, max_gen_batches: int = 10,
                 on_exhausted: OnExhausted | str = OnExhausted.RAISE):
        if not isinstance(target_prompts, (int, np.integer)) or target_prompts < 1:
            raise ValueError(f"target_prompts must be a positive int, got {target_prompts!r}")
        self.target_prompts = int(target_prompts)
        self.max_gen_batches = int(max_gen_batches)
        try:
            self.on_exhausted = OnExhausted(on_exhausted)
        except ValueError:
            raise ValueError(f"on_exhausted={on_exhausted!r} is not one of: raise, proceed") from None
        self.reset()

    def reset(self) -> None:
        self._parts: list[Any] = []
        self._gids: list[np.ndarray] = []
        self.kept_prompts = 0
        self.num_gen_batches = 0
        self.exhausted = False

    @property
    def ready(self) -> bool:
        return self.kept_prompts >= self.target_prompts or self.exhausted

    def add(self, batch: Any, metric_B, group_ids_B=None, *, group_size: int | None = None) -> int:
        """Adds one generation batch; returns the number of groups kept from it."""
        if self.ready:
            raise RuntimeError("DynamicSamplingAccumulator is ready; call take() before add()")
        s = _scores(metric_B, "metric_B")
        leaves = jax.tree_util.tree_leaves(batch)
        for leaf in leaves:
            if np.shape(leaf)[:1] != (len(s),):
                raise ValueError(f"every batch leaf must have leading axis B={len(s)}, got "
                                 f"shape {np.shape(leaf)}")
        gidx, _ = group_index(len(s), group_ids_B, group_size)
        keep = dynamic_sampling_keep_mask(s, gidx)
        rows = np.flatnonzero(keep)
        kept_groups, dense = np.unique(gidx[rows], return_inverse=True)
        # Keep arrival order of groups inside the batch (np.unique sorts by dense index, which is
        # first-appearance order already).
        self._parts.append(jax.tree_util.tree_map(lambda x: np.asarray(x)[rows], batch))
        self._gids.append(dense.reshape(-1) + self.kept_prompts)
        self.kept_prompts += len(kept_groups)
        self.num_gen_batches += 1
        if self.kept_prompts < self.target_prompts and 0 < self.max_gen_batches <= self.num_gen_batches:
            if self.on_exhausted is OnExhausted.RAISE:
                raise RuntimeError(
                    f"dynamic sampling kept {self.kept_prompts} < target_prompts="
                    f"{self.target_prompts} groups after max_gen_batches={self.max_gen_batches} "
                    f"generation batches; raise max_gen_batches or use on_exhausted='proceed'")
            self.exhausted = True
        return len(kept_groups)

    def take(self) -> tuple[Any, np.ndarray]:
        """(batch, group_ids_B) of the kept groups, truncated to target_prompts; then resets."""
        if not self.ready:
            raise RuntimeError(f"not ready: {self.kept_prompts} of {self.target_prompts} groups kept")
        if not self._parts:
            raise RuntimeError("no generation batch was added")
        gids = np.concatenate(self._gids)
        rows = np.flatnonzero(gids < self.target_prompts)
        batch = jax.tree_util.tree_map(
            lambda *xs: np.concatenate(xs, axis=0)[rows], *self._parts)
        out_gids = gids[rows]
        self.reset()
        return batch, out_gids


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
