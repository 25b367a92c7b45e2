"""State of the success_target selector: per-prompt success estimates and the value model's shape.

p(x): the current policy's success rate from prompt x. At a refresh it is set from the behavior
group (or, for a prompt seen before, moved towards it by `ema`); the on-policy groups that follow
move it towards their success rate, and the continuation groups move it along the value model's
gradient (a continuation from a seed cut at fraction u carries 1 - u^gamma of its evidence about
p(x): value() = p + (r - p) u^gamma).

gamma: picked online from a fixed grid as the value with the smallest exponentially decayed
squared error between predicted and realised continuation success, so the calibration is a
deterministic function of what was observed (and checkpoints as a few arrays).

Everything is float64 numpy and is saved with the seed cache (`SeedCache.to_pytree`), so a
resumed run continues bit for bit.
"""

from __future__ import annotations

import hashlib

import numpy as np

from tseeds_jax.seeds.selection import successes, value

GAMMA_GRID = np.geomspace(1 / 16, 32, 37)  # 2^(-4) .. 2^5 in steps of 2^(1/4)
CALIB_BINS = np.array([0.0, 0.2, 0.4, 0.6, 0.8, 1.0])  # predicted-success bins of the report


def prompt_key(prompt_ids) -> int:
    """A stable 63-bit key of a prompt's token ids (the same across processes and runs)."""
    raw = np.asarray(list(prompt_ids), np.int64).tobytes()
    return int.from_bytes(hashlib.blake2b(raw, digest_size=8).digest(), "little") >> 1


class SuccessTracker:
    def __init__(self, gamma0: float = 1.0, ema: float = 0.5, decay: float = 0.95,
                 calibrate: bool = True):
        if not gamma0 > 0:
            raise ValueError(f"SuccessTracker.gamma0={gamma0!r}: must be > 0")
        if not 0 < ema <= 1:
            raise ValueError(f"SuccessTracker.ema={ema!r}: must be in (0, 1]")
        self.gamma0, self.ema, self.decay, self.calibrate = gamma0, ema, decay, calibrate
        self.p: dict[int, float] = {}
        self.sse_K = np.zeros(len(GAMMA_GRID))  # decayed squared error of each grid gamma
        self.weight = 0.0  # decayed number of continuations behind sse_K

    @property
    def gamma(self) -> float:
        if not self.calibrate or self.weight <= 0:
            return float(self.gamma0)
        return float(GAMMA_GRID[int(np.argmin(self.sse_K))])

    # ---- updates ----
    def _move(self, key: int, toward: float) -> float:
        old = self.p.get(key)
        self.p[key] = toward if old is None else (1 - self.ema) * old + self.ema * toward
        return self.p[key]

    def at_refresh(self, prompt_ids_B, rewards_N, group_size: int) -> np.ndarray:
        """Merges each behavior group's success rate into p(x); returns p [B] for selection."""
        ok = successes(rewards_N).reshape(len(prompt_ids_B), group_size)
        return np.array([self._move(prompt_key(x), float(row.mean()))
                         for x, row in zip(prompt_ids_B, ok)])

    def observe_onpolicy(self, prompt_ids_B, rewards_N, group_size: int) -> None:
        ok = successes(rewards_N).reshape(len(prompt_ids_B), group_size)
        for x, row in zip(prompt_ids_B, ok):
            self._move(prompt_key(x), float(row.mean()))

    def observe_continuations(self, prompt_ids_B, p_N, source_reward_N, u_N, gamma_N, rewards_N,
                              group_size: int) -> None:
        """Realised successes y of seeded continuations: calibrates gamma, then moves p(x)."""
        y = successes(rewards_N).astype(np.float64)
        p, r, u = (np.asarray(a, np.float64) for a in (p_N, source_reward_N, u_N))
        pred_KN = value(p[None], r[None], u[None], GAMMA_GRID[:, None])
        self.sse_K = self.decay * self.sse_K + ((y[None] - pred_KN) ** 2).sum(axis=1)
        self.weight = self.decay * self.weight + len(y)
        # one gradient step per group on the squared error w.r.t. p(x), at the selection's gamma
        pred = value(p, r, u, np.asarray(gamma_N, np.float64))
        step = (y - pred) * (1 - np.power(u, gamma_N))
        for b, x in enumerate(prompt_ids_B):
            rows = slice(b * group_size, (b + 1) * group_size)
            key = prompt_key(x)
            base = self.p.get(key, float(p[rows].mean()))
            self.p[key] = float(np.clip(base + self.ema * step[rows].mean(), 0.0, 1.0))

    # ---- checkpointing ----
    def to_arrays(self) -> dict[str, np.ndarray]:
        keys = sorted(self.p)
        return {"keys": np.array(keys, np.int64).reshape(-1),
                "p": np.array([self.p[k] for k in keys], np.float64).reshape(-1),
                "sse": self.sse_K.copy(), "weight": np.asarray(self.weight, np.float64),
                "hparams": np.array([self.gamma0, self.ema, self.decay, float(self.calibrate)])}

    @classmethod
    def from_arrays(cls, a: dict[str, np.ndarray]) -> SuccessTracker:
        g0, ema, decay, cal = np.asarray(a["hparams"], np.float64).tolist()
        t = cls(gamma0=g0, ema=ema, decay=decay, calibrate=bool(cal))
        t.p = {int(k): float(v) for k, v in zip(np.asarray(a["keys"]).tolist(),
                                                  np.asarray(a["p"]).tolist())}
        t.sse_K = np.asarray(a["sse"], np.float64).copy()
        t.weight = float(a["weight"])
        return t


def calibration_bins(predicted_N, realised_N) -> dict[str, list[float]]:
    """Per predicted-success bin: count, summed prediction, summed realised success (sums, so
    that steps, cycles and runs add up)."""
    pred = np.asarray(predicted_N, np.float64)
    y = successes(realised_N).astype(np.float64)
    keep = np.isfinite(pred)
    idx = np.clip(np.digitize(pred[keep], CALIB_BINS[1:-1]), 0, len(CALIB_BINS) - 2)
    nb = len(CALIB_BINS) - 1
    return {"n": np.bincount(idx, minlength=nb).astype(float).tolist(),
            "pred": np.bincount(idx, pred[keep], minlength=nb).tolist(),
            "real": np.bincount(idx, y[keep], minlength=nb).tolist()}
