"""A generation method: how batch j is planned (its prompts, where each sample starts) and
generated, and what it reports once its rewards are known. `OnPolicy` is the base every method
extends; `MethodSource` runs a method behind the batch-source seam (rl/rollout/source.py).

Letters: B prompts of a batch (this host's share), G samples per prompt, N = B G.

Methods (one module each): on-policy (here), Thinking Seeds (seeds.py: refresh cycle and seed
cache), LUFFY's traces (traces.py: a trace replaces each group's first sample), PrefixRL and
QuestA (prefix.py: a prefix as context), FR3E and CURE (branch.py: branches from the step's own
rollouts). A method touches the run only through its `SourceContext`.
"""

from __future__ import annotations

import time
from typing import Any

from tseeds_jax.rl.rollout import stats, streams
from tseeds_jax.rl.rollout.source import BatchSource, Plan, Policy, SourceContext, StepInfo


class OnPolicy:
    """Batch j: the next B prompts of the stream, G responses each by the current policy."""

    def __init__(self, ctx: SourceContext):
        self.ctx = ctx

    # ---- planning and generation ----
    def plan(self, j: int, policy: Policy, info: StepInfo) -> Plan:
        """Batch j's prompts (drawn now from the prompt stream) and where its samples start;
        time and tokens of work the planning did (a refresh) go into `info`."""
        prompts, refs, first = self.ctx.take_local(self.ctx.b)
        return Plan(prompts, refs, first, stream=self._stream(j))

    def generate(self, plan: Plan, j: int, policy: Policy, info: StepInfo) -> list:
        """The samples of `plan`: one sampler call; its decode-slot occupancy into `info`."""
        t0 = time.perf_counter()
        samples = self.ctx.generate(policy, plan)
        info.rollout_s += time.perf_counter() - t0
        used, spent = stats.occupancy([len(x.cont_ids) for x in samples if not x.offpolicy],
                                      self.ctx.cfg.hardware.sampler_slots)
        info.slot_counts, info.slot_occupancy = (used, spent), used / max(spent, 1)
        return samples

    def topup(self, j: int, round_: int) -> Plan:
        """Dynamic sampling's extra round `round_` (>= 1) of batch j: fresh prompts, on-policy."""
        prompts, refs, first = self.ctx.take_local(self.ctx.b)
        seed = streams.stream_seed(self.ctx.cfg.seed, j, streams.TOPUP, round_)
        return Plan(prompts, refs, first, stream=seed)

    def _stream(self, j: int) -> int:
        return streams.stream_seed(self.ctx.cfg.seed, j, streams.ROLLOUT)

    # ---- after scoring ----
    def after_scoring(self, samples, j: int, zero_adv: float | None) -> dict[str, Any]:
        """Metrics of batch j once scored (collective part of the tail: every host calls it)."""
        return {} if zero_adv is None else {"zero_adv_group_frac/onpolicy": zero_adv}

    def sample_metrics(self, samples) -> dict[str, Any]:
        """Metrics of the samples that will be trained (after dynamic sampling)."""
        return {}

    # ---- cross-step state ----
    def seed_cache(self):
        """The refresh cycle's seed cache (checkpointed beside the train state), or None."""
        return None

    def set_seed_cache(self, cache) -> None:
        pass

    def state(self) -> dict[str, tuple[Any, Any]]:
        return {}

    def load(self, extra: dict[str, tuple[Any, Any]]) -> None:
        pass


class MethodSource(BatchSource):
    """A method behind the seam: plan batch `step`, generate it, run the collection tail."""

    def __init__(self, method: OnPolicy, finish):
        self.method, self.finish = method, finish

    def next(self, step: int, policy: Policy):
        info = StepInfo()
        plan = self.method.plan(step, policy, info)
        samples = self.method.generate(plan, step, policy, info)
        return self.finish(samples, info, policy, step)

    def state(self):
        return self.method.state()

    def load(self, extra):
        self.method.load(extra)
