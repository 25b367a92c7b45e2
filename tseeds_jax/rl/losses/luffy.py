"""LUFFY mixed-policy loss (Yan et al. 2025; algorithms.md §3), as in the LUFFY run's code.

Shape letters: B rows, T response positions.

Off-policy tokens (`LossInputs.seed_mask_BT` = 1; for Thinking Seeds the seed tokens):
  p = exp(lp) (behavior prob taken as 1, no ratio), L = -A · f(p), f(p) = p / (p + γ), γ = 0.1,
  no clipping. f is computed as sigmoid(lp - log γ), which is exact and stable for any lp;
  ∂L/∂lp = -A · γp / (p + γ)² (up-weights low-probability tokens).
On-policy tokens: r = exp(clamp(lp - olp, ±20)) (the clamp is ours, for safety);
  L = -A·r (LUFFY run: loss_remove_clip) or max(-A·r, -A·clip(r, 1-ε_l, 1+ε_h)) (no dual clip).
Aggregation: `agg_mode`; token-mean over on+off tokens together, or a constant-length normaliser,
`seq-mean-token-sum-norm` with `agg_denominators(mask, loss_scale=T_max)`: mean over rows of
Σ_t(L·m) / T_max (Dr. GRPO, verl HEAD). The LUFFY run's vendored verl summed over rows instead
(Σ(L·m) / T_max); the two differ by the row count, a constant factor per batch size. The default
here is token-mean.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp

from tseeds_jax.rl.losses.base import (
    AggMode,
    Denominators,
    LossInputs,
    LossOutput,
    aggregate,
    masked_metric,
    validate_inputs,
)
from tseeds_jax.rl.losses.needs import LossNeeds
from tseeds_jax.rl.losses.ppo import check_clip, clamped_log_ratio, clipped_token_loss
from tseeds_jax.rl.losses.registry import LossName, register
from tseeds_jax.rl.losses.regularizers import Regularizers, finish


@dataclasses.dataclass(frozen=True)
class LUFFYHParams:
    gamma: float = 0.1  # shaping f(p) = p / (p + γ)
    on_policy_clip: bool = False  # False = the LUFFY run (loss_remove_clip)
    clip_low: float = 0.2  # used only with on_policy_clip
    clip_high: float = 0.2  # LUFFY: max(clip_upper_bound, 1+ε) with ε = 0.2
    agg_mode: AggMode = AggMode.TOKEN_MEAN
    reg: Regularizers = Regularizers()

    def __post_init__(self):
        object.__setattr__(self, "agg_mode",
                           AggMode.parse(self.agg_mode, field="LUFFYHParams.agg_mode"))
        if not self.gamma > 0:
            raise ValueError(f"LUFFYHParams.gamma must be > 0, got {self.gamma!r}")
        check_clip("LUFFYHParams", self.clip_low, self.clip_high, None)


@register(LossName.LUFFY, LUFFYHParams, needs=LossNeeds(offpolicy_traces=True))
def luffy_loss(inputs: LossInputs, hparams: LUFFYHParams, *, denominators: Denominators) -> LossOutput:
    """LUFFY loss share of one call; needs `seed_mask_BT` (1 = off-policy token)."""
    validate_inputs(inputs, need=("seed_mask_BT",), loss="luffy")
    log_ratio = clamped_log_ratio(inputs.logp_BT, inputs.old_logp_BT)
    dt = log_ratio.dtype
    adv = inputs.advantages_BT.astype(dt)
    off = inputs.seed_mask_BT > 0
    if hparams.on_policy_clip:
        on_loss, clipped, _ = clipped_token_loss(jnp.exp(log_ratio), adv, clip_low=hparams.clip_low,
                                                 clip_high=hparams.clip_high, clip_c=None)
    else:
        on_loss, clipped = -adv * jnp.exp(log_ratio), jnp.zeros(log_ratio.shape, bool)
    f = jax.nn.sigmoid(inputs.logp_BT.astype(dt) - math.log(hparams.gamma))
    loss_BT = jnp.where(off, -adv * f, on_loss)
    share = aggregate(loss_BT, inputs.mask_BT, hparams.agg_mode, denominators)
    m_on = jnp.where(off, 0.0, inputs.mask_BT.astype(dt))
    m_off = jnp.where(off, inputs.mask_BT.astype(dt), 0.0)
    metrics = {
        "pg_clipfrac": masked_metric(clipped.astype(dt), m_on),
        "pg_clipfrac_lower": masked_metric(jnp.zeros_like(f), m_on),
        "ppo_kl": masked_metric(-log_ratio, m_on),
        "luffy_offpolicy_frac": masked_metric(off.astype(dt), inputs.mask_BT),
        "luffy_offpolicy_prob": masked_metric(jax.lax.stop_gradient(jnp.exp(
            jnp.minimum(inputs.logp_BT.astype(dt), 0.0))), m_off),
    }
    return finish(inputs, share, metrics, agg_mode=hparams.agg_mode, reg=hparams.reg,
                  denominators=denominators)
