"""What a loss needs beyond one micro-batch's `LossInputs`, declared in its registry entry.

A loss registers its needs (`register(name, hparams_cls, needs=LossNeeds(...))`); the learner
(rl/learn/learner.py), the config side (rl/config/family.py, checks.py, compat.py) and the
learner's hooks (rl/learn/hooks.py) read them and never the loss's name, so a new loss with the
same needs touches no other module.

  selection        a no-gradient property of the whole mini-batch (one optimizer step) that the
                   loss would otherwise compute over its own call's rows only (M2PO's keep mask,
                   STARE's top-P weights). With several micro-batches, or per-shard gradients, the
                   learner computes it once per mini-batch and feeds every micro-batch its rows.
  entropy_prepass  the loss reads the batch's token-mean entropy before the update
                   (`LossInputs.entropy_mean`; STARE's gate).
  controller       state carried across steps, read by the loss and advanced after each update
                   from the step's metrics; checkpointed with the run (adaptive STARE).
  topk_proposal    the proposal's top-K at every response position, and per-token uniforms
                   (SIS); K comes from the learner option named `k_option`.
  token_weights    the loss multiplies each token's loss by `LossInputs.tis_weight_BT`
                   (rollout correction "tis": truncated importance weights, constants).
  base_losses      the loss wraps a base loss named by `params["base"]` (first: the default);
                   the base gets the shared clip / agg / regularizer overrides (SIS).
  options          learner-side options in `loss.params` that are not hparams fields.
  checks           config checks that read more than the loss section (`RunFacts`).
  offpolicy_traces the loss trains on off-policy traces that carry no behavior log-probs (LUFFY).
  clip_note        why a shared clip override above 10x the loss's own default is suspicious
                   (GSPO clips a sequence ratio); empty: no warning.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any


@dataclasses.dataclass(frozen=True)
class Option:
    """A learner option carried in `loss.params`: its default and its rule."""

    name: str
    default: Any
    valid: Callable[[Any], bool]
    rule: str  # completes "config.loss.params.<name>=<value>: ..."


@dataclasses.dataclass(frozen=True)
class Selection:
    """fn(logp_BT, old_logp_BT, advantages_BT, mask_BT, hparams, *, entropy_mean, state) ->
    float32 [B, T], no gradient, over all rows given; it goes in `LossInputs.selection_BT`."""

    fn: Callable[..., Any]


@dataclasses.dataclass(frozen=True)
class EntropyPrepass:
    """metrics(entropy_mean, hparams) -> {name: scalar}: what the learner reports of the pass."""

    metrics: Callable[[Any, Any], dict[str, Any]]


@dataclasses.dataclass(frozen=True)
class Controller:
    """Cross-step state of a loss (a pytree of scalars), on when option `enabled_by` is true."""

    enabled_by: str  # learner option that switches the controller on (its state goes in
    # `LossInputs.controller_state`)
    checkpoint_key: str  # group name of its arrays in the run's checkpoint
    initial: Callable[[Any], Any]  # hparams -> state
    advance: Callable[[Any, Mapping[str, Any], Any], Any]  # (state, step metrics, hparams) -> state
    report: Callable[[Any], dict[str, float]]  # state -> metrics logged with the step
    to_arrays: Callable[[Any], dict[str, Any]]  # state -> {name: numpy array}
    from_arrays: Callable[[Mapping[str, Any]], Any]  # inverse of to_arrays


@dataclasses.dataclass(frozen=True)
class TopKProposal:
    k_option: str  # learner option holding K


@dataclasses.dataclass(frozen=True)
class RunFacts:
    """The facts of a run outside the loss section that loss checks read."""

    refresh_interval: int  # seeds.refresh_interval
    offpolicy_source: str  # offpolicy.source ("" when none)


@dataclasses.dataclass(frozen=True)
class LossNeeds:
    selection: Selection | None = None
    entropy_prepass: EntropyPrepass | None = None
    controller: Controller | None = None
    topk_proposal: TopKProposal | None = None
    base_losses: tuple[str, ...] = ()
    options: tuple[Option, ...] = ()
    # check(params dict, RunFacts) -> [(dotted field under config, value, why)] of violations
    checks: Callable[[Mapping[str, Any], RunFacts], list[tuple[str, Any, str]]] | None = None
    offpolicy_traces: bool = False
    token_weights: bool = False
    clip_note: str = ""

    def option_defaults(self) -> dict[str, Any]:
        out = {o.name: o.default for o in self.options}
        if self.base_losses:
            out["base"] = self.base_losses[0]
        return out


NONE = LossNeeds()
