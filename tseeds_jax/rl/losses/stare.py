"""STARE: surprisal-targeted token reweighting under an entropy gate (Luo et al. 2026; §5.3).

Shape letters: B rows, T response positions, N = B·T flattened tokens.

  s = -lp (surprisal, no gradient); T+ = valid tokens with A > 0; T- = valid tokens with A < 0
  L+ = the ⌈P·|T+|⌉ tokens of T+ with the largest s (at least 1 if T+ is non-empty; ties: lower
       flat index first); L- likewise in T- (variant C2 only)
  gate = [H̄ < H_tgt], H̄ = token-mean entropy of the mini-batch from the pre-update pass
  ω = 1; if gate: ω[L+] = W, and (C2) ω[L-] = M
  L = ω · (vanilla dual-clip DAPO per-token loss), aggregated with `agg_mode` (token-mean)
With the gate off (or W = M = 1) this is exactly "dapo" with the same clip settings.
P is used as the nearest fraction a/b with b ≤ 1000 so that ⌈P·n⌉ is computed in exact integer
arithmetic (0.1·30 is 3, not 4).

Exactness: L± are batch quantiles. Inside the call they cover only its rows (STARE's own code uses
micro-batch quantiles); for mini-batch quantiles pass `LossInputs.selection_BT` from
`stare_token_weights` computed once over the whole mini-batch. Adaptive schedule (optional, off by
default): `stare_controller_update` is a pure state -> state function, its state goes in
`LossInputs.controller_state`.
"""

from __future__ import annotations

import dataclasses
import enum
from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array

from tseeds_jax.rl.losses.base import (
    AggMode,
    Denominators,
    LossInputs,
    LossOutput,
    STAREState,
    float_dtype,
    masked_metric,
    validate_inputs,
)
from tseeds_jax.rl.losses.needs import Controller, EntropyPrepass, LossNeeds, Option, Selection
from tseeds_jax.rl.losses.ppo import (
    PPOHParams,
    check_clip,
    clamped_log_ratio,
    ppo_loss_from_log_ratio,
)
from tseeds_jax.rl.losses.registry import LossName, register
from tseeds_jax.rl.losses.regularizers import Regularizers, finish


class STAREVariant(str, enum.Enum):
    O1 = "o1"  # reweight L+ only (paper default)
    C2 = "c2"  # also L- with M


@dataclasses.dataclass(frozen=True)
class STAREHParams:
    clip_low: float = 0.2
    clip_high: float = 0.28
    clip_c: float | None = 3.0  # STARE's script uses 10
    agg_mode: AggMode = AggMode.TOKEN_MEAN
    reg: Regularizers = Regularizers()
    top_p_ratio: float = 0.1  # P
    pos_weight: float = 1.1  # W (14B/32B: 1.05)
    neg_weight: float = 0.9  # M, variant C2 only (14B/32B: 0.95)
    variant: STAREVariant = STAREVariant.O1
    entropy_target: float = 0.3  # H_tgt
    adapt_alpha: float = 0.01  # adaptive schedule step α
    adapt_w_max: float = 1.5
    adapt_m_min: float = 0.5

    def __post_init__(self):
        object.__setattr__(self, "agg_mode",
                           AggMode.parse(self.agg_mode, field="STAREHParams.agg_mode"))
        try:
            object.__setattr__(self, "variant", STAREVariant(self.variant))
        except ValueError:
            raise ValueError(f"STAREHParams.variant={self.variant!r} is not one of: o1, c2") from None
        check_clip("STAREHParams", self.clip_low, self.clip_high, self.clip_c)
        if not 0.0 < self.top_p_ratio <= 1.0:
            raise ValueError(f"STAREHParams.top_p_ratio must be in (0, 1], got {self.top_p_ratio!r}")

    @property
    def ppo(self) -> PPOHParams:
        return PPOHParams(clip_low=self.clip_low, clip_high=self.clip_high, clip_c=self.clip_c,
                          agg_mode=self.agg_mode, reg=self.reg)


