"""The one collection tail every route's batch goes through (rollout/source.py):

  1. score the samples (unless the route scored them itself: a branch method needs its
     first pass's rewards before it branches);
  2. check the rewards: a sandbox that runs nothing stops the run (rewards/health.py);
  3. batch-wide statistics over every host's samples: pass@G, the all-equal share of groups,
     a pool's counts merged over hosts, and the method's feedback (the seed metrics and the
     adaptive selector's update); left for the main thread when overlap runs on several hosts;
  4. DAPO's dynamic sampling (`advantage.filter_groups`): keep groups with unequal rewards and
     top up with further rounds of the method's on-policy generation;
  5. the method's metrics of the trained samples (LUFFY's trace share, a restart method's).
"""

from __future__ import annotations

import time

import numpy as np

from tseeds_jax.rewards.health import check_rewards
from tseeds_jax.rl.rollout import pool_tallies, stats
from tseeds_jax.rl.rollout.source import Policy, StepInfo
from tseeds_jax.rl.run import hosts as hosts_lib


class Finish:
    def __init__(self, ctx, method, *, defer_collective: bool = False):
        """method: the route's method (rl/methods/base.py): `after_scoring`, `topup`,
        `sample_metrics`. defer_collective: leave step 3 to `collective` (StepInfo.pending)."""
        self.ctx, self.method, self.defer = ctx, method, defer_collective

    def __call__(self, samples, info: StepInfo, policy: Policy, step: int):
        """(samples, info) of batch `step`, finished."""
        if not info.scored:
            t0 = time.perf_counter()
            self.ctx.score(samples)
            info.reward_s += time.perf_counter() - t0
            info.scored = True
        check_rewards([s.reward_reason for s in samples])
        if self.defer:
            info.pending = True
        else:
            self.collective(samples, info, step)
        if self.ctx.cfg.advantage.filter_groups:
            samples = self._filter_groups(policy, step, samples, info)
        info.metrics.update(self.method.sample_metrics(samples))
        return samples, info

    def collective(self, samples, info: StepInfo, step: int) -> None:
        """Step 3: collective on several hosts (every host calls it for every batch)."""
        hosts, g = self.ctx.hosts, self.ctx.g
        tallies, info.tallies, info.pending = info.tallies, None, False
        if tallies is not None and not hosts.single:  # the pool over every host's share
            every = hosts_lib.allgather_objects(
                ({k: info.metrics[k] for k in pool_tallies.MERGED}, tallies), hosts)
            info.metrics.update(pool_tallies.merge_hosts([a for a, _ in every],
                                                         [b for _, b in every]))
            info.slot_occupancy = info.metrics.pop("slot_occupancy")
        elif info.slot_counts is not None and not hosts.single:  # every host's decode slots
            used, spent = np.sum(hosts_lib.allgather_objects(info.slot_counts, hosts), axis=0)
            info.slot_occupancy = float(used / max(spent, 1))
        groups = stats.group_stats(stats.gather_samples(samples, hosts), g)
        info.metrics.update(groups)
        info.metrics.update(self.method.after_scoring(samples, step,
                                                      groups.get("zero_adv_group_frac")))

    def _filter_groups(self, policy: Policy, step: int, samples, info: StepInfo):
        """DAPO dynamic sampling: keep groups with unequal rewards; top up with on-policy groups.

        The hosts decide together: every host draws another round while the hosts *together*
        keep fewer groups than the global batch (each round samples collectively and draws from
        the shared prompt stream, so all must run the same rounds), and the kept groups are dealt
        out as one process drawing the whole batch would keep them (`hosts.share_out`)."""
        ctx = self.ctx
        g, n_hosts = ctx.g, ctx.hosts.count
        quota = len(samples)  # this host's share of the batch (the same on every host)
        rounds = [stats.keep_varied_groups(samples, g)]
        counts = [ctx.per_host(len(rounds[0]))]
        while (sum(int(x.sum()) for x in counts) < quota * n_hosts
               and len(rounds) < ctx.cfg.advantage.max_gen_batches):
            extra = ctx.generate(policy, self.method.topup(step, len(rounds)))
            ctx.score(extra)
            rounds.append(stats.keep_varied_groups(extra, g))
            counts.append(ctx.per_host(len(rounds[-1])))
        kept = hosts_lib.share_out(rounds, counts, quota, ctx.hosts)
        for i, s in enumerate(kept):  # renumber groups densely for the advantage computation
            s.group = i // g
        info.metrics["gen_rounds"] = len(rounds)
        info.metrics["kept_groups"] = min(sum(int(x.sum()) for x in counts), quota * n_hosts) // g
        return kept
