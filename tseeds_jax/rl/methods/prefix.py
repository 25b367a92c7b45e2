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

from tseeds_jax.data import hints
from tseeds_jax.rl.methods import registry
from tseeds_jax.rl.methods.base import OnPolicy
from tseeds_jax.rl.rollout import samples as samples_lib
from tseeds_jax.rl.rollout import streams
from tseeds_jax.rl.rollout.source import Plan, Policy, StepInfo
from tseeds_jax.rl.run import hosts as hosts_lib
from tseeds_jax.seeds import prefix_pool

POOL, CHOICE = 0x7E10, 0x7E11  # PrefixRL's streams: its pool (step 0), its pick of pool problems


class Prefixed(OnPolicy):
    """A share of each batch's groups continue from a prefix given as context. Each method of
    the family defines `_prefixes(j, policy, info, n_pre)`: (prompts, references, prefixes) of
    batch j's B groups, the first `n_pre` prefixed (PrefixRL's pool, QuestA's hints)."""

    def __init__(self, ctx):
        super().__init__(ctx)
        self.cfg, self.rs = ctx.cfg, ctx.cfg.restart
        self.last: dict[str, float] = {}  # this step's restart/* metrics

    def plan(self, j: int, policy: Policy, info: StepInfo) -> Plan:
        ctx, c, rs = self.ctx, self.cfg, self.rs
        b, g = ctx.b, ctx.g
        prompts, refs, prefixes = self._prefixes(j, policy, info, int(round(rs.prefix_share * b)))
        prefixes += [[] for _ in range(b - len(prefixes))]
        self.last = {"restart/prefixed_group_frac": sum(1 for p in prefixes if p) / max(b, 1),
                     "restart/prefix_tokens": float(np.mean([len(p) for p in prefixes
                                                             if p] or [0.0]))}
        sl = ctx.hosts.slice(b, "rollout.batch_prompts")  # this host's groups
        seed_ids = [p for p in prefixes[sl] for _ in range(g)]
        seed_logp = [np.zeros(len(p), np.float32) for p in seed_ids]  # masked: context only
        return Plan(prompts[sl], refs[sl], sl.start * g, seeds=(seed_ids, seed_logp),
                    stream=streams.method_seed(c.seed, j, streams.FIRST_PASS))

    def sample_metrics(self, samples):
        return dict(self.last)


class PrefixRL(Prefixed):
    """Pool problems continued from the first `prefix_ratio` of their successful trace."""

    def __init__(self, ctx):
        super().__init__(ctx)
        self.pool: list[dict] | None = None
        self.last_pool: dict[str, float] = {}  # the pool's metrics, once (step 0)

    def _prefixes(self, j, policy, info, n_pre):
        ctx, c, rs = self.ctx, self.cfg, self.rs
        if self.pool is None:
            info.behavior_tokens += self._pool(policy, j)
        if not self.pool:
            n_pre = 0  # no problem solved within the budget: plain on-policy groups
        prompts, refs = ctx.prompts.take(ctx.b - n_pre)
        pick = np.random.default_rng(streams.method_seed(c.seed, j, CHOICE)).integers(
            len(self.pool), size=n_pre) if n_pre else []
        entries = [self.pool[int(i)] for i in pick]
        prompts = [e["prompt_ids"] for e in entries] + prompts
        refs = [e["reference"] for e in entries] + refs
        return prompts, refs, [prefix_pool.prefix(e["trace"], rs.prefix_ratio) for e in entries]

    def _pool(self, policy: Policy, step: int) -> int:
        """Builds (step 0) or reads (a resumed run) PrefixRL's pool; returns tokens generated."""
        ctx, c, rs = self.ctx, self.cfg, self.rs
        if step > 0:
            self.pool, _ = prefix_pool.load(c.run_dir)
            return 0
        prompts, refs = ctx.prompts.take(rs.pool_prompts)
        sl = ctx.hosts.slice(rs.pool_prompts, "restart.pool_prompts")  # this host's share
        tries = samples_lib.continue_samples(
            ctx.sample_fn, policy.sampler, prompts[sl], refs[sl], rs.pool_budget, ctx.r,
            (streams.method_seed(c.seed, 0, POOL), sl.start * rs.pool_budget))
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


class QuestA(Prefixed):
    """Every prefixed group continues from a hint: the head of the reference solution."""

    def _prefixes(self, j, policy, info, n_pre):
        ctx, c, rs = self.ctx, self.cfg, self.rs
        prompts, refs = ctx.prompts.take(ctx.b)
        share = hints.hint_share(j, c.steps, rs.hint_start, rs.hint_end, rs.hint_switch)
        return prompts, refs, [hints.hint_tokens(ref, share, ctx.prompts.encode_text)[: ctx.r - 1]
                               for ref in refs[:n_pre]]


FEATURE = registry.Feature("prefix", "PrefixRL / QuestA", registry.REFUSED_BY_ALL)

registry.register(registry.MethodSpec(
    name="prefixrl", label="PrefixRL", description="PrefixRL (pool prefixes, half the groups)",
    feature=FEATURE, variant="state", route=PrefixRL,
    # half of each batch's groups are pool problems continued from the first half of a
    # successful base-model trace (pool: 8 samples per problem, once per run)
    presets=lambda scale: {"restart.prefix_share": 0.5, "restart.prefix_ratio": 0.5,
                           "restart.pool_budget": 8,
                           "restart.pool_prompts": 64 if scale == "tiny" else 2048},
    streams={"PREFIX_POOL": POOL, "PREFIX_CHOICE": CHOICE}))
registry.register(registry.MethodSpec(
    name="questa", label="QuestA", description="QuestA (hints 50% -> 25%)",
    feature=FEATURE, variant="state", route=QuestA,
    # every group continues from a hint: 50% of the reference solution, 25% from mid-run
    # (QuestA trains on augmented, hinted problems only)
    presets=lambda scale: {"restart.prefix_share": 1.0, "restart.hint_start": 0.5,
                           "restart.hint_end": 0.25, "restart.hint_switch": 0.5}))
