"""Clipped PPO loss with DAPO clip-higher and dual clip, as verl's `compute_policy_loss_vanilla`.

Shape letters: B rows, T response positions.

Per token (algorithms.md §1.1), ε_l/ε_h = clip_low/clip_high, c = clip_c > 1:
  δ = clamp(lp - olp, ±20);  r = exp(δ)
  L1 = -A·r;  L2 = -A·clip(r, 1-ε_l, 1+ε_h);  Lc = max(L1, L2)
  L  = Lc                 if A >= 0
     = min(-A·c, Lc)      if A < 0          (dual clip)
Metrics (masked token means): pg_clipfrac = [L2 > L1]; pg_clipfrac_lower = [Lc > -A·c and A < 0];
ppo_kl = -δ (k1 estimate of KL(old‖θ), with the clamped δ as verl).

Registered: "dapo" (0.2 / 0.28, c = 3) and "grpo" (symmetric 0.2, c = 3), both `PPOHParams`.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from jaxtyping import Array

from tseeds_jax.rl.losses.base import (
    LOG_RATIO_CLAMP,
    AggMode,
    Denominators,
    LossInputs,
    LossOutput,
    agg_denominators,
    aggregate,
    finalize_metrics,
    float_dtype,
    masked_metric,
    validate_inputs,
)
from tseeds_jax.rl.losses.needs import LossNeeds
from tseeds_jax.rl.losses.registry import LossName, register
from tseeds_jax.rl.losses.regularizers import Regularizers, finish


def check_clip(owner: str, clip_low: float, clip_high: float, clip_c: float | None) -> None:
    if not 0.0 <= clip_low < 1.0:
        raise ValueError(f"{owner}.clip_low must be in [0, 1), got {clip_low!r}")
    if not clip_high >= 0.0:
        raise ValueError(f"{owner}.clip_high must be >= 0, got {clip_high!r}")
    if clip_c is not None and not clip_c > 1.0:
        raise ValueError(f"{owner}.clip_c must be > 1 (or None to disable dual clip), got "
                         f"{clip_c!r}")


@dataclasses.dataclass(frozen=True)
class PPOHParams:
    """Hyper-parameters of the clipped losses "dapo" and "grpo"."""

    clip_low: float = 0.2  # ε_l: ratio floor 1-ε_l
    clip_high: float = 0.28  # ε_h: ratio ceiling 1+ε_h (DAPO clip-higher)
    clip_c: float | None = 3.0  # dual-clip constant for A<0 (verl default 3; DAPO recipe 10); None: off
    agg_mode: AggMode = AggMode.TOKEN_MEAN
    reg: Regularizers = Regularizers()

    def __post_init__(self):
        object.__setattr__(self, "agg_mode", AggMode.parse(self.agg_mode, field="PPOHParams.agg_mode"))
        check_clip("PPOHParams", self.clip_low, self.clip_high, self.clip_c)


def clamped_log_ratio(logp_BT: Array, old_logp_BT: Array) -> Array:
    """δ = clamp(lp - olp, ±20) in the compute dtype (gradient 0 beyond the clamp, as torch)."""
    dt = float_dtype(logp_BT)
    return jnp.clip(logp_BT.astype(dt) - old_logp_BT.astype(dt), -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)


def clipped_token_loss(
    ratio_BT: Array,
    adv_BT: Array,
    *,
    clip_low: float,
    clip_high: float,
    clip_c: float | None,
) -> tuple[Array, Array, Array]:
    """Per-token clipped surrogate of a ratio (any ratio: token, sequence or cumulative).

    Returns (loss_BT, clipped_BT, dual_clipped_BT); the two masks are bool, for the metrics.
    """
    adv = adv_BT.astype(ratio_BT.dtype)
    l1 = -adv * ratio_BT
    l2 = -adv * jnp.clip(ratio_BT, 1.0 - clip_low, 1.0 + clip_high)
    lc = jnp.maximum(l1, l2)
    clipped = l2 > l1
    if clip_c is None:
        return lc, clipped, jnp.zeros_like(clipped)
    l3 = -adv * clip_c
    loss = jnp.where(adv < 0, jnp.minimum(l3, lc), lc)
    dual = (lc > l3) & (adv < 0)
    return loss, clipped, dual


def ppo_metrics(
    log_ratio_BT: Array, clipped_BT: Array, dual_BT: Array, mask_BT: Array
) -> dict[str, tuple[Array, Array]]:
    dt = log_ratio_BT.dtype
    return {
        "pg_clipfrac": masked_metric(clipped_BT.astype(dt), mask_BT),
        "pg_clipfrac_lower": masked_metric(dual_BT.astype(dt), mask_BT),
        "ppo_kl": masked_metric(-log_ratio_BT, mask_BT),
    }


def ppo_loss_from_log_ratio(
    inputs: LossInputs,
    log_ratio_BT: Array,
    hparams: PPOHParams,
    *,
    denominators: Denominators,
    token_weight_BT: Array | None = None,
    kl_log_ratio_BT: Array | None = None,
) -> tuple[Array, dict[str, tuple[Array, Array]]]:
    """Clipped loss share and metrics for a given (possibly modified) log-ratio.

    `token_weight_BT` multiplies the per-token loss (STARE); `kl_log_ratio_BT` is what `ppo_kl`
    reports (default: `log_ratio_BT`).
    """
    loss_BT, clipped, dual = clipped_token_loss(
        jnp.exp(log_ratio_BT), inputs.advantages_BT,
        clip_low=hparams.clip_low, clip_high=hparams.clip_high, clip_c=hparams.clip_c,
    )
    if token_weight_BT is not None:
        loss_BT = loss_BT * token_weight_BT.astype(loss_BT.dtype)
    if inputs.tis_weight_BT is not None:  # rollout correction "tis": weights are constants
        loss_BT = loss_BT * jax.lax.stop_gradient(inputs.tis_weight_BT).astype(loss_BT.dtype)
    share = aggregate(loss_BT, inputs.mask_BT, hparams.agg_mode, denominators)
    kl_lr = log_ratio_BT if kl_log_ratio_BT is None else kl_log_ratio_BT
    return share, ppo_metrics(kl_lr, clipped, dual, inputs.mask_BT)


def ppo_loss(inputs: LossInputs, hparams: PPOHParams, *, denominators: Denominators) -> LossOutput:
    """Clipped PPO (DAPO/GRPO) loss share of one micro-batch; see the module docstring."""
    validate_inputs(inputs, loss="ppo")
    log_ratio = clamped_log_ratio(inputs.logp_BT, inputs.old_logp_BT)
    share, metrics = ppo_loss_from_log_ratio(inputs, log_ratio, hparams, denominators=denominators)
    return finish(inputs, share, metrics, agg_mode=hparams.agg_mode, reg=hparams.reg,
                  denominators=denominators)


DAPO_DEFAULTS = PPOHParams(clip_low=0.2, clip_high=0.28)
GRPO_DEFAULTS = PPOHParams(clip_low=0.2, clip_high=0.2)
# The clipped token loss takes the TIS weights (`ppo_loss_from_log_ratio`).
PPO_NEEDS = LossNeeds(token_weights=True)
register(LossName.DAPO, PPOHParams, DAPO_DEFAULTS, needs=PPO_NEEDS)(ppo_loss)
register(LossName.GRPO, PPOHParams, GRPO_DEFAULTS, needs=PPO_NEEDS)(ppo_loss)


def policy_loss(
    logp,
    old_logp,
    advantages,
    mask,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.28,
    clip_c: float | None = 3.0,
    agg_mode: AggMode | str = "token-mean",
    loss_scale: float | None = None,
) -> tuple[Array, dict[str, Array]]:
    """Single-batch clipped PPO loss with verl semantics (DESIGN.md §4).

    Args:
      logp: [B, T] log π_θ (differentiable). old_logp: [B, T] log π_old (for Thinking Seeds, mixed
        by source with `mix_old_logp`). advantages: [B] or [B, T]. mask: [B, T] 0/1 loss mask.
      clip_low, clip_high, clip_c, agg_mode: see `PPOHParams`. loss_scale: sum-norm constant
        (default T).
    Returns:
      (loss, metrics) with metrics `pg_loss`, `pg_clipfrac`, `pg_clipfrac_lower`, `ppo_kl` (masked
      token means; 0 when no token is valid). For micro-batching use `get("dapo")` with
      `agg_denominators` instead.
    """
    inputs = LossInputs.create(logp, old_logp, advantages, mask)
    hp = PPOHParams(clip_low=clip_low, clip_high=clip_high, clip_c=clip_c, agg_mode=agg_mode)
    dens = agg_denominators(inputs.mask_BT, loss_scale=loss_scale)
    out = ppo_loss(inputs, hp, denominators=dens)
    return out.loss, finalize_metrics(out)
