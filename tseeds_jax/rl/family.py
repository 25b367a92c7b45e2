"""The loss family as configured: registered hparams from `config.loss`, learner-side options, labels.

How a config selects and tunes a loss (docs: configs/tiny_<method>.py):

  loss.name      a registered loss (`tseeds_jax.rl.losses.names()`).
  loss.params    the loss's own hyper-parameters by field name (e.g. {"tau": 0.04} for m2po,
                 {"cum_mode": "geomean"} for ctpo), plus the learner options below.
  loss.clip_low / clip_high
                 None (the default) keeps the *loss's* registered clip range: 0.2/0.28 for dapo,
                 ctpo, stare; 0.2/0.2 for grpo and luffy; 3e-4/4e-4 for gspo and gspo_token. A
                 number overrides it for every loss that has the field. The learner never copies
                 a DAPO range onto GSPO behind the user's back.
  loss.clip_c    dual-clip constant; applied to every loss that has a `clip_c` field (DAPO recipe 10).
  loss.agg_mode, entropy_coef, kl_coef, kl_type
                 applied to every loss that has `agg_mode` / `reg` (for sis: to its base loss).

Learner options carried in `loss.params` (not hparams fields):
  sis:   base  ("dapo" | "grpo" | "gspo" | "gspo_token", default "dapo"): the loss whose ratio SIS
                modifies; it gets the shared overrides above.
         top_k (int, default 10): K of the proposal's top-K at each position.
  stare: adaptive (bool, default False): carry the adaptive W/M controller across steps
         (checkpointed); otherwise W/M stay at `pos_weight` / `neg_weight`.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

from tseeds_jax.rl import losses
from tseeds_jax.rl.config import ConfigValueError

SIS_BASES = ("dapo", "grpo", "gspo", "gspo_token")
LEARNER_OPTIONS = {"sis": {"base": "dapo", "top_k": 10}, "stare": {"adaptive": False}}


@dataclasses.dataclass(frozen=True)
class LossOptions:
    """Learner-side options of the configured loss (see the module docstring)."""

    sis_top_k: int = 0  # 0: not SIS
    stare_adaptive: bool = False


def _field_names(cls) -> list[str]:
    return [f.name for f in dataclasses.fields(cls)]


def build_hparams(name: str, *, clip_low=None, clip_high=None, clip_c=None, agg_mode="token-mean",
                  entropy_coef=0.0, kl_coef=0.0, kl_type="k3", params: dict | None = None,
                  field: str = "config.loss"):
    """(LossSpec, hparams) for loss `name`: registered defaults, shared overrides, then `params`.

    Raises ConfigValueError naming `<field>.name` / `<field>.params.<key>` for bad input.
    """
    try:
        spec = losses.get(name)
    except (ValueError, TypeError):
        raise ConfigValueError(f"{field}.name={name!r}: unknown loss; registered: "
                               f"{list(losses.names())}") from None
    params = dict(params or {})
    options = LEARNER_OPTIONS.get(spec.name, {})
    shared = dict(clip_low=clip_low, clip_high=clip_high, clip_c=clip_c, agg_mode=agg_mode,
                  entropy_coef=entropy_coef, kl_coef=kl_coef, kl_type=kl_type)
    fields = _field_names(spec.hparams_cls)
    changes: dict[str, Any] = {}
    if spec.name == "sis":
        base = params.get("base", "dapo")
        if base not in SIS_BASES:
            raise ConfigValueError(f"{field}.params.base={base!r}: SIS plugs into one of {SIS_BASES}")
        _, changes["base"] = build_hparams(base, **shared, field=field)
    else:
        for key in ("clip_low", "clip_high"):
            if shared[key] is not None and key in fields:
                changes[key] = shared[key]
                default = getattr(spec.default_hparams, key)
                if spec.name in ("gspo", "gspo_token") and shared[key] > 10 * default:
                    # A DAPO-sized range on a sequence ratio is almost certainly a config mix-up.
                    warnings.warn(f"{field}.{key}={shared[key]!r} overrides {spec.name}'s own "
                                  f"{default!r} (GSPO clips the sequence ratio; paper 3e-4/4e-4);"
                                  f" leave it None to keep the loss's default", stacklevel=2)
        if "clip_c" in fields and clip_c is not None:
            changes["clip_c"] = clip_c
        if "agg_mode" in fields:
            changes["agg_mode"] = agg_mode
        if "reg" in fields:
            try:
                changes["reg"] = losses.Regularizers(entropy_coef=entropy_coef, kl_coef=kl_coef,
                                                     kl_type=kl_type)
            except (TypeError, ValueError) as e:
                raise ConfigValueError(f"{field}: {e}") from None
    for key, value in params.items():
        if key in options:
            continue
        if key not in fields or key in ("base", "reg"):
            allowed = sorted((set(fields) - {"base", "reg"}) | set(options))
            raise ConfigValueError(f"{field}.params.{key}={value!r}: not a parameter of loss "
                                   f"{spec.name!r} ({spec.hparams_cls.__name__}); known: {allowed}")
        changes[key] = value
    try:
        hparams = dataclasses.replace(spec.default_hparams, **changes)
    except (TypeError, ValueError) as e:
        raise ConfigValueError(f"{field}.params / clip / agg_mode for loss {spec.name!r}: {e}") \
            from None
    return spec, hparams


def loss_options(name: str, params: dict | None, *, field: str = "config.loss") -> LossOptions:
    """Learner options of loss `name` from `loss.params` (validated)."""
    params = dict(params or {})
    if name == "sis":
        k = params.get("top_k", LEARNER_OPTIONS["sis"]["top_k"])
        if not isinstance(k, int) or isinstance(k, bool) or k < 1:
            raise ConfigValueError(f"{field}.params.top_k={k!r}: must be an integer >= 1")
        return LossOptions(sis_top_k=k)
    if name == "stare":
        adaptive = params.get("adaptive", False)
        if not isinstance(adaptive, bool):
            raise ConfigValueError(f"{field}.params.adaptive={adaptive!r}: must be true or false")
        return LossOptions(stare_adaptive=adaptive)
    return LossOptions()


def from_loss_config(lcfg):
    """(LossSpec, hparams, LossOptions) of a `LossConfig`."""
    spec, hp = build_hparams(lcfg.name, clip_low=lcfg.clip_low, clip_high=lcfg.clip_high,
                             clip_c=lcfg.clip_c, agg_mode=lcfg.agg_mode,
                             entropy_coef=lcfg.entropy_coef, kl_coef=lcfg.kl_coef,
                             kl_type=lcfg.kl_type, params=getattr(lcfg, "params", None))
    return spec, hp, loss_options(spec.name, getattr(lcfg, "params", None))


def diagnostic_clip(hparams) -> tuple[float, float]:
    """(clip_low, clip_high) for the learner's token-level clip diagnostics (DAPO's if none)."""
    hp = getattr(hparams, "base", hparams)
    return float(getattr(hp, "clip_low", 0.2)), float(getattr(hp, "clip_high", 0.28))


def derived_method(cfg) -> str:
    """Run label when `config.method` is empty: loss name, '+seeds', '+luffy', '+stale<s>'."""
    parts = [cfg.loss.name]
    if cfg.loss.name == "sis":
        parts[0] = f"sis[{(cfg.loss.params or {}).get('base', 'dapo')}]"
    if cfg.seeds.refresh_interval > 1:
        parts.insert(0, "thinking_seeds")
    if cfg.offpolicy.source and cfg.loss.name != "luffy":
        parts.append("offpolicy")
    if cfg.stale.steps:
        parts.append(f"stale{cfg.stale.steps}")
    return "+".join(parts)
