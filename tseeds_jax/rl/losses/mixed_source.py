"""Mixed-source ratios and loss masks for Thinking Seeds (DESIGN.md §1.5–1.6).

Shape letters: B rows, T response positions. A trained sample is o = [h, y]: seed tokens h come from
the behavior policy π_b (snapshot at the last refresh), continuation tokens y from π_old (the policy
current at this training step). The seed mask is 1 on h, 0 on y (and on padding).

Ratios:  seed tokens r = π_θ / π_b  (behavior log-probs cached at refresh time);
         continuation tokens r = π_θ / π_old.
PITFALL: never replace the seed tokens' old log-probs by the current ones (verl's on-policy shortcut
`old_log_prob = log_prob.detach()` with one update per batch). That makes every seed ratio exactly 1
and silently removes the off-policy correction. The shortcut is valid for continuation tokens only:
pass `old_logp_BT = stop_gradient(logp_BT)` there and the cached π_b values on seed tokens.

Loss treatments:
  state+action: seed and continuation tokens both enter the (token-mean) loss.
  state:        seed tokens are context only; the loss mask is the continuation mask, and the token
                mean runs over continuation tokens (denominators from that mask).
"""

from __future__ import annotations

import enum

import jax.numpy as jnp
from jaxtyping import Array, ArrayLike


class SeedLossVariant(str, enum.Enum):
    STATE_ACTION = "state+action"
    STATE = "state"

    @classmethod
    def parse(cls, value: SeedLossVariant | str) -> SeedLossVariant:
        if isinstance(value, cls):
            return value
        try:
            return cls(value)
        except ValueError:
            allowed = ", ".join(m.value for m in cls)
            raise ValueError(f"seed loss variant {value!r} is not one of: {allowed}") from None


def _same_shape(**arrays) -> tuple[int, ...]:
    shapes = {k: jnp.shape(v) for k, v in arrays.items()}
    first_name, first = next(iter(shapes.items()))
    if len(first) != 2:
        raise ValueError(f"{first_name} must have shape [B, T], got {first}")
    for k, s in shapes.items():
        if s != first:
            raise ValueError(f"{k} must have shape {first} (as {first_name}), got {s}")
    return first


def mix_old_logp(seed_mask_BT: ArrayLike, behavior_logp_BT: ArrayLike, old_logp_BT: ArrayLike) -> Array:
    """Ratio denominators by source: π_b on seed tokens, π_old on continuation tokens.

    Args:
      seed_mask_BT: [B, T] 0/1 or bool, 1 on seed tokens.
      behavior_logp_BT: [B, T] cached log π_b (only read on seed tokens).
      old_logp_BT: [B, T] log π_old (only read on continuation tokens; may be the detached current
        log-probs when there is one update per batch).
    """
    _same_shape(seed_mask_BT=seed_mask_BT, behavior_logp_BT=behavior_logp_BT,
                old_logp_BT=old_logp_BT)
    seed = jnp.asarray(seed_mask_BT).astype(bool)
    return jnp.where(seed, jnp.asarray(behavior_logp_BT), jnp.asarray(old_logp_BT))


def seed_loss_mask(
    response_mask_BT: ArrayLike, seed_mask_BT: ArrayLike, variant: SeedLossVariant | str
) -> Array:
    """Policy-loss mask for a Thinking Seeds variant (same dtype as `response_mask_BT`).

    state+action: the response mask (seed + continuation tokens); state: response mask with seed
    tokens removed. Compute `agg_denominators` from the returned mask.
    """
    _same_shape(response_mask_BT=response_mask_BT, seed_mask_BT=seed_mask_BT)
    variant = SeedLossVariant.parse(variant)
    resp = jnp.asarray(response_mask_BT)
    if variant is SeedLossVariant.STATE_ACTION:
        return resp
    keep = jnp.logical_not(jnp.asarray(seed_mask_BT).astype(bool))
    return jnp.where(keep, resp, jnp.zeros_like(resp))
