"""Types shared by the policy-loss family: inputs, outputs, aggregation and exact micro-batching.

Shape letters: B rows (responses) given to one call, T padded response positions, K top-K ids of the
behavior policy at a position (SIS only). All log-probabilities are natural-log, per token.

Exact micro-batching. A loss is an aggregate `Σ numerator / denominator` where the denominator depends
only on the loss mask of the whole mini-batch (one optimizer step). The caller computes it once,
`dens = agg_denominators(mask_BT_of_the_minibatch)`, and passes it to every micro-batch call. Each call
returns its *share* `numerator_micro / denominator` (`LossOutput.loss`), so summing the shares (and
their gradients) over the micro-batches gives the full mini-batch loss (and gradient) exactly. Rows
are never split across micro-batches (the per-row modes need whole rows).

Aggregation modes (the names of verl's `agg_loss`; the formulas restated here):
  token-mean              Σ_it L·m / Σ_it m                         (mini-batch token mean)
  seq-mean-token-sum      Σ_i [Σ_t L·m] / #rows with Σ_t m > 0
  seq-mean-token-mean     Σ_i [Σ_t L·m / Σ_t m] / #rows with Σ_t m > 0
  seq-mean-token-sum-norm Σ_i [Σ_t L·m] / (#rows with Σ_t m > 0 · loss_scale)   (Dr. GRPO)
The last is the mean over rows of per-row token sums divided by a constant (default T). The row
mean is Dr. GRPO's (Liu et al. 2025, "Understanding R1-Zero-Like Training: A Critical Perspective",
arXiv:2503.20783: the mean over a group's responses of token sums over a constant generation
budget), which verl's `agg_loss` adopted later; verl at b178a3c, like v0.5.0, still summed over rows
(Σ_it L·m / loss_scale), so its loss and gradient grew with the number of sequences in the batch.
That form is not offered.
Edge semantics: a row with no valid token contributes nothing and is not counted; a mini-batch with
no valid token gives loss 0 (the denominator is then 1, never 0), never NaN. Inside a row we divide by
the exact Σ_t m (verl adds 1e-8; the difference is ≤ 1e-8 relative for 0/1 masks).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct
from jaxtyping import Array, ArrayLike

LOG_RATIO_CLAMP = 20.0  # verl clamps lp - olp to ±20 before exp.


class AggMode(str, enum.Enum):
    """How per-token losses are reduced to a scalar (see module docstring)."""

    TOKEN_MEAN = "token-mean"
    SEQ_MEAN_TOKEN_SUM = "seq-mean-token-sum"
    SEQ_MEAN_TOKEN_MEAN = "seq-mean-token-mean"
    SEQ_MEAN_TOKEN_SUM_NORM = "seq-mean-token-sum-norm"

    @classmethod
    def parse(cls, value: AggMode | str, *, field: str = "agg_mode") -> AggMode:
        if isinstance(value, cls):
            return value
        try:
            return cls(value)
        except ValueError:
            allowed = ", ".join(m.value for m in cls)
            raise ValueError(f"{field}={value!r} is not one of: {allowed}") from None


def float_dtype(x: ArrayLike) -> jnp.dtype:
    """Compute dtype for losses: the input's float dtype, at least float32 (bf16 log-probs upcast)."""
    dt = jnp.result_type(x)
    if not jnp.issubdtype(dt, jnp.floating):
        dt = jnp.float32
    return jnp.promote_types(dt, jnp.float32)


@struct.dataclass
class Denominators:
    """Mini-batch denominators of every aggregation mode; compute once per optimizer step.

    Fields are scalar float arrays: `num_tokens` = Σ m (1 if the mini-batch has no valid token),
    `num_rows` = rows with Σ_t m > 0 (1 if none), `loss_scale` = the sum-norm constant (the mode's
    denominator is `num_rows · loss_scale`).
    """

    num_tokens: Array
    num_rows: Array
    loss_scale: Array

    def for_mode(self, mode: AggMode | str) -> Array:
        mode = AggMode.parse(mode)
        if mode is AggMode.TOKEN_MEAN:
            return self.num_tokens
        if mode is AggMode.SEQ_MEAN_TOKEN_SUM_NORM:
            return self.num_rows * self.loss_scale
        return self.num_rows


