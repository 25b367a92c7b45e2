"""Peer restart methods as trainer plug-ins: PrefixRL, QuestA, FR3E and CURE (`config.restart`).

Each replaces the trainer's on-policy generation of a step (`Plugin.wrap_collect`) and returns
the step's B x G samples in group order, so advantages, the batch and the loss are the trainer's:
  prefixrl  `prefix_share` of the groups are problems of PrefixRL's pool (seeds/prefix_pool.py)
            whose G samples continue from the pool trace's prefix; the rest are fresh prompts.
  questa    `prefix_share` of the groups continue from a hint: the first hint_start (later
            hint_end) share of the reference solution (data/hints.py).
  fr3e      base first-pass rollouts per prompt, then G - base branches from high-entropy anchors
            of them (rl/branching.py); branch advantages x FR3E's anchor-value factor.
  cure      the same branching without the factor for the first stage1_frac of the steps, then
            the trainer's own on-policy DAPO step.
A prefix is a seed (`Sample.seed_ids`): prefixrl / questa run with seeds.variant "state" (context
only, never trained); fr3e / cure with "state+action" and the current policy's log-probs on the
prefix (on-policy, trained). Branch and pool tokens count in `generated_tokens`.
Single host only (the plug-in draws the whole batch itself).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from tseeds_jax.rl import branching, rollout
from tseeds_jax.rl.errors import ConfigValueError
from tseeds_jax.rl.restart_checks import PREFIX_METHODS

# random streams of the plug-in (distinct from the trainer's 1-3 and SIS's)
POOL, CHOICE, FIRST, BRANCH, ANCHOR = 0x7E10, 0x7E11, 0x7E12, 0x7E13, 0x7E14


def _seed(run_seed: int, step: int, stream: int) -> int:
    return int(np.random.SeedSequence([run_seed, step, stream]).generate_state(1)[0] >> 1)


def restart_plugin(cfg, base: type):
    """The run's plug-in: `RestartHooks` on the trainer's plug-in base class `base`
    (rl/loss_plugins.Plugin, passed in by `LossPlugins.build`: no import circle)."""
    return type("RestartMethod", (RestartHooks, base), {})(cfg)


class RestartHooks:
    """The step's generation for `config.restart.method` (see the module docstring); the hooks
    it overrides of the trainer's plug-in base."""

    def __init__(self, cfg):
        self.cfg, self.rs = cfg, cfg.restart
        self.pool: list[dict[str, Any]] | None = None
        self.factors: list[float] = []
        self.last: dict[str, Any] = {}  # this step's restart/* metrics
        self.last_pool: dict[str, float] = {}  # the pool's, once (PrefixRL, step 0)

    def wrap_collect(self, collect, params):
        trainer = collect.__self__  # the plug-in draws prompts and samples like Trainer._collect

        def wrapped(sampler_params, step):
            if not trainer.hosts.single:
                raise ConfigValueError(f"config.restart.method={self.rs.method!r}: runs on a "
                                       "single host only")
            if self.rs.method == "cure" and step >= round(self.rs.stage1_frac * self.cfg.steps):
                self.factors, self.last = [], {"restart/stage": 2.0}
                return collect(sampler_params, step)  # CURE's second stage: plain DAPO
            t0 = time.perf_counter()
            if self.rs.method in PREFIX_METHODS:
                samples, info = self._prefixed(trainer, sampler_params, step)
            else:
                samples, info = self._branched(trainer, sampler_params, params, step)
            # generation, its statistics pass and scoring (the branches need the first pass's
            # rewards): all in time_rollout
            info["rollout_time"], info["reward_time"] = time.perf_counter() - t0, 0.0
            return self._finish(trainer, params, step, samples, info)

        return wrapped

    # ---- prefixrl / questa ----
    def _prefixed(self, trainer, sampler_params, step):
        c, rs = self.cfg, self.rs
        b, g, r = c.rollout.batch_prompts, c.rollout.group_size, c.rollout.max_response_len
        info = {"behavior_tokens": 0, "refresh_time": 0.0}
        n_pre = int(round(rs.prefix_share * b))
        if rs.method == "prefixrl":
            if self.pool is None:
                info["behavior_tokens"] = self._pool(trainer, sampler_params, step)
            if not self.pool:
                n_pre = 0  # no problem solved within the budget: plain on-policy groups
            prompts, refs = trainer.env.prompts.take(b - n_pre)
            pick = np.random.default_rng(_seed(c.seed, step, CHOICE)).integers(
                len(self.pool), size=n_pre) if n_pre else []
            entries = [self.pool[int(i)] for i in pick]
            prompts = [e["prompt_ids"] for e in entries] + prompts
            refs = [e["reference"] for e in entries] + refs
            prefixes = [prefix_of(e["trace"], rs.prefix_ratio) for e in entries]
        else:
            from tseeds_jax.data import hints

            prompts, refs = trainer.env.prompts.take(b)
            share = hints.hint_share(step, c.steps, rs.hint_start, rs.hint_end, rs.hint_switch)
            prefixes = [hints.hint_tokens(ref, share, trainer.env.prompts.encode_text)[: r - 1]
                        for ref in refs[:n_pre]]
        prefixes += [[] for _ in range(b - len(prefixes))]
        seed_ids = [p for p in prefixes for _ in range(g)]
        seed_logp = [np.zeros(len(p), np.float32) for p in seed_ids]  # masked: context only
        samples = rollout.continue_samples(trainer._sample_fn(), sampler_params, prompts, refs,
                                           g, r, (_seed(c.seed, step, FIRST), 0),
                                           seeds=(seed_ids, seed_logp))
        rollout.score_samples(samples, trainer.env.reward_fn, trainer.env.decode)
        self.last = {"restart/prefixed_group_frac": sum(1 for p in prefixes if p) / max(b, 1),
                     "restart/prefix_tokens": float(np.mean([len(p) for p in prefixes
                                                             if p] or [0.0]))}
        return samples, info

    def _pool(self, trainer, sampler_params, step) -> int:
        """Builds (step 0) or reads (a resumed run) PrefixRL's pool; returns tokens generated."""
        from tseeds_jax.seeds import prefix_pool

        c, rs = self.cfg, self.rs
        if step > 0:
            self.pool, _ = prefix_pool.load(c.run_dir)
            return 0
        prompts, refs = trainer.env.prompts.take(rs.pool_prompts)
        tries = rollout.continue_samples(trainer._sample_fn(), sampler_params, prompts, refs,
                                         rs.pool_budget, c.rollout.max_response_len,
                                         (_seed(c.seed, 0, POOL), 0))
        rollout.score_samples(tries, trainer.env.reward_fn, trainer.env.decode)
        self.pool = prefix_pool.first_successes(tries, rs.pool_budget)
        prefix_pool.save(c.run_dir, self.pool, {"prompts": rs.pool_prompts,
                                                "budget": rs.pool_budget, "seed": c.seed})
        self.last_pool = {"restart/pool_size": float(len(self.pool)),
                          "restart/pool_tokens": float(sum(len(s.cont_ids) for s in tries))}
        return sum(len(s.cont_ids) for s in tries)

    # ---- fr3e / cure ----
    def _branched(self, trainer, sampler_params, params, step):
        c, rs = self.cfg, self.rs
        b, g, r = c.rollout.batch_prompts, c.rollout.group_size, c.rollout.max_response_len
        base, per = branching.split(g, rs.branch_base, rs.branch_points)
        info = {"behavior_tokens": 0, "refresh_time": 0.0}
        prompts, refs = trainer.env.prompts.take(b)
        first = rollout.continue_samples(trainer._sample_fn(), sampler_params, prompts, refs,
                                         base, r, (_seed(c.seed, step, FIRST), 0))
        rollout.score_samples(first, trainer.env.reward_fn, trainer.env.decode)
        tokens, attn = trainer.row_stats.sequences(first)
        logp, ent = trainer.row_stats.logp_entropy(params, tokens, attn, r)
        rng = np.random.default_rng(_seed(c.seed, step, ANCHOR))
        seed_ids, seed_logp, cuts = [], [], []
        for j in range(b):
            rows = range(j * base, (j + 1) * base)
            lengths = [len(first[i].cont_ids) for i in rows]
            for a in branching.anchors(lengths, ent[j * base : (j + 1) * base],
                                       rs.branch_points, rs.branch_top_k, rng):
                src = first[j * base + a.rollout]
                for _ in range(per):
                    seed_ids.append(list(src.cont_ids[: a.cut]))
                    seed_logp.append(logp[j * base + a.rollout, : a.cut].copy())
                    cuts.append(a.cut / max(len(src.cont_ids), 1))
        branches = rollout.continue_samples(trainer._sample_fn(), sampler_params, prompts, refs,
                                            g - base, r, (_seed(c.seed, step, BRANCH), 0),
                                            seeds=(seed_ids, seed_logp))
        rollout.score_samples(branches, trainer.env.reward_fn, trainer.env.decode)
        samples, factors = [], []
        nb = g - base
        for j in range(b):
            mine = branches[j * nb : (j + 1) * nb]
            f = np.ones(nb)
            if rs.method == "fr3e":
                f = branching.fr3e_factors([s.reward for s in first[j * base : (j + 1) * base]],
                                           np.array([s.reward for s in mine]).reshape(-1, per),
                                           rs.value_beta).reshape(-1)
            samples += first[j * base : (j + 1) * base] + mine
            factors += [1.0] * base + f.tolist()
        for i, s in enumerate(samples):
            s.group = i // g
            s.adv_factor = factors[i]
        self.last = {"restart/stage": 1.0, "restart/branch_frac": nb / g,
                     "restart/branch_cut_ratio": float(np.mean(cuts)) if cuts else 0.0,
                     "restart/branch_reward": float(np.mean([s.reward for s in branches]))
                     if branches else 0.0,
                     "restart/first_pass_reward": float(np.mean([s.reward for s in first])),
                     "restart/adv_factor_mean": float(np.mean(factors))}
        return samples, info

    def _finish(self, trainer, params, step, samples, info):
        """Trainer._collect's tail: reward health, group statistics, dynamic sampling."""
        from tseeds_jax.rewards.health import check_rewards
        from tseeds_jax.seeds import feedback

        c = self.cfg
        g = c.rollout.group_size
        check_rewards([s.reward_reason for s in samples])
        info["all_groups"] = group_stats([s.reward for s in samples], g)
        info.update(feedback.after_scoring(None, None, [], [s.reward for s in samples], g,
                                           info["all_groups"].get("zero_adv_group_frac")))
        if c.advantage.filter_groups:
            samples = trainer._filter_groups(params, step, samples, info)
        self.factors = [float(getattr(s, "adv_factor", 1.0)) for s in samples]
        return samples, info

    def prepare_batch(self, params, batch):
        if not self.factors or all(f == 1.0 for f in self.factors):
            return batch
        adv = np.array(batch.advantages_B, np.float32)
        adv[: len(self.factors)] *= np.asarray(self.factors, np.float32)
        return batch.replace(advantages_B=adv)

    def step_metrics(self, samples):
        out = dict(self.last)
        out.update(self.last_pool)
        self.last_pool = {}
        return out


def group_stats(rewards, g: int) -> dict[str, float]:
    """pass@G and the all-equal share of groups of `g` rewards (the trainer's `all_groups`)."""
    if not rewards:
        return {}
    groups = [rewards[i : i + g] for i in range(0, len(rewards), g)]
    return {"pass_at_G": float(np.mean([max(x) >= 1.0 for x in groups])),
            "zero_adv_group_frac": float(np.mean([max(x) == min(x) for x in groups]))}


def prefix_of(trace, ratio):
    from tseeds_jax.seeds import prefix_pool

    return prefix_pool.prefix(trace, ratio)