def _ceil_fraction(n: Array, p: float) -> Array:
    """⌈p·n⌉ in int32 with p replaced by its nearest fraction a/b, b ≤ 1000."""
    frac = Fraction(p).limit_denominator(1000)
    a, b = frac.numerator, frac.denominator
    return (n // b) * a + ((n % b) * a + b - 1) // b


def top_fraction(score_BT: Array, member_BT: Array, p: float) -> Array:
    """Bool [B, T]: the ⌈p·n⌉ (≥ 1 if n > 0) members with the largest score, ties by flat index."""
    shape = score_BT.shape
    member = member_BT.reshape(-1)
    key = jnp.where(member, -score_BT.reshape(-1), jnp.inf)  # ascending sort = descending score
    order = jnp.argsort(key, stable=True)
    n_all = member.shape[0]
    rank = jnp.zeros(n_all, jnp.int32).at[order].set(jnp.arange(n_all, dtype=jnp.int32))
    n = jnp.sum(member.astype(jnp.int32))
    k = jnp.where(n > 0, jnp.maximum(_ceil_fraction(n, p), 1), 0)
    return (member & (rank < k)).reshape(shape)


def stare_token_weights(
    logp_BT: Array,
    advantages_BT: Array,
    mask_BT: Array,
    hparams: STAREHParams,
    *,
    entropy_mean: Array,
    state: STAREState | None = None,
) -> Array:
    """Token weights ω [B, T] (no gradient) over all rows given; see the module docstring."""
    dt = float_dtype(logp_BT)
    surprisal = -jax.lax.stop_gradient(logp_BT.astype(dt))
    valid = mask_BT > 0
    adv = advantages_BT.astype(dt)
    w = hparams.pos_weight if state is None else state.pos_weight
    m = hparams.neg_weight if state is None else state.neg_weight
    gate = jnp.asarray(entropy_mean) < hparams.entropy_target
    sel_pos = top_fraction(surprisal, valid & (adv > 0), hparams.top_p_ratio)
    omega = jnp.where(gate & sel_pos, jnp.asarray(w, dt), jnp.ones(surprisal.shape, dt))
    if hparams.variant is STAREVariant.C2:
        sel_neg = top_fraction(surprisal, valid & (adv < 0), hparams.top_p_ratio)
        omega = jnp.where(gate & sel_neg, jnp.asarray(m, dt), omega)
    return omega


def stare_initial_state(hparams: STAREHParams) -> STAREState:
    return STAREState(pos_weight=jnp.asarray(hparams.pos_weight, jnp.float32),
                      neg_weight=jnp.asarray(hparams.neg_weight, jnp.float32))


def stare_controller_update(
    state: STAREState, entropy_mean: Array, hparams: STAREHParams
) -> STAREState:
    """One adaptive step: W ← clip(W + α·sgn(H_tgt - H̄), 1, w_max); M ← clip(M - α·sgn, m_min, 1)."""
    sgn = jnp.sign(hparams.entropy_target - jnp.asarray(entropy_mean, jnp.float32))
    return STAREState(
        pos_weight=jnp.clip(state.pos_weight + hparams.adapt_alpha * sgn, 1.0, hparams.adapt_w_max),
        neg_weight=jnp.clip(state.neg_weight - hparams.adapt_alpha * sgn, hparams.adapt_m_min, 1.0),
    )


def stare_selection(logp_BT, old_logp_BT, advantages_BT, mask_BT, hparams: STAREHParams, *,
                    entropy_mean, state=None) -> Array:
    """`stare_token_weights` in the registry's mini-batch selection signature (old_logp unused)."""
    return stare_token_weights(logp_BT, advantages_BT, mask_BT, hparams, entropy_mean=entropy_mean,
                               state=state)


def _gate_metrics(entropy_mean, hparams: STAREHParams) -> dict[str, Array]:
    return {"stare_entropy_mean": entropy_mean,
            "stare_gate_on": (entropy_mean < hparams.entropy_target).astype(jnp.float32)}


def _advance(state: STAREState, metrics, hparams: STAREHParams) -> STAREState:
    return stare_controller_update(state, metrics["stare_entropy_mean"], hparams)


def _report(state: STAREState) -> dict[str, float]:
    # W/M in force during the step just trained (read before the controller advances).
    return {"stare_pos_weight": float(state.pos_weight),
            "stare_neg_weight": float(state.neg_weight)}


def _to_arrays(state: STAREState) -> dict[str, np.ndarray]:
    return {"pos_weight": np.asarray(state.pos_weight), "neg_weight": np.asarray(state.neg_weight)}


def _from_arrays(arrays) -> STAREState:
    return STAREState(pos_weight=jnp.asarray(arrays["pos_weight"], jnp.float32),
                      neg_weight=jnp.asarray(arrays["neg_weight"], jnp.float32))


STARE_NEEDS = LossNeeds(
    selection=Selection(stare_selection),
    entropy_prepass=EntropyPrepass(_gate_metrics),
    controller=Controller(enabled_by="adaptive", checkpoint_key="stare",
                          initial=stare_initial_state, advance=_advance, report=_report,
                          to_arrays=_to_arrays, from_arrays=_from_arrays),
    options=(Option("adaptive", False, lambda v: isinstance(v, bool), "must be true or false"),),
    token_weights=True,  # through its PPO-form token loss (ppo_loss_from_log_ratio)
)


@register(LossName.STARE, STAREHParams, needs=STARE_NEEDS)
def stare_loss(inputs: LossInputs, hparams: STAREHParams, *, denominators: Denominators) -> LossOutput:
    """STARE loss share; needs `entropy_mean` unless `selection_BT` is given."""
    if inputs.selection_BT is None:
        validate_inputs(inputs, need=("entropy_mean",), loss="stare")
        omega = stare_token_weights(inputs.logp_BT, inputs.advantages_BT, inputs.mask_BT, hparams,
                                    entropy_mean=inputs.entropy_mean, state=inputs.controller_state)
    else:
        validate_inputs(inputs, loss="stare")
        omega = inputs.selection_BT
    log_ratio = clamped_log_ratio(inputs.logp_BT, inputs.old_logp_BT)
    share, metrics = ppo_loss_from_log_ratio(inputs, log_ratio, hparams.ppo,
                                             denominators=denominators, token_weight_BT=omega)
    dt = log_ratio.dtype
    metrics["stare_reweighted_frac"] = masked_metric((omega != 1.0).astype(dt), inputs.mask_BT)
    metrics["stare_weight_mean"] = masked_metric(omega.astype(dt), inputs.mask_BT)
    return finish(inputs, share, metrics, agg_mode=hparams.agg_mode, reg=hparams.reg,
                  denominators=denominators)