def _check_mask(mask_BT: ArrayLike, name: str = "mask_BT") -> Array:
    mask_BT = jnp.asarray(mask_BT)
    if mask_BT.ndim != 2:
        raise ValueError(f"{name} must have shape [B, T], got shape {mask_BT.shape}")
    return mask_BT


def agg_denominators(mask_BT: ArrayLike, *, loss_scale: float | None = None) -> Denominators:
    """Denominators of all modes for the loss mask of a whole mini-batch.

    Args:
      mask_BT: [B, T] 0/1 (bool, int or float) loss mask of the *mini-batch* (all micro-batches).
      loss_scale: constant divisor of `seq-mean-token-sum-norm` (after the mean over rows); default T
        (use the max response length so it stays constant during training).
    """
    mask_BT = _check_mask(mask_BT)
    if loss_scale is not None and not loss_scale > 0:
        raise ValueError(f"loss_scale must be > 0, got {loss_scale!r}")
    # Integer counts: a float32 sum of 0/1 stops being exact past 2^24 tokens.
    valid = mask_BT > 0
    n_tok = jnp.sum(valid, dtype=jnp.int32)
    n_rows = jnp.sum(jnp.any(valid, axis=-1), dtype=jnp.int32)
    scale = float(mask_BT.shape[-1]) if loss_scale is None else float(loss_scale)
    return Denominators(
        num_tokens=jnp.maximum(n_tok, 1).astype(jnp.float32),
        num_rows=jnp.maximum(n_rows, 1).astype(jnp.float32),
        loss_scale=jnp.asarray(scale, jnp.float32),
    )


def agg_denominator(
    mask_BT: ArrayLike, mode: AggMode | str, *, loss_scale: float | None = None
) -> Array:
    """The scalar denominator of one mode (see `agg_denominators`)."""
    return agg_denominators(mask_BT, loss_scale=loss_scale).for_mode(mode)


def agg_numerator(values_BT: Array, mask_BT: Array, mode: AggMode | str) -> Array:
    """This call's numerator: Σ over its rows; rows with no valid token contribute 0."""
    mode = AggMode.parse(mode)
    m = mask_BT.astype(values_BT.dtype)
    # where, not multiply: a masked position may hold any finite value; keep it out of the sum.
    row_sum_B = jnp.sum(jnp.where(m > 0, values_BT * m, 0.0), axis=-1)
    if mode is AggMode.SEQ_MEAN_TOKEN_MEAN:
        n_B = jnp.sum(m, axis=-1)
        return jnp.sum(jnp.where(n_B > 0, row_sum_B / jnp.where(n_B > 0, n_B, 1.0), 0.0))
    return jnp.sum(row_sum_B)


def aggregate(
    values_BT: Array, mask_BT: Array, mode: AggMode | str, denominators: Denominators
) -> Array:
    """This call's share of the mini-batch aggregate: numerator / mini-batch denominator."""
    den = denominators.for_mode(mode).astype(values_BT.dtype)
    return agg_numerator(values_BT, mask_BT, mode) / den


def broadcast_advantages(advantages: ArrayLike, mask_BT: ArrayLike) -> Array:
    """[B] sequence advantages -> [B, T] (broadcast over positions); [B, T] passes through."""
    adv = jnp.asarray(advantages)
    b, t = jnp.shape(mask_BT)
    if adv.shape == (b,):
        return jnp.broadcast_to(adv[:, None], (b, t))
    if adv.shape != (b, t):
        raise ValueError(f"advantages must have shape [B]=({b},) or [B, T]=({b}, {t}), got {adv.shape}")
    return adv


