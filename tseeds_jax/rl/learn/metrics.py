"""The update's per-token diagnostics and their exact reduction over micro-batches and updates.

Letters: B sequences, R response width. Everything is response-aligned [B, R] (the layout's
view), so the numbers do not depend on the learner's row layout.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

NUM_POS_BINS = 10  # positional profiles in 10% bins of relative position (paper Figures 3-4)


def position_bins(resp_mask_BR):
    """Bin index [B, R] of each response token by relative position t / |o| in 10% steps."""
    r = resp_mask_BR.shape[1]
    length_B = jnp.maximum(jnp.sum(resp_mask_BR, axis=1), 1.0)
    rel_BR = jnp.arange(r, dtype=jnp.float32)[None, :] / length_B[:, None]
    return jnp.clip(jnp.floor(rel_BR * NUM_POS_BINS), 0, NUM_POS_BINS - 1).astype(jnp.int32)


def diagnostics(logp, old, ent, adv_BR, resp, seed, sampler_logp, clip, first):
    """Per-token diagnostics as (sum, count) pairs: ratios, clipping, entropy by source and position."""
    cont = resp * (1.0 - seed)
    seed = resp * seed
    log_ratio = jnp.clip(logp - old, -20.0, 20.0)
    ratio = jnp.exp(log_ratio)
    clip_low, clip_high = clip
    clipped = (((adv_BR > 0) & (ratio > 1 + clip_high)) |
               ((adv_BR < 0) & (ratio < 1 - clip_low))).astype(jnp.float32)
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
    bins = position_bins(resp)
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


def reduce_metrics(auxs, gnorms):
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
