"""Entropy bonus and KL-to-reference loss, aggregated like the policy term (algorithms.md §1.6).

Shape letters: B rows, T response positions.

  loss = pg_loss - entropy_coef · agg(entropy) + kl_coef · agg(kl(lp, ref_lp))

KL estimators, with Δ = lp - ref_lp (value at the sampled token):
  k1 ("kl"):            Δ
  abs:                  |Δ|
  k2 ("mse"):           ½ Δ²
  k3 ("low_var_kl"):    κ = clamp(ref_lp - lp, ±20);  clamp(exp(κ) - κ - 1, ±10)
"""

from __future__ import annotations

import dataclasses
import enum

import jax.numpy as jnp
from jaxtyping import Array

from tseeds_jax.rl.losses.base import (
    AggMode,
    Denominators,
    LossInputs,
    LossOutput,
    aggregate,
    make_output,
)


class KLType(str, enum.Enum):
    K1 = "k1"
    ABS = "abs"
    K2 = "k2"
    K3 = "k3"

    @classmethod
    def parse(cls, value: KLType | str) -> KLType:
        aliases = {"kl": "k1", "mse": "k2", "low_var_kl": "k3"}
        if isinstance(value, cls):
            return value
        try:
            return cls(aliases.get(value, value))
        except ValueError:
            allowed = ", ".join([m.value for m in cls] + list(aliases))
            raise ValueError(f"kl_type={value!r} is not one of: {allowed}") from None


def kl_penalty(logp_BT: Array, ref_logp_BT: Array, kl_type: KLType | str) -> Array:
    """Per-token KL estimate between the current and the reference policy (see module docstring)."""
    kl_type = KLType.parse(kl_type)
    delta = logp_BT - ref_logp_BT
    if kl_type is KLType.K1:
        return delta
    if kl_type is KLType.ABS:
        return jnp.abs(delta)
    if kl_type is KLType.K2:
        return 0.5 * jnp.square(delta)
    kappa = jnp.clip(ref_logp_BT - logp_BT, -20.0, 20.0)
    return jnp.clip(jnp.exp(kappa) - kappa - 1.0, -10.0, 10.0)


@dataclasses.dataclass(frozen=True)
class Regularizers:
    """Optional entropy bonus and KL loss; both off by default (DAPO: no KL, no entropy bonus)."""

    entropy_coef: float = 0.0  # loss -= entropy_coef · agg(entropy_BT)
    kl_coef: float = 0.0  # loss += kl_coef · agg(kl); verl's use_kl_loss default coef is 0.001
    kl_type: KLType = KLType.K3

    def __post_init__(self):
        object.__setattr__(self, "kl_type", KLType.parse(self.kl_type))
        for name in ("entropy_coef", "kl_coef"):
            if not isinstance(getattr(self, name), (int, float)):
                raise TypeError(f"Regularizers.{name} must be a number, got {getattr(self, name)!r}")


def finish(
    inputs: LossInputs,
    pg_share: Array,
    metrics: dict[str, tuple[Array, Array]],
    *,
    agg_mode: AggMode,
    reg: Regularizers,
    denominators: Denominators,
) -> LossOutput:
    """Adds the regularizer terms (same mask, `agg_mode`) to a policy-loss share."""
    mask = inputs.mask_BT
    terms = {"pg_loss": pg_share}
    loss = pg_share
    if inputs.entropy_BT is not None:
        ent = inputs.entropy_BT.astype(pg_share.dtype)
        ent_share = aggregate(ent, mask, agg_mode, denominators)
        terms["entropy"] = ent_share
        if reg.entropy_coef:
            loss = loss - reg.entropy_coef * ent_share
    elif reg.entropy_coef:
        raise ValueError("entropy_coef != 0 needs LossInputs.entropy_BT, which is None")
    if reg.kl_coef:
        if inputs.ref_logp_BT is None:
            raise ValueError("kl_coef != 0 needs LossInputs.ref_logp_BT, which is None")
        kl = kl_penalty(inputs.logp_BT.astype(pg_share.dtype),
                        inputs.ref_logp_BT.astype(pg_share.dtype), reg.kl_type)
        kl_share = aggregate(kl, mask, agg_mode, denominators)
        terms["kl_loss"] = kl_share
        loss = loss + reg.kl_coef * kl_share
    return make_output(loss, terms, metrics)
