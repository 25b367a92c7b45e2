"""SIS, Selective Importance Sampling: a plug-in that changes only the ratio of a base loss.

Paper: arXiv 2607.04728 (Li et al. 2026). No official code. The acceptance rule below comes from a
THIRD-PARTY reproduction (daiwk/auto-research, `sis_topk_weight`), marked [GUESS] in
docs/algorithms.md §5.2, and the "unit ratio" form exp(lp - sg(lp)) is our reading. Treat both as
unconfirmed until checked against the paper's Algorithm 1.

Shape letters: B rows, T response positions, K top-K ids of the proposal π_old at each position.

Per valid token (all quantities without gradient):
  w_t  = π_θ(y_t) / π_old(y_t)
  M̂_t  = max_{v ∈ top-K of π_old} π_θ(v) / π_old(v)             (envelope on the proposal's top-K)
  accept iff y_t ∈ top-K and u_t < min(1, w_t / M̂_t),  u_t ~ U[0, 1) passed in (`uniforms_BT`)
Accepted tokens get log-ratio lp - sg(lp): ratio value 1, gradient ∇log π (REINFORCE-like; inside
any clip range, so never clipped). Rejected tokens keep the base loss's ratio unchanged.
Base: `PPOHParams` (dapo/grpo: token ratio, clip, dual clip) or `GSPOHParams` (GSPO-token ratio).
Scope: all valid tokens, or only seed tokens (`seed_mask_BT`; Thinking Seeds: the seed tokens'
proposal is π_b, so `topk_old_logp_BTK` are π_b's top-K log-probs cached at refresh and
`topk_cur_logp_BTK` the current policy's log-probs at those ids).
"""

from __future__ import annotations

import dataclasses
import enum

import jax
import jax.numpy as jnp
from jaxtyping import Array

from tseeds_jax.rl.losses.base import (
    Denominators,
    LossInputs,
    LossOutput,
    float_dtype,
    masked_metric,
    validate_inputs,
)
from tseeds_jax.rl.losses.gspo import GSPOHParams, gspo_from_log_ratio, gspo_token_log_ratio
from tseeds_jax.rl.losses.needs import LossNeeds, Option, TopKProposal
from tseeds_jax.rl.losses.ppo import PPOHParams, clamped_log_ratio, ppo_loss_from_log_ratio
from tseeds_jax.rl.losses.registry import LossName, register
from tseeds_jax.rl.losses.regularizers import finish


class SISScope(str, enum.Enum):
    ALL = "all"  # every valid token may be accepted
    SEED = "seed"  # only seed / off-policy tokens (seed_mask_BT); continuation tokens keep the base


@dataclasses.dataclass(frozen=True)
class SISHParams:
    base: PPOHParams | GSPOHParams = PPOHParams()  # DAPO defaults
    scope: SISScope = SISScope.ALL

    def __post_init__(self):
        if not isinstance(self.base, (PPOHParams, GSPOHParams)):
            raise TypeError(f"SISHParams.base must be PPOHParams or GSPOHParams, got "
                            f"{type(self.base).__name__}")
        try:
            object.__setattr__(self, "scope", SISScope(self.scope))
        except ValueError:
            raise ValueError(f"SISHParams.scope={self.scope!r} is not one of: all, seed") from None


def sis_accept_mask(
    logp_BT: Array,
    old_logp_BT: Array,
    topk_old_logp_BTK: Array,
    topk_cur_logp_BTK: Array,
    target_in_topk_BT: Array,
    uniforms_BT: Array,
) -> Array:
    """Bool [B, T]: the top-K envelope rejection test (no gradient); see the module docstring."""
    dt = float_dtype(logp_BT)
    sg = jax.lax.stop_gradient
    log_w = sg(logp_BT.astype(dt)) - old_logp_BT.astype(dt)
    log_env = jnp.max(sg(topk_cur_logp_BTK.astype(dt)) - topk_old_logp_BTK.astype(dt), axis=-1)
    accept_prob = jnp.exp(jnp.minimum(log_w - log_env, 0.0))
    return (target_in_topk_BT > 0) & (uniforms_BT.astype(dt) < accept_prob)


def _seed_scope_check(params, facts) -> list[tuple[str, object, str]]:
    if params.get("scope") == "seed" and facts.refresh_interval < 2:
        return [("loss.params.scope", "seed", "SIS on seed tokens needs seeds.refresh_interval > 1")]
    return []


def _is_top_k(k) -> bool:
    return isinstance(k, int) and not isinstance(k, bool) and k >= 1


SIS_NEEDS = LossNeeds(
    topk_proposal=TopKProposal(k_option="top_k"),
    base_losses=("dapo", "grpo", "gspo", "gspo_token"),  # the first is the default
    options=(Option("top_k", 10, _is_top_k, "must be an integer >= 1"),),
    checks=_seed_scope_check,
    token_weights=True,  # through its PPO-form token loss (ppo_loss_from_log_ratio)
)


@register(LossName.SIS, SISHParams, needs=SIS_NEEDS)
def sis_loss(inputs: LossInputs, hparams: SISHParams, *, denominators: Denominators) -> LossOutput:
    """Base loss with SIS-accepted tokens at unit ratio; see the module docstring."""
    need = ("topk_old_logp_BTK", "topk_cur_logp_BTK", "target_in_topk_BT", "uniforms_BT")
    if hparams.scope is SISScope.SEED:
        need += ("seed_mask_BT",)
    validate_inputs(inputs, need=need, loss="sis")
    if inputs.topk_old_logp_BTK.shape != inputs.topk_cur_logp_BTK.shape:
        raise ValueError(f"sis: topk_cur_logp_BTK shape {inputs.topk_cur_logp_BTK.shape} != "
                         f"topk_old_logp_BTK shape {inputs.topk_old_logp_BTK.shape}")
    accept = sis_accept_mask(inputs.logp_BT, inputs.old_logp_BT, inputs.topk_old_logp_BTK,
                             inputs.topk_cur_logp_BTK, inputs.target_in_topk_BT,
                             inputs.uniforms_BT)
    accept = accept & (inputs.mask_BT > 0)
    if hparams.scope is SISScope.SEED:
        accept = accept & (inputs.seed_mask_BT > 0)
    dt = float_dtype(inputs.logp_BT)
    lp = inputs.logp_BT.astype(dt)
    unit = lp - jax.lax.stop_gradient(lp)
    base = hparams.base
    if isinstance(base, PPOHParams):
        base_lr = clamped_log_ratio(inputs.logp_BT, inputs.old_logp_BT)
        share, metrics = ppo_loss_from_log_ratio(
            inputs, jnp.where(accept, unit, base_lr), base, denominators=denominators,
            kl_log_ratio_BT=base_lr)
    else:
        base_lr = gspo_token_log_ratio(inputs, base.log_ratio_cap)
        share, metrics = gspo_from_log_ratio(inputs, jnp.where(accept, unit, base_lr), base,
                                             denominators=denominators)
    metrics["sis_accept_frac"] = masked_metric(accept.astype(dt), inputs.mask_BT)
    metrics["sis_in_topk_frac"] = masked_metric((inputs.target_in_topk_BT > 0).astype(dt),
                                                inputs.mask_BT)
    return finish(inputs, share, metrics, agg_mode=base.agg_mode, reg=base.reg,
                  denominators=denominators)
