"""CTPO and CTPO-LA: cumulative token ratios (Zhang et al. 2026; algorithms.md §5.1).

Shape letters: B rows, T response positions.

  δ_t = clamp(lp_t - olp_t, ±20)·m_t;  t = Σ_{s≤t} m_s  (1-indexed position among valid tokens)
  K_t = Σ_{s≤t} δ_s ("cumprod": ρ_t = Π r_s)  or  K_t / t ("geomean")
  log ρ_t = min(sg(K_t) + lp_t - sg(lp_t), 10)
The prefix enters by value only (stop-gradient): ∂ρ_t/∂lp_s = ρ_t if s = t (and log ρ_t < 10), else 0.

"ctpo":    ratio-space clip and dual clip on ρ_t, exactly the vanilla surrogate of ppo.py.
"ctpo_la": log-space, position-adaptive bounds with scale t^p (p = 0.5 cumprod, -0.5 geomean):
           lo_t = 0.025·t^p, hi_t = 0.05·t^p, c_t = 0.05·t^p
           ρ̃ = exp(clamp(log ρ, -lo_t, hi_t));  Lc = max(-A·ρ, -A·ρ̃);  L3 = -A·exp(c_t)
           L = Lc if A >= 0 else min(L3, Lc)
At position 1 (cumprod) CTPO-LA equals vanilla PPO with ε_l = 1 - e^{-lo_1}, ε_h = e^{hi_1} - 1,
c = e^{c_1}.
"""

from __future__ import annotations

import dataclasses
import enum

import jax
import jax.numpy as jnp
from jaxtyping import Array

from tseeds_jax.rl.losses.base import (
    LOG_RATIO_CLAMP,
    AggMode,
    Denominators,
    LossInputs,
    LossOutput,
    aggregate,
    float_dtype,
    masked_metric,
    validate_inputs,
)
from tseeds_jax.rl.losses.ppo import check_clip, clipped_token_loss, ppo_metrics
from tseeds_jax.rl.losses.registry import LossName, register
from tseeds_jax.rl.losses.regularizers import Regularizers, finish


class CumMode(str, enum.Enum):
    CUMPROD = "cumprod"
    GEOMEAN = "geomean"


def _parse_mode(owner: str, value) -> CumMode:
    try:
        return CumMode(value)
    except ValueError:
        raise ValueError(f"{owner}.cum_mode={value!r} is not one of: cumprod, geomean") from None


@dataclasses.dataclass(frozen=True)
class CTPOHParams:
    cum_mode: CumMode = CumMode.CUMPROD
    clip_low: float = 0.2
    clip_high: float = 0.28
    clip_c: float | None = 3.0
    log_ratio_cap: float = 10.0
    agg_mode: AggMode = AggMode.TOKEN_MEAN
    reg: Regularizers = Regularizers()

    def __post_init__(self):
        object.__setattr__(self, "cum_mode", _parse_mode("CTPOHParams", self.cum_mode))
        object.__setattr__(self, "agg_mode",
                           AggMode.parse(self.agg_mode, field="CTPOHParams.agg_mode"))
        check_clip("CTPOHParams", self.clip_low, self.clip_high, self.clip_c)


@dataclasses.dataclass(frozen=True)
class CTPOLAHParams:
    cum_mode: CumMode = CumMode.CUMPROD
    la_clip_low: float = 0.025
    la_clip_high: float = 0.05
    la_clip_c: float | None = 0.05  # None disables the dual clip
    power: float | None = None  # None: 0.5 for cumprod (Var log ρ ∝ t), -0.5 for geomean
    log_ratio_cap: float = 10.0
    agg_mode: AggMode = AggMode.TOKEN_MEAN
    reg: Regularizers = Regularizers()

    def __post_init__(self):
        object.__setattr__(self, "cum_mode", _parse_mode("CTPOLAHParams", self.cum_mode))
        object.__setattr__(self, "agg_mode",
                           AggMode.parse(self.agg_mode, field="CTPOLAHParams.agg_mode"))
        for name in ("la_clip_low", "la_clip_high"):
            if not getattr(self, name) > 0:
                raise ValueError(f"CTPOLAHParams.{name} must be > 0, got {getattr(self, name)!r}")
        if self.la_clip_c is not None and not self.la_clip_c > 0:
            raise ValueError(f"CTPOLAHParams.la_clip_c must be > 0 or None, got {self.la_clip_c!r}")

    @property
    def resolved_power(self) -> float:
        if self.power is not None:
            return self.power
        return 0.5 if self.cum_mode is CumMode.CUMPROD else -0.5