@struct.dataclass
class STAREState:
    """Adaptive STARE weights (scalars): `pos_weight` W for L+, `neg_weight` M for L- (C2)."""

    pos_weight: Array
    neg_weight: Array


@struct.dataclass
class LossInputs:
    """Everything a registered loss may read, for the B rows of one call (a micro-batch).

    Required:
      logp_BT: log π_θ(y_t) of the current parameters, float; the only input differentiated.
      old_logp_BT: ratio denominator, already mixed by source (`mix_old_logp`): π_b on seed tokens,
        π_old on continuation tokens.
      advantages_BT: [B, T] per-token advantages (use `LossInputs.create` to broadcast [B]).
      mask_BT: loss mask (0/1). For the Thinking Seeds `state` variant this already excludes seed
        tokens (`seed_loss_mask`). Denominators must be computed from this same mask.
    Optional (None when unused; a loss that needs one raises ValueError naming it):
      seed_mask_BT: 1 on seed / off-policy-prefix tokens (LUFFY off-policy tokens, SIS seed scope).
      entropy_BT: per-token entropy of the current policy (entropy bonus; keep its gradient if the
        bonus should train it; logged as `entropy`).
      ref_logp_BT: reference-policy log-probs (KL loss).
      behavior_logp_BT: cached π_b log-probs (informational; `old_logp_BT` is what the ratio uses).
      topk_old_logp_BTK: log π_old (the proposal) at its own top-K ids (SIS).
      topk_cur_logp_BTK: log π_θ at those same K ids (SIS; treated as constants).
      target_in_topk_BT: whether y_t is among the K ids (SIS).
      uniforms_BT: U[0,1) numbers for the SIS acceptance test (passed in for determinism).
      selection_BT: the loss's declared selection (`LossNeeds.selection`), computed over the whole
        mini-batch (M2PO's keep mask, STARE's token weights); if None the loss computes it over
        the rows of this call.
      entropy_mean: scalar, token-mean entropy of the mini-batch from the pre-update pass
        (`LossNeeds.entropy_prepass`; STARE's gate).
      controller_state: the loss's cross-step controller state (`LossNeeds.controller`; adaptive
        STARE's W/M, overriding the hparams' when given).
      tis_weight_BT: truncated importance weights min(pi_den / pi_sampler, t), constants that
        multiply the clipped token loss (rollout correction "tis"; the losses whose entry
        declares `LossNeeds.token_weights`).
    """

    logp_BT: Array
    old_logp_BT: Array
    advantages_BT: Array
    mask_BT: Array
    seed_mask_BT: Array | None = None
    entropy_BT: Array | None = None
    ref_logp_BT: Array | None = None
    behavior_logp_BT: Array | None = None
    topk_old_logp_BTK: Array | None = None
    topk_cur_logp_BTK: Array | None = None
    target_in_topk_BT: Array | None = None
    uniforms_BT: Array | None = None
    selection_BT: Array | None = None
    entropy_mean: Array | None = None
    controller_state: Any = None
    tis_weight_BT: Array | None = None

    @classmethod
    def create(cls, logp_BT, old_logp_BT, advantages, mask_BT, **optional) -> LossInputs:
        """Builds inputs, broadcasting [B] advantages to [B, T], and validates shapes."""
        mask_BT = _check_mask(mask_BT)
        inputs = cls(
            logp_BT=jnp.asarray(logp_BT),
            old_logp_BT=jnp.asarray(old_logp_BT),
            advantages_BT=broadcast_advantages(advantages, mask_BT),
            mask_BT=mask_BT,
            **optional,
        )
        validate_inputs(inputs)
        return inputs


_BT_FIELDS = (
    "logp_BT", "old_logp_BT", "advantages_BT", "mask_BT", "seed_mask_BT", "entropy_BT",
    "ref_logp_BT", "behavior_logp_BT", "target_in_topk_BT", "uniforms_BT", "selection_BT",
    "tis_weight_BT",
)


