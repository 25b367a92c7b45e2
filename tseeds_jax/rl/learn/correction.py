"""Rollout correction: masked importance weights between the sampler and the learner.

Letters: B rows, R response positions.

The sampler's log-probs (its own kernels, dtype, possibly an older version for carried tokens) are
not the learner's. Per token the importance weight of the learner's ratio denominator over the
sampler is w = pi_den / pi_sampler, with pi_den the denominator the loss already uses: the
learner's log-probs under the policy that wrote the token (seed tokens: `behavior_logp_BR`,
continuation tokens: pi_old). As verl's rollout correction in its masking modes:

  token_mask  tokens with w outside [1/t, t] leave the loss (their response mask is zeroed, so
              they leave the token-mean denominators too);
  seq_mask    rows whose geometric-mean w (exp of the mean log w over the row's tokens) leaves
              [1/t, t] leave the loss whole.

  tis         truncated importance sampling: every token's clipped loss is multiplied by
              min(w, t), a constant (no gradient through it); no token leaves the loss. The
              losses whose entry declares `LossNeeds.token_weights` take it; the config refuses
              it with the others (config/checks.py).

Masking composes with the mixed-source ratio by removing tokens, never by changing the ratio:
the kept seed tokens keep pi_theta / pi_b, the kept continuation tokens pi_theta / pi_old. TIS
multiplies the token's loss, so a seed token's gradient is min(w, t) x that of
pi_theta / pi_b: the product pi_theta / pi_b x pi_b / pi_sampler, truncated (docs/async.md).
"""

from __future__ import annotations

import numpy as np

from tseeds_jax.rl.config.checks import CORRECTION_MODES as MODES


def log_weights(resp_BR, seed_BR, behavior_logp_BR, old_logp_BR, sampler_logp_BR) -> np.ndarray:
    """[B, R] float64 log w = log pi_den - log pi_sampler on response tokens, 0 elsewhere."""
    resp = np.asarray(resp_BR) > 0
    den = np.where(np.asarray(seed_BR) > 0, behavior_logp_BR, old_logp_BR).astype(np.float64)
    return np.where(resp, den - np.asarray(sampler_logp_BR, np.float64), 0.0)


def correction_mask(resp_BR, log_w_BR, mode: str, threshold: float):
    """(new response mask [B, R] float32, metrics): `resp_BR` with the masked tokens zeroed."""
    if mode not in MODES:
        raise ValueError(f"rollout correction mode {mode!r}: known {MODES}")
    if not threshold > 1.0:
        raise ValueError(f"rollout correction threshold {threshold!r}: must be > 1")
    resp = np.asarray(resp_BR, np.float32)
    on = resp > 0
    bound = float(np.log(threshold))
    log_w = np.asarray(log_w_BR, np.float64)
    if mode in ("off", "tis"):
        keep = on
    elif mode == "token_mask":
        keep = on & (np.abs(log_w) <= bound)
    else:
        n = on.sum(axis=1)
        mean = np.where(n > 0, (log_w * on).sum(axis=1) / np.maximum(n, 1), 0.0)
        keep = on & (np.abs(mean) <= bound)[:, None]
    total = max(int(on.sum()), 1)
    w = np.exp(np.clip(log_w[on], -20.0, 20.0)) if on.any() else np.ones(1)
    metrics = {"rc_masked_token_frac": float((on & ~keep).sum() / total),
               "rc_abs_log_w_mean": float(np.abs(log_w[on]).mean()) if on.any() else 0.0,
               "rc_w_max": float(w.max()), "rc_w_min": float(w.min())}
    return np.where(keep, resp, 0.0).astype(np.float32), metrics


def tis_weights(resp_BR, log_w_BR, threshold: float):
    """(weights [B, R] float32, metrics): min(w, t) on response tokens, 1 elsewhere."""
    if not threshold > 1.0:
        raise ValueError(f"rollout correction threshold {threshold!r}: must be > 1")
    on = np.asarray(resp_BR) > 0
    log_w = np.clip(np.asarray(log_w_BR, np.float64), -20.0, 20.0)
    capped = np.minimum(log_w, float(np.log(threshold)))
    w = np.where(on, np.exp(capped), 1.0)
    n = max(int(on.sum()), 1)
    metrics = {"rc_truncated_token_frac": float((on & (log_w > capped)).sum() / n),
               "rc_tis_weight_mean": float(w[on].mean()) if on.any() else 1.0}
    return w.astype(np.float32), metrics


def correct_batch(batch, samples, old_logp_BR, mode: str, threshold: float):
    """(batch, metrics): `batch` (a LearnerBatch of `samples`) with tokens / rows masked, or
    (tis) with `tis_weight_BR`; old_logp_BR: pi_old of the continuation tokens."""
    sampler = np.asarray(batch.sampler_logp_BR, np.float32).copy()
    # tokens without a sampler log-prob (refresh seeds, LUFFY traces; NaN among the carried
    # tokens of partial rollouts): weight 1
    known = np.zeros_like(sampler, bool)
    for i, s in enumerate(samples):
        h = len(s.seed_ids)
        known[i, h : len(s.response_ids)] = True
        if s.seed_sampler_logp is not None:  # the sampler's log-probs of carried tokens
            sampler[i, :h] = s.seed_sampler_logp
            known[i, :h] = np.isfinite(s.seed_sampler_logp)
    den = np.where(np.asarray(batch.seed_mask_BR) > 0, batch.behavior_logp_BR, old_logp_BR)
    sampler = np.where(known, sampler, den)
    log_w = log_weights(batch.resp_mask_BR, batch.seed_mask_BR, batch.behavior_logp_BR,
                        old_logp_BR, sampler)
    if mode == "tis":
        w, metrics = tis_weights(batch.resp_mask_BR, log_w, threshold)
        _, stats = correction_mask(batch.resp_mask_BR, log_w, "off", threshold)
        return batch.replace(tis_weight_BR=w), {**stats, **metrics}
    mask, metrics = correction_mask(batch.resp_mask_BR, log_w, mode, threshold)
    return batch.replace(resp_mask_BR=mask), metrics
