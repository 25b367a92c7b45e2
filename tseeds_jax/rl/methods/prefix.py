"""PrefixRL and QuestA: `prefix_share` of each batch's groups continue from a prefix that is
context only (seeds.variant "state": never trained), the other groups are on-policy.

  prefixrl  the groups' problems come from PrefixRL's pool (seeds/prefix_pool.py: one successful
            trace per problem of the initial policy, by rejection sampling at step 0), each
            continuing from the first `prefix_ratio` of its trace; the rest are fresh prompts.
  questa    every group continues from a hint: the first hint_start (later hint_end) share of
            the reference solution's tokens (data/hints.py).

A prefix is a seed (`Sample.seed_ids`) with zero log-probs (masked out of the loss). The pool's
tokens count in the step's `behavior_tokens` (step 0). Planned batches work behind the partial
rollout pool too: its prefix becomes carried tokens (context) that the pool continues.

Several hosts: every host draws the whole batch (the pool's picks, the hints) from the shared
streams and keeps its contiguous share of the groups, with global request indices; PrefixRL's
pool is sampled by every host for its share of the pool prompts and gathered, so every host
holds the pool one process builds.
"""

from __future__ import annotations

import numpy as np

from tseeds_jax.rl.methods.base import OnPolicy
from tseeds_jax.rl.rollout import samples as samples_lib
from tseeds_jax.rl.rollout import streams
from tseeds_jax.rl.rollout.source import Plan, Policy, StepInfo
from tseeds_jax.rl.run import hosts as hosts_lib


class Prefixed(OnPolicy):
    def __init__(self, ctx):
        super().__init__(ctx)
        self.cfg, self.rs = ctx.cfg, ctx.cfg.restart
        self.pool: list[dict] | None = None
        self.last: dict[str, float] = {}  # this step's restart/* metrics
        self.last_pool: dict[str, float] = {}  # the pool's, once (PrefixRL, step 0)

    def plan(self, j: int, policy: Policy, info: StepInfo) -> Plan:
        ctx, c, rs = self.ctx, self.cfg, self.rs
        b, g, r = ctx.b, ctx.g, ctx.r
        n_pre = int(round(rs.prefix_share * b))
        if rs.method == "prefixrl":
            if self.pool is None:
                info.behavior_tokens += self._pool(policy, j)
            if not self.pool:
                n_pre = 0  # no problem solved within the budget: plain on-policy groups
            prompts, refs = ctx.prompts.take(b - n_pre)
            pick = np.random.default_rng(
                streams.method_seed(c.seed, j, streams.PREFIX_CHOICE)).integers(
                    len(self.pool), size=n_pre) if n_pre else []
            entries = [self.pool[int(i)] for i in pick]
            prompts = [e["prompt_ids"] for e in entries] + prompts
            refs = [e["reference"] for e in entries] + refs
            prefixes = [_prefix(e["trace"], rs.prefix_ratio) for e in entries]
        else:
            from tseeds_jax.data import hints

            prompts, refs = ctx.prompts.take(b)
            share = hints.hint_share(j, c.steps, rs.hint_start, rs.hint_end, rs.hint_switch)
            prefixes = [hints.hint_tokens(ref, share, ctx.prompts.encode_text)[: r - 1]
                        for ref in refs[:n_pre]]
        prefixes += [[] for _ in range(b - len(prefixes))]
        self.last = {"restart/prefixed_group_frac": sum(1 for p in prefixes if p) / max(b, 1),
                     "restart/prefix_tokens": float(np.mean([len(p) for p in prefixes
                                                             if p] or [0.0]))}
        sl = ctx.hosts.slice(b, "rollout.batch_prompts")  # this host's groups
        seed_ids = [p for p in prefixes[sl] for _ in range(g)]
        seed_logp = [np.zeros(len(p), np.float32) for p in seed_ids]  # masked: context only
        return Plan(prompts[sl], refs[sl], sl.start * g, seeds=(seed_ids, seed_logp),
                    stream=streams.method_seed(c.seed, j, streams.FIRST_PASS))

    def _pool(self, policy: Policy, step: int) -> int:
        """Builds (step 0) or reads (a resumed run) PrefixRL's pool; returns tokens generated."""
        from tseeds_jax.seeds import prefix_pool

        ctx, c, rs = self.ctx, self.cfg, self.rs
        if step > 0:
            self.pool, _ = prefix_pool.load(c.run_dir)
            return 0
        prompts, refs = ctx.prompts.take(rs.pool_prompts)
        sl = ctx.hosts.slice(rs.pool_prompts, "restart.pool_prompts")  # this host's share
        tries = samples_lib.continue_samples(
            ctx.sample_fn, policy.sampler, prompts[sl], refs[sl], rs.pool_budget, ctx.r,
            (streams.method_seed(c.seed, 0, streams.PREFIX_POOL), sl.start * rs.pool_budget))
        ctx.score(tries)
        mine = (prefix_pool.first_successes(tries, rs.pool_budget),
                sum(len(s.cont_ids) for s in tries))
        every = [mine] if ctx.hosts.single else hosts_lib.allgather_objects(mine, ctx.hosts)
        self.pool = [entry for pool, _ in every for entry in pool]  # in prompt order
        prefix_pool.save(c.run_dir, self.pool, {"prompts": rs.pool_prompts,
                                                "budget": rs.pool_budget, "seed": c.seed})
        self.last_pool = {"restart/pool_size": float(len(self.pool)),
                          "restart/pool_tokens": float(sum(n for _, n in every))}
        return mine[1]

    def sample_metrics(self, samples):
        out = {**self.last, **self.last_pool}
        self.last_pool = {}
        return out


def _prefix(trace, ratio):
    from tseeds_jax.seeds import prefix_pool

    return prefix_pool.prefix(trace, ratio)
