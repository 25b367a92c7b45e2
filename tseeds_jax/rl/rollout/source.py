"""The seam between generation and learning: a batch source with one signature.

    source.next(step, policy) -> (samples, StepInfo)     batch `step`, finished (scored, checked,
                                                         its batch-wide statistics gathered)
    source.settle()                                      joins work started for later steps
                                                         (overlap); its timing metrics
    source.state() / load()                              cross-step state for checkpoints

Every generation route is one source, chosen once when the run is built (rl/methods/routes.py):
a method (on-policy, Thinking Seeds, LUFFY traces, PrefixRL / QuestA, FR3E / CURE) plans and
generates a batch, `MethodSource` runs it and the one collection tail (rollout/finish.py); the
partial-rollout pool (rollout/pool.py) generates the method's planned batches interruptibly
instead; M2PO's lag (rollout/lag.py) wraps either and generates ahead, in a worker thread with
overlap. A source sees the run through a `SourceContext` (sampler, prompts, rewards, statistics
passes, the learner's per-sample hooks, hosts), never the trainer.

Letters: B prompts of a batch (this host's share), G samples per prompt, N = B G.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from tseeds_jax.rl.rollout import samples as samples_lib
from tseeds_jax.rl.rollout.samples import Sample


@dataclasses.dataclass(frozen=True)
class Policy:
    """The parameters a batch is generated with: the sampler's (cast to `model.sampler_dtype`),
    the learner's for statistics passes, and their version (the step they are current at). With
    overlap both are a private copy that the donating update cannot invalidate."""

    sampler: Any
    stats: Any
    version: int


@dataclasses.dataclass
class StepInfo:
    """What a route reports of one batch besides its samples (`to_metrics` names it once).

    rollout_s / reward_s / refresh_s: seconds of generation (statistics passes of the route
    included), of scoring and of refreshes (pi_b's behavior rollouts). behavior_tokens: tokens
    decoded this step that are not a trained continuation (behavior rollouts, a pool's carried
    tokens, PrefixRL's pool). slot_occupancy: decoded tokens / slot-steps of the step's
    generation, over every host's (slot_counts: this host's (tokens, slot-steps), which the tail
    adds up over hosts). metrics: the route's own (group statistics, seed feedback, pool and lag
    metrics, dynamic sampling). scored: the route scored the samples itself. tallies: a pool's
    per-host counts, merged over hosts by the tail. pending: the batch-wide statistics are left
    for the main thread (overlap on several hosts)."""

    rollout_s: float = 0.0
    reward_s: float = 0.0
    refresh_s: float = 0.0
    behavior_tokens: int = 0
    slot_occupancy: float | None = None
    slot_counts: tuple[int, int] | None = None
    metrics: dict[str, Any] = dataclasses.field(default_factory=dict)
    scored: bool = False
    tallies: dict[str, Any] | None = None
    pending: bool = False

    def to_metrics(self) -> dict[str, Any]:
        out = {"behavior_tokens": self.behavior_tokens, "time_rollout": self.rollout_s,
               "time_reward": self.reward_s, "time_refresh": self.refresh_s}
        if self.slot_occupancy is not None:
            out["slot_occupancy"] = self.slot_occupancy
        out.update(self.metrics)
        return out

    # A queued batch's info is checkpointed (rollout/lag.py) in the form of the info dicts that
    # run dirs written before this class hold, so that they resume.
    def to_json(self) -> dict[str, Any]:
        out = {"behavior_tokens": self.behavior_tokens, "rollout_time": self.rollout_s,
               "reward_time": self.reward_s, "refresh_time": self.refresh_s, **self.metrics}
        if self.slot_occupancy is not None:
            out["slot_occupancy"] = self.slot_occupancy
        if self.slot_counts is not None:
            out["slot_counts"] = list(self.slot_counts)
        if self.tallies is not None:
            out["partial_tallies"] = self.tallies
        if self.pending:
            out["host_stats_later"] = True
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> StepInfo:
        d = dict(d)
        info = cls(rollout_s=float(d.pop("rollout_time", 0.0)),
                   reward_s=float(d.pop("reward_time", 0.0)),
                   refresh_s=float(d.pop("refresh_time", 0.0)),
                   behavior_tokens=int(d.pop("behavior_tokens", 0)),
                   slot_occupancy=d.pop("slot_occupancy", None), scored=True,
                   slot_counts=tuple(d.pop("slot_counts")) if "slot_counts" in d else None,
                   tallies=d.pop("partial_tallies", None),
                   pending=bool(d.pop("host_stats_later", False)))
        info.metrics.update(d.pop("all_groups", {}))
        info.metrics.update(d)
        return info


@dataclasses.dataclass
class Plan:
    """Batch j before generation: this host's prompts and how each of their samples starts.

    first: the global index of this host's first sample (request streams follow it). seeds:
    (N token lists, N log-prob arrays[, N top-K pairs]) that the samples continue from (a
    refresh's seeds, a restart method's prefixes), or None. traces: LUFFY's trace (or None) per
    prompt, replacing its group's first sample; stop_ids: the token ids that end a complete
    trace. stream: the seed of the generation's random stream. refreshed: planning the batch ran
    a refresh."""

    prompts: list[list[int]]
    references: list[Any]
    first: int = 0
    seeds: tuple | None = None
    traces: list | None = None
    stop_ids: tuple[int, ...] = ()
    stream: int = 0
    refreshed: bool = False


class SourceContext:
    """What a batch source may use of the run. It reads the run's env (rl/trainer.py `TrainEnv`)
    at each use, so that an env field replaced after the run was built (a demo's prompt stream)
    is the one used: `sample_fn` (the sampler, collective over the hosts when its parameters span
    them: `collective_sampler`), `prompts` (the prompt stream: `take(n)`, global: every host
    draws the same), `reward_fn`, `decode`; `snapshot(step, params)` keeps pi_b as a historical
    checkpoint. `stats`: the learner's no-grad row passes (rl/learn/row_pass.py); `hooks`: the
    learner's per-sample hooks (rl/learn/hooks.py)."""

    def __init__(self, cfg, *, env, hosts, stats, hooks, collective_sampler: bool = False):
        self.cfg, self.env, self.hosts = cfg, env, hosts
        self.stats, self.hooks, self.collective_sampler = stats, hooks, collective_sampler
        r = cfg.rollout
        self.b, self.g, self.r = r.batch_prompts, r.group_size, r.max_response_len

    @property
    def sample_fn(self):
        if not self.collective_sampler:
            return self.env.sample_fn
        from tseeds_jax.rl.run import hosts as hosts_lib

        return hosts_lib.gathered_sample_fn(self.env.sample_fn, self.hosts)

    @property
    def prompts(self):
        return self.env.prompts

    @property
    def reward_fn(self):
        return self.env.reward_fn

    @property
    def decode(self):
        return self.env.decode

    def snapshot(self, step: int, params) -> None:
        ck = getattr(self.env, "checkpointer", None)
        if ck is not None:
            ck.save_behavior_snapshot(step, params)

    def local(self, prompts, refs) -> tuple[list, list, int]:
        """This host's contiguous slice of a global batch of prompts, and its first sample index."""
        sl = self.hosts.slice(len(prompts), "rollout.batch_prompts")
        return prompts[sl], refs[sl], sl.start * self.g

    def take_local(self, n: int) -> tuple[list, list, int]:
        """The next n prompts of the stream (every host draws them), this host's slice."""
        return self.local(*self.prompts.take(n))

    def generate(self, policy: Policy, plan: Plan, group_size: int | None = None) -> list[Sample]:
        """The samples of `plan`: one sampler call, request i's stream (plan.stream,
        plan.first + i); `group_size` samples per prompt (default G)."""
        return samples_lib.continue_samples(
            self.sample_fn, policy.sampler, plan.prompts, plan.references,
            group_size or self.g, self.r, (plan.stream, plan.first), seeds=plan.seeds,
            offpolicy=plan.traces, stop_ids=plan.stop_ids)

    def score(self, samples: list[Sample]) -> None:
        samples_lib.score_samples(samples, self.reward_fn, self.decode)

    def per_host(self, n: int) -> np.ndarray:
        """[hosts] every host's value of the count `n` (collective on several hosts)."""
        from tseeds_jax.rl.run import hosts as hosts_lib

        return hosts_lib.gather_rows(np.array([n], np.int32), self.hosts)


class BatchSource:
    """One signature for every generation route (module docstring). `keeps_params`: generation
    goes on after `next` returns (overlap), so the policy given must be a private copy."""

    keeps_params = False

    def next(self, step: int, policy: Policy) -> tuple[list[Sample], StepInfo]:
        raise NotImplementedError(f"{type(self).__name__} must implement next(step, policy)")

    def settle(self, *, reraise: bool = True) -> dict[str, float]:
        return {}

    def state(self) -> dict[str, tuple[Any, Any]]:
        """{checkpoint key: (arrays tree, json meta or None)} of the cross-step state."""
        return {}

    def load(self, extra: dict[str, tuple[Any, Any]]) -> None:
        pass

    def _wrapped(self):
        return getattr(self, "inner", None) or getattr(self, "method", None)

    def seed_cache(self):
        """The refresh cycle's seed cache (checkpointed beside the train state), or None."""
        inner = self._wrapped()
        return None if inner is None else inner.seed_cache()

    def set_seed_cache(self, cache) -> None:
        inner = self._wrapped()
        if inner is not None:
            inner.set_seed_cache(cache)
