"""The learner: token statistics through the fused kernel, and the jitted update step.

Letters: B sequences in a batch, P prompt width (left-padded), R response width (right-padded),
T = P + R, D model width, M mini-batches per batch, U micro-batches per mini-batch, K SIS top-K.

Batch: rl/learn/batch.py; rows: rl/learn/layout.py (padded, or packed: `update` packs each
micro-batch's sequences, the statistics passes take packed rows through `packed_*_pass`). The LM
head is fused into `tseeds_jax.kernels.logprob_entropy`: no [tokens, vocab] logits in training.

Loss-family plumbing: the learner serves what the loss's registry entry declares
(rl/losses/needs.py; rl/config/family.py for the config side), never a loss name:
  * selection (M2PO's keep mask, STARE's top-P weights): a property of the mini-batch (one
    optimizer step). With one micro-batch the loss computes it itself; with U > 1 micro-batches a
    no-grad pass over the mini-batch's micro-batches (at the parameters of that update) computes
    it once and feeds every micro-batch its rows (exact micro-batching).
  * entropy pre-pass (STARE's gate): the token-mean entropy of the batch before the update: the
    loss's own forward with one update and micro-batch, else a no-grad pass at the initial params.
  * controller (adaptive STARE): its state comes in as an argument of the update.
  * top-K proposal (SIS): the proposal's top-K at each position comes from the batch (`topk_*`,
    where `topk_valid_BR`: seed tokens' pi_b top-K from the refresh, or pi_old's from the
    recompute / stale generation pass) or, with the on-policy shortcut, from the current
    parameters (= pi_old there); the current policy's log-probs at those ids come from
    `kernels.topk` (no [N, V] logits). Uniforms: `fold_in(rng, update index)`, drawn per
    mini-batch row, so they do not depend on the micro-batch size.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

import tseeds_jax.rl.config.family as family
from tseeds_jax import kernels
from tseeds_jax.kernels import sharded
from tseeds_jax.kernels.topk import gather_logprobs, topk_logprobs
from tseeds_jax.rl import losses
from tseeds_jax.rl.config.sections import LossConfig, OptimConfig
from tseeds_jax.rl.learn import adapters as adapters_lib
from tseeds_jax.rl.learn import grad_accum
from tseeds_jax.rl.learn import layout as layout_lib
from tseeds_jax.rl.learn import metrics as metrics_lib
from tseeds_jax.rl.learn.batch import LearnerBatch, shard_batch


@flax.struct.dataclass
class TrainState:
    params: Any  # nnx.State of the trained Params (a LoRA run: the adapters only)
    opt_state: Any
    step: jax.Array  # optimizer updates so far (int32)


def trainable_labels(params, train_layers: str):
    """'train' / 'freeze' per parameter leaf. 'head' trains only the final norm and output head."""

    def label(path, _):
        if train_layers == "all":
            return "train"
        names = {str(getattr(p, "key", getattr(p, "name", p))) for p in path}
        return "train" if names & {"final_norm", "lm_head"} else "freeze"

    return jax.tree_util.tree_map_with_path(label, params)


def make_optimizer(ocfg: OptimConfig, params) -> optax.GradientTransformation:
    """AdamW with linear warm-up and global-norm clipping (clipping before the Adam moments)."""
    sched = (optax.linear_schedule(0.0, ocfg.lr, ocfg.warmup_steps) if ocfg.warmup_steps
             else optax.constant_schedule(ocfg.lr))
    adamw = optax.adamw(sched, b1=ocfg.b1, b2=ocfg.b2, eps=ocfg.eps, weight_decay=ocfg.weight_decay)
    tx = optax.chain(optax.clip_by_global_norm(ocfg.grad_clip), adamw)
    if ocfg.train_layers == "all":
        return tx
    return optax.multi_transform({"train": tx, "freeze": optax.set_to_zero()},
                                 trainable_labels(params, ocfg.train_layers))


def loss_hparams(lcfg: LossConfig):
    """(spec, hparams) of the configured loss: its registered defaults, the config's shared
    overrides (clip only where set, rl/config/family.py) and `loss.params`."""
    spec, hparams, _ = family.from_loss_config(lcfg)
    return spec, hparams


def response_hidden(graphdef, params, tokens_BT, attn_mask_BT, response_width: int, frozen=(),
                    packed: layout_lib.PackedRows | None = None):
    """(h_BRD hidden states predicting the response tokens, unembed_DV, targets_BR).
    frozen: the states that complete `params` (a LoRA run: base, rest; else none).
    packed: packed rows (`tokens_BT` / `attn_mask_BT` are then its tokens and segments)."""
    model = nnx.merge(graphdef, params, *frozen)
    extra = {} if packed is None else dict(positions_BT=packed.positions_BT,
                                           gather_BR=packed.gather_BR,
                                           targets_BR=packed.targets_BR)
    h_BRD, targets_BR = layout_lib.response_hidden(model, tokens_BT, attn_mask_BT,
                                                   response_width, **extra)
    return h_BRD, model.unembed_DV(), targets_BR


def token_stats(graphdef, params, tokens_BT, attn_mask_BT, response_width: int, impl: str = "auto",
                *, with_hidden: bool = False, frozen=(), packed=None, temperature: float = 1.0):
    """(logp_BR, entropy_BR) of the response tokens under `params` (float32, differentiable), of
    softmax(logits / temperature): the rollout's temperature, the distribution that sampled.

    with_hidden: also return (h_BRD, unembed_DV) for further LM-head statistics (SIS top-K).
    frozen, packed: as `response_hidden`'s (frozen states are never differentiated).
    """
    h_BRD, w_DV, targets_BR = response_hidden(graphdef, params, tokens_BT, attn_mask_BT,
                                              response_width, frozen, packed)
    b, _, d = h_BRD.shape
    logp_N, ent_N = kernels.logprob_entropy(h_BRD.reshape(-1, d), w_DV, targets_BR.reshape(-1),
                                            temperature=temperature, impl=impl)
    out = (logp_N.reshape(b, response_width), ent_N.reshape(b, response_width))
    return out + (h_BRD, w_DV) if with_hidden else out


_JITTED: dict = {}


class Learner:
    """Owns the optimizer and the jitted functions; holds no trained parameters itself (a LoRA
    run's frozen base, an argument of every jitted function, is `frozen`)."""

    def __init__(self, graphdef, params, lcfg: LossConfig, ocfg: OptimConfig, *, variant: str,
                 old_logp_mode: str, kernel_impl: str = "auto", mesh=None, frozen=None,
                 layout: layout_lib.RowLayout | None = None, temperature: float = 1.0):
        """mesh: the training mesh its batches are sharded over (learn/batch.py's one rule), or
        None (a batch already laid out, e.g. a global array of every host's rows). frozen: a
        LoRA run's `adapters.Frozen` (`params` are then the adapters), or None. layout: the
        rows of the update (`learner.layout`; default padded)."""
        self.temperature = float(temperature)  # the rollout's: every log-prob is at it
        self.graphdef = graphdef
        self.frozen = frozen
        self.lcfg, self.ocfg = lcfg, ocfg
        self.variant = losses.SeedLossVariant.parse(variant)
        self.spec, self.hparams, self.options = family.from_loss_config(lcfg)
        self.loss_name = self.spec.name
        self.needs = self.spec.needs
        self.diag_clip = family.diagnostic_clip(self.hparams)
        self.loss_scale = float(getattr(lcfg, "loss_scale", 0.0) or 0.0) or None
        model_cfg = nnx.merge(graphdef, params, *(frozen.states if frozen else ())).cfg
        vocab = model_cfg.vocab_size
        # Weight gradients leave the backward in the compute dtype ("update" reduces in it).
        self.compute_dtype = model_cfg.dtype
        if self.options.proposal_top_k > vocab:
            raise ValueError(f"config.loss.params.{self.needs.topk_proposal.k_option}="
                             f"{self.options.proposal_top_k}: {self.loss_name.upper()} top-K "
                             f"exceeds the model's vocabulary ({vocab})")
        self.tx = make_optimizer(ocfg, params)
        self.kernel_impl = kernel_impl
        if old_logp_mode == "auto":
            old_logp_mode = "shortcut" if ocfg.updates_per_batch == 1 else "recompute"
        self.old_logp_mode = old_logp_mode
        self.mesh = mesh
        # Learners of equal configuration share their jitted functions (and so their compiled
        # code): a demo or sweep building one trainer per run compiles the step once.
        key = (graphdef, repr(lcfg), repr(ocfg), self.variant, old_logp_mode, kernel_impl,
               self.temperature, None if frozen is None else (
                   frozen.train_graphdef, frozen.plain_graphdef, frozen.dropout_seed))
        if key not in _JITTED:
            _JITTED[key] = (jax.jit(self._stats_impl, static_argnums=(3,)),
                            jax.jit(self._topk_impl, static_argnums=(3, 4)),
                            jax.jit(self._update_impl, donate_argnums=(0,)),
                            jax.jit(self._reference_impl, static_argnums=(3,)),
                            jax.jit(self._packed_stats_impl),
                            jax.jit(self._packed_topk_impl, static_argnums=(2,)),
                            jax.jit(self._packed_reference_impl))
        # The jitted programs (the statistics passes and `tseeds compile` lower them directly).
        # A LoRA run passes its frozen states (base, rest) as their last argument. The packed
        # passes take `layout.PackedRows` in place of (tokens, mask, R).
        (self.stats_pass, self.topk_pass, self.update_pass, self.reference_pass,
         self.packed_stats_pass, self.packed_topk_pass, self.packed_reference_pass) = _JITTED[key]
        self.layout = layout or layout_lib.RowLayout()

    @property
    def needs_old_logp(self) -> bool:
        return self.old_logp_mode == "recompute"

    @property
    def proposal_top_k(self) -> int:
        """K of the loss's top-K proposal (SIS); 0 when the loss has none."""
        return self.options.proposal_top_k

    def init_state(self, params) -> TrainState:
        return TrainState(params=params, opt_state=self.tx.init(params),
                          step=jnp.zeros((), jnp.int32))

    def initial_controller_state(self):
        """The loss's cross-step controller state (adaptive STARE), or None when it has none or
        it is switched off."""
        if self.options.controller_on:
            return self.needs.controller.initial(self.hparams)
        return None

    # ---- no-grad statistics (refresh, recompute, reference) ----
    def _stats_impl(self, params, tokens_BT, attn_mask_BT, response_width, frozen=()):
        logp, ent = token_stats(self.graphdef, params, tokens_BT, attn_mask_BT, response_width,
                                self.kernel_impl, frozen=frozen, temperature=self.temperature)
        return jax.lax.stop_gradient(logp), jax.lax.stop_gradient(ent)

    def _reference_impl(self, base, tokens_BT, attn_mask_BT, response_width):
        """A LoRA run's reference policy: the base without adapters (the plain graph)."""
        logp, ent = token_stats(self.frozen.plain_graphdef, base, tokens_BT, attn_mask_BT,
                                response_width, self.kernel_impl, temperature=self.temperature)
        return jax.lax.stop_gradient(logp), jax.lax.stop_gradient(ent)

    def _packed_stats_impl(self, params, rows, frozen=()):
        """`_stats_impl` of packed rows (layout.PackedRows): [N, R] as the padded pass gives."""
        r = rows.gather_BR.shape[1]
        logp, ent = token_stats(self.graphdef, params, rows.tokens_BT, rows.segments_BT, r,
                                self.kernel_impl, frozen=frozen, packed=rows, temperature=self.temperature)
        return jax.lax.stop_gradient(logp), jax.lax.stop_gradient(ent)

    def _packed_reference_impl(self, base, rows):
        r = rows.gather_BR.shape[1]
        logp, ent = token_stats(self.frozen.plain_graphdef, base, rows.tokens_BT,
                                rows.segments_BT, r, self.kernel_impl, packed=rows,
                                temperature=self.temperature)
        return jax.lax.stop_gradient(logp), jax.lax.stop_gradient(ent)

    def _packed_topk_impl(self, params, rows, k, frozen=()):
        r = rows.gather_BR.shape[1]
        h, w, _ = response_hidden(self.graphdef, jax.lax.stop_gradient(params), rows.tokens_BT,
                                  rows.segments_BT, r, frozen, rows)
        b, _, d = h.shape
        ids, lp, _ = topk_logprobs(h.reshape(-1, d), w, k, temperature=self.temperature)
        return ids.reshape(b, r, k), lp.reshape(b, r, k)

    def stats(self, params, tokens_BT, attn_mask_BT, response_width: int):
        """(logp_BR, entropy_BR) as numpy, e.g. behavior log-probs at refresh time."""
        logp, ent = self.stats_pass(params, jnp.asarray(tokens_BT), jnp.asarray(attn_mask_BT),
                                    int(response_width), *self.frozen_arg(params))
        return np.asarray(logp), np.asarray(ent)

    def frozen_arg(self, params) -> tuple:
        """The trailing argument of a jitted pass: none, or a LoRA run's frozen states placed
        like `params` (`Frozen.like`)."""
        return () if self.frozen is None else (self.frozen.like(params),)

    def _topk_impl(self, params, tokens_BT, attn_mask_BT, response_width, k, frozen=()):
        h, w, _ = response_hidden(self.graphdef, jax.lax.stop_gradient(params), tokens_BT,
                                  attn_mask_BT, response_width, frozen)
        b, r, d = h.shape
        ids, lp, _ = topk_logprobs(h.reshape(-1, d), w, k, temperature=self.temperature)
        return ids.reshape(b, r, k), lp.reshape(b, r, k)

    def topk(self, params, tokens_BT, attn_mask_BT, response_width: int, k: int | None = None):
        """(ids_BRK int32, logp_BRK float32) numpy: the policy's top-K at every response position."""
        k = k or self.proposal_top_k
        ids, lp = self.topk_pass(params, jnp.asarray(tokens_BT), jnp.asarray(attn_mask_BT),
                                 int(response_width), int(k), *self.frozen_arg(params))
        return np.asarray(ids), np.asarray(lp)

    # ---- the update ----
    def _old_logp(self, logp, mb: LearnerBatch):
        seed = mb.seed_mask_BR * mb.resp_mask_BR
        cont_old = (jax.lax.stop_gradient(logp) if self.old_logp_mode == "shortcut"
                    else mb.old_logp_BR)
        # Seed tokens keep their cached behavior log-probs: never the on-policy shortcut there.
        return losses.mix_old_logp(seed, mb.behavior_logp_BR, cont_old)

    def _sis_inputs(self, h_BRD, w_DV, mb: LearnerBatch):
        """SIS LossInputs fields: proposal top-K log-probs, current log-probs there, membership."""
        k, t = self.proposal_top_k, self.temperature
        b, r, d = h_BRD.shape
        sg = jax.lax.stop_gradient
        ids_b = mb.topk_ids_BRK.reshape(-1, k)
        valid = (mb.topk_valid_BR * mb.resp_mask_BR).reshape(-1, 1) > 0
        if self.old_logp_mode == "shortcut":
            # pi_old = the current parameters: their own top-K where the batch has no proposal.
            own_ids, own_lp, cur_b = topk_logprobs(sg(h_BRD).reshape(-1, d), sg(w_DV), k,
                                                   gather_ids_NK=ids_b, temperature=t)
            ids = jnp.where(valid, ids_b, own_ids)
            old_k = jnp.where(valid, mb.topk_logp_BRK.reshape(-1, k), own_lp)
            cur_k = jnp.where(valid, cur_b, own_lp)
            known = jnp.ones_like(valid)
        else:
            cur_k = gather_logprobs(sg(h_BRD).reshape(-1, d), sg(w_DV), ids_b, temperature=t)
            ids, old_k, known = ids_b, mb.topk_logp_BRK.reshape(-1, k), valid
            cur_k = jnp.where(valid, cur_k, old_k)  # unknown rows: finite placeholders
        targets = layout_lib.response_targets(mb.tokens_BT, r, mb.targets_BR).reshape(-1, 1)
        in_topk = jnp.any(ids == targets, axis=-1) & known[:, 0]
        return dict(topk_old_logp_BTK=old_k.reshape(b, r, k),
                    topk_cur_logp_BTK=cur_k.reshape(b, r, k),
                    target_in_topk_BT=in_topk.reshape(b, r).astype(jnp.float32))

    def _micro_loss(self, params, mb: LearnerBatch, dens, first, extra=None, *, frozen=()):
        extra = extra or {}
        r = mb.response_width
        graphdef = self.graphdef if self.frozen is None else self.frozen.train_graphdef
        logp, ent, h_BRD, w_DV = token_stats(graphdef, params, mb.tokens_BT, mb.attn_mask_BT,
                                             r, self.kernel_impl, with_hidden=True,
                                             frozen=frozen, packed=_packed_of(mb),
                                             temperature=self.temperature)
        resp, seed = mb.resp_mask_BR, mb.seed_mask_BR * mb.resp_mask_BR
        old = self._old_logp(logp, mb)
        loss_mask = losses.seed_loss_mask(resp, seed, self.variant)
        needs, opt = self.needs, {}
        if needs.topk_proposal:
            opt.update(self._sis_inputs(h_BRD, w_DV, mb), uniforms_BT=extra["uniforms"])
        if needs.selection and "selection" in extra:
            opt["selection_BT"] = extra["selection"]
        if needs.entropy_prepass:
            if "entropy_mean" in extra:
                opt["entropy_mean"] = extra["entropy_mean"]
            else:  # single update, single micro-batch: this forward is the pre-update pass
                opt["entropy_mean"] = _token_mean(jax.lax.stop_gradient(ent), resp)
        if needs.controller:
            opt["controller_state"] = extra.get("controller_state")
        if mb.tis_weight_BR is not None:
            opt["tis_weight_BT"] = mb.tis_weight_BR
        inputs = losses.LossInputs.create(
            logp, old, mb.advantages_B, loss_mask, seed_mask_BT=seed,
            entropy_BT=ent, ref_logp_BT=mb.ref_logp_BR if self.lcfg.kl_coef else None,
            behavior_logp_BT=mb.behavior_logp_BR, **opt)
        out = self.spec(inputs, self.hparams, denominators=dens)
        adv_BR = jnp.broadcast_to(mb.advantages_B[:, None], logp.shape)
        diag = metrics_lib.diagnostics(jax.lax.stop_gradient(logp), old, jax.lax.stop_gradient(ent), adv_BR,
                            resp, seed, mb.sampler_logp_BR, self.diag_clip, first)
        return out.loss, (out, diag)

    def _nograd_logp_ent(self, params, mbs_XB, frozen=()):
        """(logp, entropy) [X, b, R] of stacked micro-batches, no gradient (lax.map over X)."""
        def one(mb):
            packed = _packed_of(mb)
            if packed is not None:
                return self._packed_stats_impl(params, packed, frozen)
            return self._stats_impl(params, mb.tokens_BT, mb.attn_mask_BT, mb.response_width,
                                    frozen)

        return jax.lax.map(one, mbs_XB)

    def _minibatch_selection(self, params, mb_UB, entropy_mean, controller_state, frozen=()):
        """The loss's selection [U, b, R] over the whole mini-batch (no gradient)."""
        logp_UBR, _ = self._nograd_logp_ent(params, mb_UB, frozen)
        flat = lambda x: x.reshape((-1,) + x.shape[2:])
        mb = jax.tree_util.tree_map(flat, mb_UB)
        logp = flat(logp_UBR)
        resp, seed = mb.resp_mask_BR, mb.seed_mask_BR * mb.resp_mask_BR
        mask = losses.seed_loss_mask(resp, seed, self.variant)
        adv = jnp.broadcast_to(mb.advantages_B[:, None], logp.shape)
        sel = self.needs.selection.fn(logp, self._old_logp(logp, mb), adv, mask, self.hparams,
                                      entropy_mean=entropy_mean, state=controller_state)
        return sel.reshape(logp_UBR.shape)

    def _update_impl(self, state: TrainState, batch: LearnerBatch, rng, controller_state,
                     frozen=()):
        """All optimizer updates of one batch: epochs x mini-batches, micro-batches accumulated.
        frozen: a LoRA run's frozen states (a constant: never differentiated or updated)."""
        o = self.ocfg
        n = batch.rows
        mini = n // o.mini_batches
        micro = o.micro_batch_size or mini
        n_micro = mini // micro
        # [M, U, rows of a micro-batch]: `micro` sequences, or (packed) the micro-batch's rows
        split = lambda x: x.reshape((o.mini_batches, n_micro, -1) + x.shape[1:])
        batches = jax.tree_util.tree_map(split, batch)

        def grads_of(fz):
            return jax.grad(functools.partial(self._micro_loss, frozen=fz), has_aux=True)

        grad_fn = grads_of(frozen)
        dropout = self.frozen is not None and self.frozen.lcfg.dropout > 0
        r = batch.response_width
        needs = self.needs
        entropy_mean = None
        accum = (grad_accum.ShardedAccumulator(state.params, micro, self.compute_dtype)
                 if o.grad_reduce == "update" else None)
        per_update = accum is not None and accum.active
        if needs.entropy_prepass and (o.updates_per_batch * n_micro > 1 or per_update):
            # Batch token-mean entropy of the pre-update pass (per-shard gradients see a shard's
            # rows only, so their forward is not that pass either).
            flat_mbs = jax.tree_util.tree_map(
                lambda x: x.reshape((-1,) + x.shape[2:]), batches)
            _, ent = self._nograd_logp_ent(state.params, flat_mbs, frozen)
            entropy_mean = _token_mean(ent, flat_mbs.resp_mask_BR)
        # Per-shard gradients see a shard's rows only: batch-coupled selections come first.
        whole_minibatch = needs.selection is not None and (n_micro > 1 or per_update)

        def one_update(carry, mb_UB):
            params, opt_state, k = carry
            resp_U = mb_UB.resp_mask_BR
            mask = losses.seed_loss_mask(resp_U.reshape(-1, resp_U.shape[-1]),
                                         (mb_UB.seed_mask_BR * resp_U).reshape(-1, resp_U.shape[-1]),
                                         self.variant)
            dens = losses.agg_denominators(mask, loss_scale=self.loss_scale)
            first = (k == 0).astype(jnp.float32)
            extra = {}
            if entropy_mean is not None:
                extra["entropy_mean"] = entropy_mean
            if controller_state is not None:
                extra["controller_state"] = controller_state
            if whole_minibatch:
                extra["selection"] = self._minibatch_selection(params, mb_UB, entropy_mean,
                                                               controller_state, frozen)
            if needs.topk_proposal:
                u = jax.random.uniform(jax.random.fold_in(rng, k), (n_micro * micro, r))
                extra["uniforms"] = u.reshape(n_micro, micro, r)
            per_micro = {key: v for key, v in extra.items() if key in ("selection", "uniforms")}
            shared = {key: v for key, v in extra.items() if key not in per_micro}
            xs = (mb_UB, per_micro)
            if dropout:
                xs = xs + (jnp.arange(n_micro),)

            def micro_grad(xs):  # adapter dropout: a mask key per (update, micro-batch)
                return grads_of(adapters_lib.with_dropout(self.frozen, frozen, state.step + k,
                                                          xs[2])) if dropout else grad_fn

            if per_update:
                def micro_step(acc_S, xs):
                    mb, pm = xs[:2]
                    g_S, aux_S = accum.grads(micro_grad(xs), params, mb, shared, pm, dens, first)
                    return accum.add(acc_S, g_S), aux_S

                acc_S, auxs = jax.lax.scan(micro_step, accum.zeros(params), xs)
                grads = accum.reduce(acc_S, params)
            else:
                def micro_step(acc, xs):
                    mb, pm = xs[:2]
                    g, aux = micro_grad(xs)(params, mb, dens, first, {**shared, **pm})
                    return jax.tree_util.tree_map(jnp.add, acc, g), aux

                zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
                grads, auxs = jax.lax.scan(micro_step, zeros, xs)
            updates, opt_state = self.tx.update(grads, opt_state, params)
            params = optax.apply_updates(params, updates)
            return (params, opt_state, k + 1), (auxs, optax.tree.norm(grads))

        def one_epoch(carry, _):
            return jax.lax.scan(one_update, carry, batches)

        (params, opt_state, _), (auxs, gnorms) = jax.lax.scan(
            one_epoch, (state.params, state.opt_state, jnp.zeros((), jnp.int32)), None,
            length=o.epochs)
        metrics = metrics_lib.reduce_metrics(auxs, gnorms)
        if needs.entropy_prepass:
            if entropy_mean is not None:
                ent_mean = entropy_mean
            else:  # the single micro-batch's own forward was the pre-update pass
                ent_sum, ent_count = auxs[1][0]["entropy/all"]
                ent_mean = jnp.sum(ent_sum) / jnp.maximum(jnp.sum(ent_count), 1.0)
            metrics.update(needs.entropy_prepass.metrics(ent_mean, self.hparams))
        new_state = TrainState(params=params, opt_state=opt_state,
                               step=state.step + o.updates_per_batch)
        return new_state, metrics

    def update(self, state: TrainState, batch: LearnerBatch, *, rng=None, controller_state=None):
        """One batch of updates. rng: a PRNG key (top-K proposal uniforms; default key 0).
        controller_state: the loss's controller state (`initial_controller_state`), or None."""
        if self.layout.packed:
            batch = self.pack_batch(batch)
        batch = jax.tree_util.tree_map(jnp.asarray, batch)
        if self.mesh is not None:
            batch = shard_batch(batch, self.mesh)
        if self.needs.topk_proposal and batch.topk_ids_BRK is None:
            raise ValueError(f"loss {self.loss_name!r} needs a batch built with top_k "
                             f"(build_batch(top_k=K))")
        rng = jax.random.PRNGKey(0) if rng is None else rng
        frozen = () if self.frozen is None else (self.frozen.states,)
        return self.update_pass(state, batch, rng, controller_state, *frozen)


    def micro_batches(self, rows: int) -> int:
        """Micro-batches of the update over a batch of `rows` sequences (M x U)."""
        o = self.ocfg
        mini = rows // o.mini_batches
        return o.mini_batches * (mini // (o.micro_batch_size or mini))

    def pack_batch(self, batch: LearnerBatch) -> LearnerBatch:
        """`batch` (padded rows, host numpy) with each micro-batch's sequences packed
        (layout.pack_rows); the response-aligned fields unchanged."""
        if batch.gather_BR is not None:
            return batch
        shards = 1  # whole packed rows per device of the batch axes
        if self.mesh is not None:
            micro = self.ocfg.micro_batch_size or batch.rows // self.ocfg.mini_batches
            shards = math.prod(self.mesh.shape[a] for a in sharded.batch_axes(self.mesh, micro))
        packed = layout_lib.pack_rows(batch.tokens_BT, batch.attn_mask_BT, self.layout,
                                      self.micro_batches(batch.rows), shards=shards)
        return batch.replace(tokens_BT=packed.tokens_BT, attn_mask_BT=packed.segments_BT,
                             positions_BT=packed.positions_BT, gather_BR=packed.gather_BR,
                             targets_BR=packed.targets_BR)


def _packed_of(mb: LearnerBatch):
    """A (micro-)batch's packed rows, or None for padded rows."""
    if mb.gather_BR is None:
        return None
    return layout_lib.PackedRows(tokens_BT=mb.tokens_BT, segments_BT=mb.attn_mask_BT,
                                 positions_BT=mb.positions_BT, gather_BR=mb.gather_BR,
                                 targets_BR=mb.targets_BR)


def _token_mean(values, mask):
    return jnp.sum(values * mask) / jnp.maximum(jnp.sum(mask), 1.0)
