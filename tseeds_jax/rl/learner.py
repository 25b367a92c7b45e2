"""The learner: token statistics through the fused kernel, and the jitted update step.

Letters: B sequences in a batch, P prompt width (left-padded), R response width (right-padded),
T = P + R, D model width, M mini-batches per batch, U micro-batches per mini-batch.

Batch layout. Every sequence is `[pad.. prompt | response ..pad]`: prompts are left-padded to P and
responses (seed + continuation) right-padded to R, so response token r of every row sits at column
P + r and is predicted by the hidden state at column P + r - 1. Per-token arrays are response-aligned
[B, R]. The LM head is fused into `tseeds_jax.kernels.logprob_entropy`, so no [tokens, vocab]
logits exist anywhere in training.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from tseeds_jax import kernels
from tseeds_jax.rl import losses
from tseeds_jax.rl.config import LossConfig, OptimConfig

NUM_POS_BINS = 10  # positional profiles in 10% bins of relative position (paper Figures 3-4)


@flax.struct.dataclass
class LearnerBatch:
    """One training batch (host numpy or device arrays); see the module docstring for layout."""

    tokens_BT: Any  # int32
    attn_mask_BT: Any  # int32, 1 on real tokens
    resp_mask_BR: Any  # float32, 1 on response tokens (seed + continuation)
    seed_mask_BR: Any  # float32, 1 on seed tokens
    behavior_logp_BR: Any  # float32, cached log pi_b (read on seed tokens only)
    sampler_logp_BR: Any  # float32, the sampler's log-probs (continuation tokens)
    old_logp_BR: Any  # float32, log pi_old from a recompute pass (read when old_logp=recompute)
    ref_logp_BR: Any  # float32, reference log-probs (read when kl_coef > 0)
    advantages_B: Any  # float32

    @property
    def response_width(self) -> int:
        return self.resp_mask_BR.shape[1]


@flax.struct.dataclass
class TrainState:
    params: Any  # nnx.State of the model's Params
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
    """The registered loss's hparams with the config's clip / aggregation / regulariser values."""
    spec = losses.get(lcfg.name)
    fields = {f.name for f in dataclasses.fields(spec.hparams_cls)}
    values = dict(clip_low=lcfg.clip_low, clip_high=lcfg.clip_high, clip_c=lcfg.clip_c,
                  agg_mode=lcfg.agg_mode)
    changes = {k: v for k, v in values.items() if k in fields}
    if "reg" in fields:
        changes["reg"] = losses.Regularizers(entropy_coef=lcfg.entropy_coef, kl_coef=lcfg.kl_coef,
                                             kl_type=lcfg.kl_type)
    return spec, dataclasses.replace(spec.default_hparams, **changes)


def token_stats(graphdef, params, tokens_BT, attn_mask_BT, response_width: int, impl: str = "auto"):
    """(logp_BR, entropy_BR) of the response tokens under `params` (float32, differentiable)."""
    model = nnx.merge(graphdef, params)
    h_BTD, _ = model.hidden(tokens_BT, attn_mask_BT=attn_mask_BT)
    b, t, d = h_BTD.shape
    p = t - response_width
    h_BRD = h_BTD[:, p - 1 : t - 1]
    targets_BR = tokens_BT[:, p:]
    logp_N, ent_N = kernels.logprob_entropy(h_BRD.reshape(-1, d), model.unembed_DV(),
                                            targets_BR.reshape(-1), impl=impl)
    return logp_N.reshape(b, response_width), ent_N.reshape(b, response_width)


def _position_bins(resp_mask_BR):
    """Bin index [B, R] of each response token by relative position t / |o| in 10% steps."""
    r = resp_mask_BR.shape[1]
    length_B = jnp.maximum(jnp.sum(resp_mask_BR, axis=1), 1.0)
    rel_BR = jnp.arange(r, dtype=jnp.float32)[None, :] / length_B[:, None]
    return jnp.clip(jnp.floor(rel_BR * NUM_POS_BINS), 0, NUM_POS_BINS - 1).astype(jnp.int32)


def _diagnostics(logp, old, ent, adv_BR, resp, seed, sampler_logp, lcfg: LossConfig, first):
    """Per-token diagnostics as (sum, count) pairs: ratios, clipping, entropy by source and position."""
    cont = resp * (1.0 - seed)
    seed = resp * seed
    log_ratio = jnp.clip(logp - old, -20.0, 20.0)
    ratio = jnp.exp(log_ratio)
    clipped = (((adv_BR > 0) & (ratio > 1 + lcfg.clip_high)) |
               ((adv_BR < 0) & (ratio < 1 - lcfg.clip_low))).astype(jnp.float32)
    out = {}
    for name, m in (("seed", seed), ("cont", cont)):
        out[f"ratio_mean/{name}"] = (jnp.sum(ratio * m), jnp.sum(m))
        out[f"clipfrac/{name}"] = (jnp.sum(clipped * m), jnp.sum(m))
        out[f"entropy/{name}"] = (jnp.sum(ent * m), jnp.sum(m))
        out[f"abs_log_ratio/{name}"] = (jnp.sum(jnp.abs(log_ratio) * m), jnp.sum(m))
    out["entropy/all"] = (jnp.sum(ent * resp), jnp.sum(resp))
    # Sampler-vs-learner gap: only meaningful before the first update changes the parameters.
    gap_m = cont * first
    out["sampler_learner_gap"] = (jnp.sum(jnp.abs(logp - sampler_logp) * gap_m), jnp.sum(gap_m))
    bins = _position_bins(resp)
    onehot_BRK = jax.nn.one_hot(bins, NUM_POS_BINS) * resp[..., None]
    extremes = {
        "ratio_max/seed": jnp.max(jnp.where(seed > 0, ratio, -jnp.inf)),
        "ratio_min/seed": jnp.min(jnp.where(seed > 0, ratio, jnp.inf)),
        "ratio_max/cont": jnp.max(jnp.where(cont > 0, ratio, -jnp.inf)),
        "ratio_min/cont": jnp.min(jnp.where(cont > 0, ratio, jnp.inf)),
    }
    profiles = {
        "pos_entropy": jnp.einsum("br,brk->k", ent, onehot_BRK),
        "pos_clipfrac": jnp.einsum("br,brk->k", clipped, onehot_BRK),
        "pos_seedfrac": jnp.einsum("br,brk->k", seed, onehot_BRK),
        "pos_count": jnp.sum(onehot_BRK, axis=(0, 1)),
    }
    return out, extremes, profiles


class Learner:
    """Owns the optimizer and the jitted functions; holds no parameters itself."""

    def __init__(self, graphdef, params, lcfg: LossConfig, ocfg: OptimConfig, *, variant: str,
                 old_logp_mode: str, kernel_impl: str = "auto", batch_sharding=None):
        self.graphdef = graphdef
        self.lcfg, self.ocfg = lcfg, ocfg
        self.variant = losses.SeedLossVariant.parse(variant)
        self.spec, self.hparams = loss_hparams(lcfg)
        self.tx = make_optimizer(ocfg, params)
        self.kernel_impl = kernel_impl
        if old_logp_mode == "auto":
            old_logp_mode = "shortcut" if ocfg.updates_per_batch == 1 else "recompute"
        self.old_logp_mode = old_logp_mode
        self.batch_sharding = batch_sharding
        self._stats = jax.jit(functools.partial(self._stats_impl), static_argnums=(3,))
        self._update = jax.jit(self._update_impl, donate_argnums=(0,))

    @property
    def needs_old_logp(self) -> bool:
        return self.old_logp_mode == "recompute"

    def init_state(self, params) -> TrainState:
        return TrainState(params=params, opt_state=self.tx.init(params),
                          step=jnp.zeros((), jnp.int32))

    # ---- no-grad statistics (refresh, recompute, reference) ----
    def _stats_impl(self, params, tokens_BT, attn_mask_BT, response_width):
        logp, ent = token_stats(self.graphdef, params, tokens_BT, attn_mask_BT, response_width,
                                self.kernel_impl)
        return jax.lax.stop_gradient(logp), jax.lax.stop_gradient(ent)

    def stats(self, params, tokens_BT, attn_mask_BT, response_width: int):
        """(logp_BR, entropy_BR) as numpy, e.g. behavior log-probs at refresh time."""
        logp, ent = self._stats(params, jnp.asarray(tokens_BT), jnp.asarray(attn_mask_BT),
                                int(response_width))
        return np.asarray(logp), np.asarray(ent)

    # ---- the update ----
    def _micro_loss(self, params, mb: LearnerBatch, dens, first):
        r = mb.response_width
        logp, ent = token_stats(self.graphdef, params, mb.tokens_BT, mb.attn_mask_BT, r,
                                self.kernel_impl)
        resp, seed = mb.resp_mask_BR, mb.seed_mask_BR * mb.resp_mask_BR
        cont_old = (jax.lax.stop_gradient(logp) if self.old_logp_mode == "shortcut"
                    else mb.old_logp_BR)
        # Seed tokens keep their cached behavior log-probs: never the on-policy shortcut there.
        old = losses.mix_old_logp(seed, mb.behavior_logp_BR, cont_old)
        loss_mask = losses.seed_loss_mask(resp, seed, self.variant)
        inputs = losses.LossInputs.create(
            logp, old, mb.advantages_B, loss_mask, seed_mask_BT=seed,
            entropy_BT=ent, ref_logp_BT=mb.ref_logp_BR if self.lcfg.kl_coef else None,
            behavior_logp_BT=mb.behavior_logp_BR)
        out = self.spec(inputs, self.hparams, denominators=dens)
        adv_BR = jnp.broadcast_to(mb.advantages_B[:, None], logp.shape)
        diag = _diagnostics(jax.lax.stop_gradient(logp), old, jax.lax.stop_gradient(ent), adv_BR,
                            resp, seed, mb.sampler_logp_BR, self.lcfg, first)
        return out.loss, (out, diag)

    def _update_impl(self, state: TrainState, batch: LearnerBatch):
        """All optimizer updates of one batch: epochs x mini-batches, micro-batches accumulated."""
        o = self.ocfg
        n = batch.tokens_BT.shape[0]
        mini = n // o.mini_batches
        micro = o.micro_batch_size or mini
        split = lambda x: x.reshape((o.mini_batches, mini // micro, micro) + x.shape[1:])
        batches = jax.tree_util.tree_map(split, batch)
        grad_fn = jax.grad(self._micro_loss, has_aux=True)

        def one_update(carry, mb_UB):
            params, opt_state, k = carry
            resp_U = mb_UB.resp_mask_BR
            mask = losses.seed_loss_mask(resp_U.reshape(-1, resp_U.shape[-1]),
                                         (mb_UB.seed_mask_BR * resp_U).reshape(-1, resp_U.shape[-1]),
                                         self.variant)
            dens = losses.agg_denominators(mask)
            first = (k == 0).astype(jnp.float32)

            def micro_step(acc, mb):
                g, aux = grad_fn(params, mb, dens, first)
                return jax.tree_util.tree_map(jnp.add, acc, g), aux

            zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
            grads, auxs = jax.lax.scan(micro_step, zeros, mb_UB)
            updates, opt_state = self.tx.update(grads, opt_state, params)
            params = optax.apply_updates(params, updates)
            return (params, opt_state, k + 1), (auxs, optax.global_norm(grads))

        def one_epoch(carry, _):
            return jax.lax.scan(one_update, carry, batches)

        (params, opt_state, _), (auxs, gnorms) = jax.lax.scan(
            one_epoch, (state.params, state.opt_state, jnp.zeros((), jnp.int32)), None,
            length=o.epochs)
        metrics = _reduce_metrics(auxs, gnorms)
        new_state = TrainState(params=params, opt_state=opt_state,
                               step=state.step + o.updates_per_batch)
        return new_state, metrics

    def update(self, state: TrainState, batch: LearnerBatch):
        batch = jax.tree_util.tree_map(jnp.asarray, batch)
        if self.batch_sharding is not None:
            batch = jax.device_put(batch, self.batch_sharding)
        return self._update(state, batch)


def _reduce_metrics(auxs, gnorms):
    """Aggregates the per-micro-batch outputs of all updates exactly (sums / counts)."""
    out, (diag, extremes, profiles) = auxs
    metrics = {}
    for key, s in out.metric_sums.items():
        c = jnp.sum(out.metric_counts[key])
        metrics[key] = jnp.where(c > 0, jnp.sum(s) / jnp.where(c > 0, c, 1.0), 0.0)
    # Loss shares add up to one loss per update; report the mean over updates.
    n_updates = gnorms.size
    metrics["loss"] = jnp.sum(out.loss) / n_updates
    for key, v in out.terms.items():
        metrics[key] = jnp.sum(v) / n_updates
    for key, (s, c) in diag.items():
        c = jnp.sum(c)
        metrics[key] = jnp.where(c > 0, jnp.sum(s) / jnp.where(c > 0, c, 1.0), jnp.nan)
    for key, v in extremes.items():
        red = jnp.max(v) if "max" in key else jnp.min(v)
        metrics[key] = jnp.where(jnp.isfinite(red), red, jnp.nan)
    metrics["grad_norm"] = jnp.mean(gnorms)
    count = jnp.sum(profiles["pos_count"], axis=tuple(range(profiles["pos_count"].ndim - 1)))
    for key in ("pos_entropy", "pos_clipfrac", "pos_seedfrac"):
        s = jnp.sum(profiles[key], axis=tuple(range(profiles[key].ndim - 1)))
        metrics[key] = jnp.where(count > 0, s / jnp.maximum(count, 1.0), jnp.nan)
    metrics["pos_count"] = count
    return metrics
