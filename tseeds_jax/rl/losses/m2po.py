"""M2PO, paper version (Zheng, Zhao, Chen 2025; algorithms.md §2.1): second-moment token masking.

Shape letters: B rows, T response positions, N = B·T flattened tokens.

  Δ = lp - olp;  M̂2 = Δ² (no gradient)
  trust region TR = valid tokens with (A > 0 and r > 1) or (A < 0 and r < 1)
  Algorithm 1: while mean_{TR} M̂2 > τ, drop the TR token with the largest M̂2 (keep mask 0).
  Loop-free here: sort TR ascending by M̂2 and keep the longest prefix whose running mean is ≤ τ
  (running means of an ascending sequence never decrease, so this is the same set).
  loss per token = -A · r · keep, r = exp(clamp(Δ, ±20)); no ε-clip; aggregated over ALL valid
  tokens (masked tokens stay in the denominator, paper footnote 2). τ = ∞ masks nothing.

Exactness: the keep mask is a property of the whole mini-batch. Computed inside the call it covers
only the rows given to that call; with micro-batching, the trainer must compute
`m2po_keep_mask(...)` once over the whole mini-batch (e.g. from the pre-update log-prob pass when
there is one update per batch) and pass it as `LossInputs.selection_BT` (its declared selection).
Not implemented: the official repo's clip-cap variant (water-filling τ mapped to PPO bounds).
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
from jaxtyping import Array

from tseeds_jax.rl.losses.base import (
    AggMode,
    Denominators,
    LossInputs,
    LossOutput,
    aggregate,
    float_dtype,
    masked_metric,
    validate_inputs,
)
from tseeds_jax.rl.losses.needs import LossNeeds, Selection
from tseeds_jax.rl.losses.ppo import clamped_log_ratio
from tseeds_jax.rl.losses.registry import LossName, register
from tseeds_jax.rl.losses.regularizers import Regularizers, finish


@dataclasses.dataclass(frozen=True)
class M2POHParams:
    tau: float = 0.04  # M2 budget τ (paper: 0.04 everywhere); math.inf disables masking
    agg_mode: AggMode = AggMode.TOKEN_MEAN  # paper: token mean over all valid tokens
    reg: Regularizers = Regularizers()

    def __post_init__(self):
        object.__setattr__(self, "agg_mode",
                           AggMode.parse(self.agg_mode, field="M2POHParams.agg_mode"))
        if not (self.tau >= 0 and not math.isnan(self.tau)):
            raise ValueError(f"M2POHParams.tau must be >= 0 (or inf), got {self.tau!r}")


def m2po_keep_mask(
    logp_BT: Array, old_logp_BT: Array, advantages_BT: Array, mask_BT: Array, tau: float
) -> tuple[Array, Array]:
    """(keep_BT, trust_region_BT), both bool [B, T], computed without gradient over all rows given.

    keep is False exactly on the trust-region tokens Algorithm 1 removes; True elsewhere (including
    masked positions, which the loss mask removes anyway).
    """
    dt = float_dtype(logp_BT)
    delta = jax.lax.stop_gradient(logp_BT.astype(dt) - old_logp_BT.astype(dt))
    adv = advantages_BT.astype(dt)
    tr = (mask_BT > 0) & (((adv > 0) & (delta > 0)) | ((adv < 0) & (delta < 0)))
    shape = delta.shape
    m2 = jnp.square(delta).reshape(-1)
    tr_N = tr.reshape(-1)
    key = jnp.where(tr_N, m2, jnp.inf)
    order = jnp.argsort(key, stable=True)
    sorted_m2 = jnp.where(tr_N[order], m2[order], 0.0)
    k = jnp.arange(1, key.shape[0] + 1, dtype=dt)
    running_mean = jnp.cumsum(sorted_m2) / k
    ok = (k <= jnp.sum(tr_N)) & (running_mean <= tau)
    # Leading run of ok (the running mean is monotone; cumprod guards against rounding wiggles).
    n_keep = jnp.sum(jnp.cumprod(ok.astype(jnp.int32)))
    rank = jnp.zeros(key.shape[0], jnp.int32).at[order].set(jnp.arange(key.shape[0], dtype=jnp.int32))
    keep = jnp.where(tr_N, rank < n_keep, True).reshape(shape)
    return keep, tr


def m2po_selection(logp_BT, old_logp_BT, advantages_BT, mask_BT, hparams: M2POHParams, *,
                   entropy_mean=None, state=None) -> Array:
    """The keep mask over all rows given as float32 [B, T] (the registry's mini-batch selection)."""
    keep, _ = m2po_keep_mask(logp_BT, old_logp_BT, advantages_BT, mask_BT, hparams.tau)
    return keep.astype(jnp.float32)


@register(LossName.M2PO, M2POHParams,
          needs=LossNeeds(selection=Selection(m2po_selection)))
def m2po_loss(inputs: LossInputs, hparams: M2POHParams, *, denominators: Denominators) -> LossOutput:
    """M2PO loss share of one call; see the module docstring (exactness needs `selection_BT`)."""
    validate_inputs(inputs, loss="m2po")
    keep, tr = m2po_keep_mask(inputs.logp_BT, inputs.old_logp_BT, inputs.advantages_BT,
                              inputs.mask_BT, hparams.tau)
    if inputs.selection_BT is not None:
        keep = inputs.selection_BT > 0
    log_ratio = clamped_log_ratio(inputs.logp_BT, inputs.old_logp_BT)
    dt = log_ratio.dtype
    loss_BT = jnp.where(keep, -inputs.advantages_BT.astype(dt) * jnp.exp(log_ratio), 0.0)
    share = aggregate(loss_BT, inputs.mask_BT, hparams.agg_mode, denominators)
    zeros = jnp.zeros_like(log_ratio)
    m = inputs.mask_BT
    metrics = {
        "pg_clipfrac": masked_metric(zeros, m),
        "pg_clipfrac_lower": masked_metric(zeros, m),
        "ppo_kl": masked_metric(-log_ratio, m),
        "m2po_masked_frac": masked_metric((~keep).astype(dt), m),
        "m2po_trust_region_frac": masked_metric(tr.astype(dt), m),
        "m2po_m2": masked_metric(jnp.square(jax.lax.stop_gradient(log_ratio)), m),
    }
    return finish(inputs, share, metrics, agg_mode=hparams.agg_mode, reg=hparams.reg,
                  denominators=denominators)
