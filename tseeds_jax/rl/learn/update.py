"""One training step's learning: advantages, the batch, what the learner's hooks add to it
(pi_old, the top-K proposal), rollout correction, the reference policy's log-probs, the update,
and the step's metrics.

Letters: N samples of this host's batch, R response width.
"""

from __future__ import annotations

import time
from typing import Any

import jax
import numpy as np

from tseeds_jax.rl.learn import batch as batch_lib
from tseeds_jax.rl.learn import correction
from tseeds_jax.rl.rollout import stats
from tseeds_jax.rl.rollout.source import StepInfo
from tseeds_jax.rl.run import hosts as hosts_lib


class Update:
    def __init__(self, cfg, learner, row_stats, hooks, hosts, *, mesh=None, ref_params=None,
                 weight_sync=None):
        """mesh: the training mesh (a global batch of every host's rows is laid out on it);
        weight_sync: the decode layout's weight sync (its reshard seconds are reported)."""
        self.cfg, self.learner, self.stats, self.hooks = cfg, learner, row_stats, hooks
        self.hosts, self.mesh, self.ref_params = hosts, mesh, ref_params
        self.weight_sync = weight_sync

    def __call__(self, state, samples, info: StepInfo, params, step: int):
        """(new state, metrics). params: the learner's parameters of this step as the statistics
        passes read them (the sampler placement's copy)."""
        c = self.cfg
        g, r = c.rollout.group_size, c.rollout.max_response_len
        adv = (batch_lib.sample_advantages(samples, norm_by_std=c.advantage.norm_by_std,
                                           max_response_len=r,
                                           overlong_buffer=c.advantage.overlong_buffer,
                                           overlong_penalty=c.advantage.overlong_penalty)
               if samples else np.zeros(0))
        batch = batch_lib.build_batch(samples, adv, prompt_width=self.stats.prompt_width,
                                      response_width=r, pad_id=self.stats.pad_id,
                                      num_rows=c.rollout.batch_prompts * g // self.hosts.count,
                                      top_k=self.learner.proposal_top_k)
        t0 = time.perf_counter()
        batch = self.hooks.prepare_batch(params, batch)  # old log-probs, top-K proposals
        rc_metrics = {}
        if c.stale.correction != "off":
            batch, rc_metrics = self._correct(params, batch, samples)
        if c.loss.kl_coef:
            batch = batch.replace(ref_logp_BR=self.stats.reference(
                self.ref_params, batch.tokens_BT, batch.attn_mask_BT, r)[0])
        if not self.hosts.single:
            batch = hosts_lib.to_global(batch, self.mesh, self.hosts)
        state, lmetrics = self.learner.update(state, batch, **self.hooks.update_kwargs(step))
        lmetrics = jax.device_get(lmetrics)
        self.hooks.after_update(lmetrics)
        learner_time = time.perf_counter() - t0
        metrics: dict[str, Any] = stats.sample_metrics(
            stats.gather_samples(samples, self.hosts), g)
        metrics.update(lmetrics)
        metrics["method"] = c.method_label
        metrics.update(info.to_metrics())
        metrics.update(rc_metrics)
        metrics.update(time_learner=learner_time,
                       generated_tokens=sum(len(s.cont_ids) for s in samples)
                       + info.behavior_tokens)
        if self.weight_sync is not None:  # the decode layout's reshards (inside time_rollout)
            metrics["time_weight_sync"] = self.weight_sync.take_seconds()
        return state, metrics

    def _correct(self, params, batch, samples):
        """Rollout correction (stale.correction): masks tokens / rows whose weight pi_den /
        pi_sampler leaves [1/t, t], or ("tis") gives the loss the weights min(w, t)
        (learn/correction.py); (batch, metrics)."""
        c = self.cfg
        if self.learner.old_logp_mode == "recompute":
            old = batch.old_logp_BR  # filled by the recompute pass or the lag's annotation
        else:  # the shortcut: pi_old is these parameters
            old = self.stats.logp_entropy(params, batch.tokens_BT, batch.attn_mask_BT,
                                          c.rollout.max_response_len)[0]
        return correction.correct_batch(batch, samples, old, c.stale.correction,
                                        c.stale.correction_threshold)