def validate_inputs(inputs: LossInputs, *, need: tuple[str, ...] = (), loss: str = "loss") -> None:
    """Static shape checks; raises ValueError naming the field. `need`: fields that must be set."""
    if not isinstance(inputs, LossInputs):
        raise TypeError(f"{loss}: inputs must be LossInputs, got {type(inputs).__name__}")
    shape = jnp.shape(inputs.logp_BT)
    if len(shape) != 2:
        raise ValueError(f"{loss}: logp_BT must have shape [B, T], got {shape}")
    if not jnp.issubdtype(jnp.result_type(inputs.logp_BT), jnp.floating):
        raise TypeError(f"{loss}: logp_BT must be floating, got {jnp.result_type(inputs.logp_BT)}")
    for name in _BT_FIELDS:
        value = getattr(inputs, name)
        if value is not None and jnp.shape(value) != shape:
            raise ValueError(f"{loss}: {name} must have shape {shape} (as logp_BT), got "
                             f"{jnp.shape(value)}")
    for name in ("topk_old_logp_BTK", "topk_cur_logp_BTK"):
        value = getattr(inputs, name)
        if value is not None and (jnp.ndim(value) != 3 or jnp.shape(value)[:2] != shape):
            raise ValueError(f"{loss}: {name} must have shape {shape + ('K',)}, got "
                             f"{jnp.shape(value)}")
    if inputs.entropy_mean is not None and jnp.ndim(inputs.entropy_mean) != 0:
        raise ValueError(f"{loss}: entropy_mean must be a scalar, got shape "
                         f"{jnp.shape(inputs.entropy_mean)}")
    for name in need:
        if getattr(inputs, name) is None:
            raise ValueError(f"{loss}: LossInputs.{name} is required by this loss but is None")


@struct.dataclass
class LossOutput:
    """Result of one loss call (one micro-batch).

    loss: scalar, this call's exact share of the mini-batch loss (already divided by the mini-batch
      denominators): Σ over micro-batches = the mini-batch loss; differentiate this.
    terms: named summable shares (`pg_loss`, `entropy`, `kl_loss`); loss = pg_loss
      - entropy_coef·entropy + kl_coef·kl_loss.
    metric_sums / metric_counts: per metric, Σ value·m and Σ m over this call; add them over
      micro-batches (and devices) and finish with `finalize_metrics`.
    """

    loss: Array
    terms: dict[str, Array]
    metric_sums: dict[str, Array]
    metric_counts: dict[str, Array]


def masked_metric(values_BT: Array, mask_BT: Array) -> tuple[Array, Array]:
    """(Σ value·m, Σ m) of a per-token metric, with masked positions ignored whatever they hold."""
    m = mask_BT.astype(values_BT.dtype)
    return jnp.sum(jnp.where(m > 0, values_BT * m, 0.0)), jnp.sum(m)


def merge_outputs(*outputs: LossOutput) -> LossOutput:
    """Adds LossOutputs of several micro-batches (or devices): shares and sums/counts add."""
    if not outputs:
        raise ValueError("merge_outputs needs at least one LossOutput")
    return jax.tree_util.tree_map(lambda *xs: sum(xs[1:], xs[0]), *outputs)


def finalize_metrics(output: LossOutput) -> dict[str, Array]:
    """Metric means (Σ/count, 0 where count is 0) plus the loss terms, for logging."""
    out: dict[str, Array] = dict(output.terms)
    for key, s in output.metric_sums.items():
        c = output.metric_counts[key]
        out[key] = jnp.where(c > 0, s / jnp.where(c > 0, c, 1.0), 0.0)
    return out


def make_output(
    loss: Array,
    terms: Mapping[str, Array],
    metrics: Mapping[str, tuple[Array, Array]],
) -> LossOutput:
    return LossOutput(
        loss=loss,
        terms=dict(terms),
        metric_sums={k: v[0] for k, v in metrics.items()},
        metric_counts={k: v[1] for k, v in metrics.items()},
    )
