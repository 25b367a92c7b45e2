"""GSPO and GSPO-token (Zheng et al. 2025, Qwen; algorithms.md §4), as verl `compute_policy_loss_gspo`.

Shape letters: B rows, T response positions.

  seq_lkl_i = Σ_t (lp - olp)·m / max(Σ_t m, 1)           (no ±20 clamp, as verl)
  "gspo":       log s_i  = min(seq_lkl_i, 10)             gradient through every token of the row
  "gspo_token": log s_it = min(lp - sg(lp) + sg(seq_lkl_i), 10)
  L = max(-A·s, -A·clip(s, 1-ε_l, 1+ε_h)),  ε_l = 3e-4, ε_h = 4e-4, no dual clip
  policy term aggregated with seq-mean-token-mean, always (verl forces it); `agg_mode` of the
  hparams applies to the regularizers only.

Value/gradient relationship: s_it has the value of s_i. With one advantage per row and log s < 10
the two losses have equal values and equal gradients: ∂/∂lp_t of the row term is
∂L/∂s · s_i / |y_i| in both (the 1/|y_i| comes from the sequence mean in "gspo" and from the
token mean of the row in "gspo_token"). They differ only for per-token advantages, which GSPO-token
allows. With one-token responses both equal token-level PPO with the same clip (no dual clip).
"""

from __future__ import annotations

import dataclasses

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
from tseeds_jax.rl.losses.needs import LossNeeds
from tseeds_jax.rl.losses.ppo import check_clip, clipped_token_loss
from tseeds_jax.rl.losses.registry import LossName, register
from tseeds_jax.rl.losses.regularizers import Regularizers, finish


@dataclasses.dataclass(frozen=True)
class GSPOHParams:
    clip_low: float = 3e-4  # paper / verl example script
    clip_high: float = 4e-4
    log_ratio_cap: float = 10.0  # verl clamps log s at 10 (value and gradient)
    agg_mode: AggMode = AggMode.TOKEN_MEAN  # regularizers only; the policy term is seq-mean-token-mean
    reg: Regularizers = Regularizers()

    def __post_init__(self):
        object.__setattr__(self, "agg_mode",
                           AggMode.parse(self.agg_mode, field="GSPOHParams.agg_mode"))
        check_clip("GSPOHParams", self.clip_low, self.clip_high, None)


def token_log_ratio(logp_BT: Array, old_logp_BT: Array, mask_BT: Array) -> Array:
    """Per-token lp - olp in the compute dtype, 0 at masked positions."""
    dt = float_dtype(logp_BT)
    delta = logp_BT.astype(dt) - old_logp_BT.astype(dt)
    return jnp.where(mask_BT > 0, delta, 0.0)


def sequence_log_ratio(logp_BT: Array, old_logp_BT: Array, mask_BT: Array) -> Array:
    """[B, 1] mean log-ratio of each row, differentiable (0 for rows with no valid token)."""
    delta = token_log_ratio(logp_BT, old_logp_BT, mask_BT)
    n = jnp.sum((mask_BT > 0).astype(delta.dtype), axis=-1, keepdims=True)
    return jnp.sum(delta, axis=-1, keepdims=True) / jnp.maximum(n, 1.0)


def gspo_token_log_ratio(inputs: LossInputs, cap: float) -> Array:
    """GSPO-token log s_it = min(lp - sg(lp) + sg(seq_lkl_i), cap), [B, T]."""
    dt = float_dtype(inputs.logp_BT)
    lp = inputs.logp_BT.astype(dt)
    seq = jax.lax.stop_gradient(sequence_log_ratio(lp, inputs.old_logp_BT, inputs.mask_BT))
    return jnp.minimum(lp - jax.lax.stop_gradient(lp) + seq, cap)


def gspo_from_log_ratio(
    inputs: LossInputs, log_s_BT: Array, hparams: GSPOHParams, *, denominators: Denominators
) -> tuple[Array, dict[str, tuple[Array, Array]]]:
    """Clipped sequence-ratio loss share (seq-mean-token-mean) and metrics for a given log s."""
    loss_BT, clipped, _ = clipped_token_loss(jnp.exp(log_s_BT), inputs.advantages_BT,
                                             clip_low=hparams.clip_low,
                                             clip_high=hparams.clip_high, clip_c=None)
    share = aggregate(loss_BT, inputs.mask_BT, AggMode.SEQ_MEAN_TOKEN_MEAN, denominators)
    dt = loss_BT.dtype
    m = inputs.mask_BT
    delta = jax.lax.stop_gradient(token_log_ratio(inputs.logp_BT, inputs.old_logp_BT, m))
    return share, {
        "pg_clipfrac": masked_metric(clipped.astype(dt), m),
        "pg_clipfrac_lower": masked_metric(jnp.zeros_like(loss_BT), m),
        "ppo_kl": masked_metric(-delta, m),
    }


def _gspo(inputs: LossInputs, hparams: GSPOHParams, denominators: Denominators, *,
          token_form: bool) -> LossOutput:
    if token_form:
        log_s = gspo_token_log_ratio(inputs, hparams.log_ratio_cap)
    else:
        seq = sequence_log_ratio(inputs.logp_BT, inputs.old_logp_BT, inputs.mask_BT)
        log_s = jnp.broadcast_to(jnp.minimum(seq, hparams.log_ratio_cap), inputs.logp_BT.shape)
    share, metrics = gspo_from_log_ratio(inputs, log_s, hparams, denominators=denominators)
    return finish(inputs, share, metrics, agg_mode=hparams.agg_mode, reg=hparams.reg,
                  denominators=denominators)


# A DAPO-sized clip range on a sequence ratio is almost certainly a config mix-up.
_GSPO_NEEDS = LossNeeds(clip_note="GSPO clips the sequence ratio; paper 3e-4/4e-4")


@register(LossName.GSPO, GSPOHParams, needs=_GSPO_NEEDS)
def gspo_loss(inputs: LossInputs, hparams: GSPOHParams, *, denominators: Denominators) -> LossOutput:
    """GSPO (sequence ratio, gradient through all tokens of a row); see the module docstring."""
    validate_inputs(inputs, loss="gspo")
    return _gspo(inputs, hparams, denominators, token_form=False)


@register(LossName.GSPO_TOKEN, GSPOHParams, needs=_GSPO_NEEDS)
def gspo_token_loss(
    inputs: LossInputs, hparams: GSPOHParams, *, denominators: Denominators
) -> LossOutput:
    """GSPO-token (verl's "gspo"): per-token advantages allowed; see the module docstring."""
    validate_inputs(inputs, loss="gspo_token")
    return _gspo(inputs, hparams, denominators, token_form=True)
