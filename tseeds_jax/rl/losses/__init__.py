"""rl/losses: the pure-array policy-loss family, registered by name.

Calling convention (every registered loss):

    dens = agg_denominators(loss_mask_BT_of_whole_minibatch)        # once per optimizer step
    for each micro-batch (whole rows):
        inputs = LossInputs.create(logp_BT, old_logp_BT, adv_B_or_BT, loss_mask_BT, ...)
        out = get(name)(inputs, hparams, denominators=dens)          # LossOutput
        grad += d out.loss / dθ                                      # shares add up exactly
    metrics = finalize_metrics(merge_outputs(*outs))

See base.py (types, aggregation), registry.py, needs.py (what a loss asks of the learner and
the trainer beyond one micro-batch's inputs), mixed_source.py (Thinking Seeds helpers).
"""

from tseeds_jax.rl.losses.base import (
    AggMode,
    Denominators,
    LossInputs,
    LossOutput,
    STAREState,
    agg_denominator,
    agg_denominators,
    agg_numerator,
    aggregate,
    broadcast_advantages,
    finalize_metrics,
    merge_outputs,
    validate_inputs,
)
from tseeds_jax.rl.losses.ctpo import CTPOHParams, CTPOLAHParams, CumMode
from tseeds_jax.rl.losses.gspo import GSPOHParams
from tseeds_jax.rl.losses.luffy import LUFFYHParams
from tseeds_jax.rl.losses.m2po import M2POHParams, m2po_keep_mask
from tseeds_jax.rl.losses.mixed_source import SeedLossVariant, mix_old_logp, seed_loss_mask
from tseeds_jax.rl.losses.ppo import PPOHParams, clipped_token_loss, policy_loss, ppo_loss
from tseeds_jax.rl.losses.registry import LossName, LossSpec, get, names, register
from tseeds_jax.rl.losses.regularizers import KLType, Regularizers, kl_penalty
from tseeds_jax.rl.losses.sis import SISHParams, SISScope, sis_accept_mask
from tseeds_jax.rl.losses.stare import (
    STAREHParams,
    STAREVariant,
    stare_controller_update,
    stare_initial_state,
    stare_token_weights,
)

__all__ = [
    "AggMode", "CTPOHParams", "CTPOLAHParams", "CumMode", "Denominators", "GSPOHParams",
    "KLType", "LUFFYHParams", "LossInputs", "LossName", "LossOutput", "LossSpec", "M2POHParams",
    "PPOHParams", "Regularizers", "SISHParams", "SISScope", "STAREHParams", "STAREState",
    "STAREVariant", "SeedLossVariant", "agg_denominator", "agg_denominators", "agg_numerator",
    "aggregate", "broadcast_advantages", "clipped_token_loss", "finalize_metrics", "get",
    "kl_penalty", "m2po_keep_mask", "merge_outputs", "mix_old_logp", "names", "policy_loss",
    "ppo_loss", "register", "seed_loss_mask", "sis_accept_mask", "stare_controller_update",
    "stare_initial_state", "stare_token_weights", "validate_inputs",
]