def cumulative_log_ratio(
    inputs: LossInputs, cum_mode: CumMode, cap: float
) -> tuple[Array, Array]:
    """(log ρ_BT with prefix stop-gradient, position t_BT as float, ≥ 1)."""
    dt = float_dtype(inputs.logp_BT)
    lp = inputs.logp_BT.astype(dt)
    valid = inputs.mask_BT > 0
    delta = jnp.clip(lp - inputs.old_logp_BT.astype(dt), -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    delta = jnp.where(valid, delta, 0.0)
    k = jnp.cumsum(delta, axis=-1)
    pos = jnp.maximum(jnp.cumsum(valid.astype(dt), axis=-1), 1.0)
    if cum_mode is CumMode.GEOMEAN:
        k = k / pos
    log_rho = jax.lax.stop_gradient(k) + lp - jax.lax.stop_gradient(lp)
    return jnp.minimum(log_rho, cap), pos


@register(LossName.CTPO, CTPOHParams)
def ctpo_loss(inputs: LossInputs, hparams: CTPOHParams, *, denominators: Denominators) -> LossOutput:
    """CTPO with the ratio-space clip + dual clip; see the module docstring."""
    validate_inputs(inputs, loss="ctpo")
    log_rho, _ = cumulative_log_ratio(inputs, hparams.cum_mode, hparams.log_ratio_cap)
    loss_BT, clipped, dual = clipped_token_loss(
        jnp.exp(log_rho), inputs.advantages_BT, clip_low=hparams.clip_low,
        clip_high=hparams.clip_high, clip_c=hparams.clip_c)
    share = aggregate(loss_BT, inputs.mask_BT, hparams.agg_mode, denominators)
    metrics = ppo_metrics(jax.lax.stop_gradient(log_rho), clipped, dual, inputs.mask_BT)
    metrics["ppo_kl"] = _token_kl(inputs)
    return finish(inputs, share, metrics, agg_mode=hparams.agg_mode, reg=hparams.reg,
                  denominators=denominators)


def _token_kl(inputs: LossInputs) -> tuple[Array, Array]:
    dt = float_dtype(inputs.logp_BT)
    delta = jnp.clip(inputs.logp_BT.astype(dt) - inputs.old_logp_BT.astype(dt),
                     -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    return masked_metric(-jax.lax.stop_gradient(delta), inputs.mask_BT)


@register(LossName.CTPO_LA, CTPOLAHParams)
def ctpo_la_loss(
    inputs: LossInputs, hparams: CTPOLAHParams, *, denominators: Denominators
) -> LossOutput:
    """CTPO-LA (log-space, position-adaptive clip and dual clip); see the module docstring."""
    validate_inputs(inputs, loss="ctpo_la")
    log_rho, pos = cumulative_log_ratio(inputs, hparams.cum_mode, hparams.log_ratio_cap)
    scale = pos ** hparams.resolved_power
    lo, hi = hparams.la_clip_low * scale, hparams.la_clip_high * scale
    adv = inputs.advantages_BT.astype(log_rho.dtype)
    l1 = -adv * jnp.exp(log_rho)
    l2 = -adv * jnp.exp(jnp.clip(log_rho, -lo, hi))
    lc = jnp.maximum(l1, l2)
    clipped = l2 > l1
    if hparams.la_clip_c is None:
        loss_BT, dual = lc, jnp.zeros_like(clipped)
    else:
        l3 = -adv * jnp.exp(hparams.la_clip_c * scale)
        loss_BT = jnp.where(adv < 0, jnp.minimum(l3, lc), lc)
        dual = (lc > l3) & (adv < 0)
    share = aggregate(loss_BT, inputs.mask_BT, hparams.agg_mode, denominators)
    metrics = ppo_metrics(jax.lax.stop_gradient(log_rho), clipped, dual, inputs.mask_BT)
    metrics["ppo_kl"] = _token_kl(inputs)
    return finish(inputs, share, metrics, agg_mode=hparams.agg_mode, reg=hparams.reg,
                  denominators=denominators)
