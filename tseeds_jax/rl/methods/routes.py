"""The run's route, chosen once when the run is built: a method, optionally generated through the
partial-rollout pool, optionally behind M2PO's lag (with or without overlap).

    method   on-policy | Thinking Seeds (T > 1) | a restart method (its registry entry's
             route: PrefixRL / QuestA, FR3E / CURE), [with LUFFY's traces]
    source   MethodSource(method)                     synchronous: plan, generate, finish
             | PoolSource(method)                     stale.partial_tokens > 0
    wrapper  [Lagged(source, stale.steps, overlap)]   stale.steps > 0

config/compat.py's table says which of these combine; this module only composes them.
"""

from __future__ import annotations

from tseeds_jax.rl.methods import registry
from tseeds_jax.rl.methods.base import MethodSource, OnPolicy
from tseeds_jax.rl.methods.seeds import ThinkingSeeds
from tseeds_jax.rl.methods.traces import WithTraces
from tseeds_jax.rl.rollout.finish import Finish
from tseeds_jax.rl.rollout.lag import Lagged
from tseeds_jax.rl.rollout.pool import PartialRollouts, PoolSource
from tseeds_jax.rl.rollout.source import BatchSource, SourceContext


def build_method(cfg, ctx: SourceContext, traces=None):
    """The run's generation method; `traces`: LUFFY's trace source (rl/methods/traces.py)."""
    if cfg.restart.method:
        method = registry.get(cfg.restart.method).route(ctx)
    elif cfg.seeded:
        method = ThinkingSeeds(ctx)
    else:
        method = OnPolicy(ctx)
    return method if traces is None else WithTraces(method, traces)


def _pool(cfg, ctx: SourceContext) -> PartialRollouts:
    """The partial-rollout pool of this host: its share of every batch's groups; the hosts
    agree on each extra sampler call when sampling or statistics span them."""
    h = ctx.hosts
    if h.single:
        return PartialRollouts(cfg, ctx.stats)
    h.slice(cfg.rollout.batch_prompts, "rollout.batch_prompts")  # divisible, or a clear error
    if cfg.stale.groups_in_flight:
        h.slice(cfg.stale.groups_in_flight, "stale.groups_in_flight")
    if cfg.hardware.sampler_placement not in ("sharded", "decode"):
        return PartialRollouts(cfg, ctx.stats, host=h.index, hosts=h.count)
    return PartialRollouts(cfg, ctx.stats, host=h.index, hosts=h.count,
                           any_host=lambda flag: bool(ctx.per_host(int(flag)).max()),
                           collective_stats=True)


def build_source(cfg, ctx: SourceContext, *, traces=None, lag: int | None = None) -> BatchSource:
    """The run's batch source. lag: wrap in M2PO's lag with this many steps instead of
    `stale.steps` (a test runs the lag machinery with lag 0)."""
    wrap = cfg.stale.steps > 0 if lag is None else True
    lag = cfg.stale.steps if lag is None else lag
    method = build_method(cfg, ctx, traces)
    # Overlap on several hosts: the worker thread makes no collective call; the batch-wide
    # statistics of its batches are gathered by the main thread (Lagged.next).
    finish = Finish(ctx, method, defer_collective=cfg.stale.overlap and not ctx.hosts.single)
    if cfg.stale.partial_tokens:
        stand_in = ctx.hosts.single and type(method) is OnPolicy
        source: BatchSource = PoolSource(_pool(cfg, ctx), method, finish, ctx, stand_in=stand_in)
    else:
        source = MethodSource(method, finish)
    if wrap:
        source = Lagged(source, lag, overlap=cfg.stale.overlap,
                        annotate=ctx.hooks.annotate, finish=finish)
    return source
