"""Thinking Seeds: the refresh cycle and its seed cache.

One step trains one batch of B prompts x G responses:
  * batch 0 of a cycle (step j with j % T = 0): the refresh runs first: pi_b = the policy of the
    step (an Orbax historical checkpoint), its behavior rollouts for the prompts of the cycle's
    batches 1..T-1 in one sampler call, the learner's log-probs and entropies of them under pi_b
    in one statistics pass, their rewards, and a seed per sample (seeds/: the truncation rule or
    an adaptive selector); batch 0 itself is trained on-policy;
  * batches 1..T-1: each sample restarts from its own seed and the current policy writes the
    continuation; seed tokens carry the behavior log-probs the learner computed under pi_b.
The seed cache holds the seeds until their batch is trained (checkpointed beside the train
state); the adaptive selector's state outlives a cycle. Every random choice derives from (run
seed, step, stream, sample index), so ratio = 0 or T = 1 reproduce on-policy DAPO exactly.
"""

from __future__ import annotations

import time

import numpy as np

from tseeds_jax.rl.methods.base import OnPolicy
from tseeds_jax.rl.rollout import samples as samples_lib
from tseeds_jax.rl.rollout import streams
from tseeds_jax.rl.rollout.source import Plan, Policy, StepInfo
from tseeds_jax.seeds import SeedCache, feedback, sample_rngs


class ThinkingSeeds(OnPolicy):
    def __init__(self, ctx):
        super().__init__(ctx)
        self.T = ctx.cfg.seeds.refresh_interval
        self.selector = feedback.make_selector(ctx.cfg.seeds)  # seeds/selection.py
        self.cache = SeedCache()

    def plan(self, j: int, policy: Policy, info: StepInfo) -> Plan:
        if j % self.T == 0:
            t0 = time.perf_counter()
            (prompts, refs), tokens = self._refresh(policy, j)
            info.refresh_s += time.perf_counter() - t0
            info.behavior_tokens += tokens
            prompts, refs, first = self.ctx.local(prompts, refs)
            return Plan(prompts, refs, first, stream=self._stream(j), refreshed=True)
        # this host's seeds (sliced at the refresh); taken from the cache once trained
        sb = self.cache.batches[j]
        seeds = (sb.seed_tokens, sb.seed_logp) + self.ctx.hooks.seed_extras(j)
        return Plan(sb.prompt_ids, sb.references, self.ctx.hosts.index * len(sb.seed_tokens),
                    seeds=seeds, stream=self._stream(j))

    def _refresh(self, policy: Policy, step: int):
        """Snapshot pi_b; behavior rollouts for the cycle's next T - 1 batches; their seeds.
        Returns (batch 0's global prompts and references, tokens generated)."""
        ctx, c = self.ctx, self.ctx.cfg
        b, g, r = ctx.b, ctx.g, ctx.r
        params = policy.sampler  # pi_b: the sampler's copy, for rollouts and statistics alike
        batches = [ctx.prompts.take(b) for _ in range(self.T)]
        ctx.snapshot(step, params)
        # The adaptive selector's state outlives the cycle's seeds.
        tracker = (self.cache.tracker if self.cache.tracker is not None
                   else feedback.new_tracker(self.selector, c.seeds))
        # With partial rollouts a refresh runs when its first batch is admitted, up to
        # max_staleness steps before the previous cycle's last batches are trained: keep theirs.
        self.cache = SeedCache(cycle_start=step, batches=dict(self.cache.batches), tracker=tracker)
        # All T-1 seeded batches in one sampler call and one statistics pass: per-call costs
        # dominate small models, and a bigger call fills more decode slots.
        n_global = b * g
        local = [ctx.local(*batches[j]) for j in range(1, self.T)]
        prompts = [p for lp, _, _ in local for p in lp]
        refs = [x for _, lr, _ in local for x in lr]
        index = [j * n_global + first + i for j, (lp, _, first) in enumerate(local)
                 for i in range(len(lp) * g)]
        behavior = samples_lib.continue_samples(
            ctx.sample_fn, params, prompts, refs, g, r,
            (streams.stream_seed(c.seed, step, streams.BEHAVIOR), index))
        responses = [s.cont_ids for s in behavior]
        n_tokens = sum(len(x) for x in responses)
        tokens, attn = ctx.stats.sequences(behavior)  # behavior samples: no seed
        # Behavior log-probs come from the learner's forward pass under pi_b, not the sampler.
        logp, ent = ctx.stats.logp_entropy(params, tokens, attn, r)
        # Behavior responses are complete: their rewards are known now (seed selection uses them).
        ctx.score(behavior)
        rewards = np.array([s.reward for s in behavior], np.float64)
        n_local = len(behavior) // len(local) if local else 0
        for j, (lp, lr, first) in enumerate(local, start=1):
            rows = slice((j - 1) * n_local, j * n_local)
            rngs = sample_rngs(c.seed, step + j, n_global)[first : first + n_local]
            sb = feedback.select_seed_batch(self.selector, self.cache.tracker, lp, lr,
                                            responses[rows], logp[rows], ent[rows],
                                            rewards[rows], g, rngs)
            self.cache.batches[step + j] = sb
            src = sb.source  # row i of the hooks' arrays: sample i's source rollout
            ctx.hooks.after_seed_batch(step + j, params, tokens[rows][src], attn[rows][src],
                                       sb.seed_lengths)
        return batches[0], n_tokens

    def after_scoring(self, samples, j: int, zero_adv):
        """The seed metrics of a trained batch and the adaptive selector's update (host-local:
        each host reports its own samples)."""
        sb = self.cache.take(j) if j % self.T else None
        g = self.ctx.g
        return feedback.after_scoring(self.cache.tracker, sb, [s.prompt_ids for s in samples[::g]],
                                      [s.reward for s in samples], g, zero_adv)

    def seed_cache(self):
        return self.cache

    def set_seed_cache(self, cache) -> None:
        self.cache = cache
