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

Learner options carried in `loss.params` (not hparams fields) are declared by each loss's registry
entry (`losses.get(name).needs.options`, rl/losses/needs.py), e.g.
  sis:   base  (one of the entry's `base_losses`, default its first, "dapo"): the loss whose ratio
                SIS modifies; it gets the shared overrides above.
         top_k (int, default 10): K of the proposal's top-K at each position.
  stare: adaptive (bool, default False): carry the adaptive W/M controller across steps
         (checkpointed); otherwise W/M stay at `pos_weight` / `neg_weight`.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

from tseeds_jax.rl import losses
from tseeds_jax.rl.config.errors import ConfigValueError
from tseeds_jax.rl.losses.needs import NONE, RunFacts


@dataclasses.dataclass(frozen=True)
class LossOptions:
    """Learner-side options of the configured loss: the entry's defaults, then `loss.params`."""

    values: tuple[tuple[str, Any], ...] = ()
    proposal_top_k: int = 0  # K of the loss's top-K proposal; 0: the loss has none
    controller_on: bool = False  # the loss's cross-step controller is switched on


def _field_names(cls) -> list[str]:
    return [f.name for f in dataclasses.fields(cls)]


def _spec(name, field: str):
    try:
        return losses.get(name)
    except (ValueError, TypeError):
        raise ConfigValueError(f"{field}.name={name!r}: unknown loss; registered: "
                               f"{list(losses.names())}") from None


def build_hparams(name: str, *, clip_low=None, clip_high=None, clip_c=None, agg_mode="token-mean",
                  entropy_coef=0.0, kl_coef=0.0, kl_type="k3", params: dict | None = None,
                  field: str = "config.loss"):
    """(LossSpec, hparams) for loss `name`: registered defaults, shared overrides, then `params`.

    Raises ConfigValueError naming `<field>.name` / `<field>.params.<key>` for bad input.
    """
    spec = _spec(name, field)
    needs = spec.needs
    params = dict(params or {})
    options = needs.option_defaults()
    shared = dict(clip_low=clip_low, clip_high=clip_high, clip_c=clip_c, agg_mode=agg_mode,
                  entropy_coef=entropy_coef, kl_coef=kl_coef, kl_type=kl_type)
    fields = _field_names(spec.hparams_cls)
    changes: dict[str, Any] = {}
    if needs.base_losses:
        base = params.get("base", options["base"])
        if base not in needs.base_losses:
            raise ConfigValueError(f"{field}.params.base={base!r}: {spec.name.upper()} plugs into "
                                   f"one of {needs.base_losses}")
        _, changes["base"] = build_hparams(base, **shared, field=field)
    else:
        for key in ("clip_low", "clip_high"):
            if shared[key] is not None and key in fields:
                changes[key] = shared[key]
                default = getattr(spec.default_hparams, key)
                if needs.clip_note and shared[key] > 10 * default:
                    warnings.warn(f"{field}.{key}={shared[key]!r} overrides {spec.name}'s own "
                                  f"{default!r} ({needs.clip_note}); leave it None to keep the "
                                  f"loss's default", stacklevel=2)
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
    """Learner options of loss `name` from `loss.params` (validated against its entry)."""
    needs = _spec(name, field).needs
    params = dict(params or {})
    values = needs.option_defaults()
    for opt in needs.options:
        value = params.get(opt.name, opt.default)
        if not opt.valid(value):
            raise ConfigValueError(f"{field}.params.{opt.name}={value!r}: {opt.rule}")
        values[opt.name] = value
    k = int(values[needs.topk_proposal.k_option]) if needs.topk_proposal else 0
    on = bool(needs.controller and values[needs.controller.enabled_by])
    return LossOptions(values=tuple(sorted(values.items())), proposal_top_k=k, controller_on=on)


def from_loss_config(lcfg):
    """(LossSpec, hparams, LossOptions) of a `LossConfig`."""
    spec, hp = build_hparams(lcfg.name, clip_low=lcfg.clip_low, clip_high=lcfg.clip_high,
                             clip_c=lcfg.clip_c, agg_mode=lcfg.agg_mode,
                             entropy_coef=lcfg.entropy_coef, kl_coef=lcfg.kl_coef,
                             kl_type=lcfg.kl_type, params=getattr(lcfg, "params", None))
    return spec, hp, loss_options(spec.name, getattr(lcfg, "params", None))


def check_run(lcfg, *, refresh_interval: int, offpolicy_source: str) -> None:
    """Checks of the loss that read the rest of the run: off-policy traces need a loss that
    takes them; the entry's own checks (SIS scope "seed" needs a refresh cycle). Raises
    ConfigValueError naming the field."""
    spec = _spec(lcfg.name, "config.loss")
    if offpolicy_source and not spec.needs.offpolicy_traces:
        takers = " or ".join(f"loss.name={n!r}" for n in losses.names()
                             if losses.get(n).needs.offpolicy_traces)
        raise ConfigValueError(f"config.offpolicy.source={offpolicy_source!r}: off-policy traces "
                               f"have no behavior log-probs; they need {takers} "
                               f"(got {spec.name!r})")
    if spec.needs.checks is not None:
        facts = RunFacts(refresh_interval=refresh_interval, offpolicy_source=offpolicy_source)
        for where, value, why in spec.needs.checks(dict(lcfg.params or {}), facts):
            raise ConfigValueError(f"config.{where}={value!r}: {why}")


def diagnostic_clip(hparams) -> tuple[float, float]:
    """(clip_low, clip_high) for the learner's token-level clip diagnostics (DAPO's if none)."""
    hp = getattr(hparams, "base", hparams)
    return float(getattr(hp, "clip_low", 0.2)), float(getattr(hp, "clip_high", 0.28))


def derived_method(cfg) -> str:
    """Run label when `config.method` is empty: loss name, '+seeds', '+luffy', '+stale<s>',
    '+lora<rank>'."""
    # An unknown name gets a plain label here; validation reports it.
    needs = losses.get(cfg.loss.name).needs if cfg.loss.name in losses.names() else NONE
    parts = [cfg.loss.name]
    if needs.base_losses:
        parts[0] = f"{cfg.loss.name}[{(cfg.loss.params or {}).get('base', needs.base_losses[0])}]"
    if cfg.seeds.refresh_interval > 1:
        parts.insert(0, "thinking_seeds")
    if cfg.offpolicy.source and not needs.offpolicy_traces:
        parts.append("offpolicy")
    if cfg.stale.steps:
        parts.append(f"stale{cfg.stale.steps}")
    if cfg.lora.rank:
        parts.append(f"lora{cfg.lora.rank}")
    return "+".join(parts)
