"""The training loop: next batch, learn, save.

    source.next(step, policy)  batch `step` of the run's route (rl/methods/routes.py: on-policy,
                               Thinking Seeds, LUFFY, PrefixRL / QuestA, FR3E / CURE; through
                               the partial-rollout pool; behind M2PO's lag), finished by the one
                               collection tail (rl/rollout/finish.py)
    update(state, batch)       advantages, the learner's hooks, rollout correction, the update
                               (rl/learn/update.py)
    source.settle()            joins generation that ran during the update (overlap)
    checkpoint                 train state, seed cache, prompt position, every source's and
                               hook's cross-step state (rl/run/state_io.py)

Every random choice derives from (run seed, step, stream, sample index) (rl/rollout/streams.py),
so a run resumed from a checkpoint continues exactly as the uninterrupted run would have.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from tseeds_jax.rl.config.schema import TrainConfig
from tseeds_jax.rl.learn.hooks import LearnerHooks, old_logp_mode
from tseeds_jax.rl.learn.layout import RowLayout
from tseeds_jax.rl.learn.learner import Learner, TrainState
from tseeds_jax.rl.learn.row_pass import RowStats
from tseeds_jax.rl.learn.update import Update
from tseeds_jax.rl.methods import routes
from tseeds_jax.rl.rollout import lag
from tseeds_jax.rl.rollout.source import Policy, SourceContext
from tseeds_jax.rl.run import hosts as hosts_lib
from tseeds_jax.rl.run import preemption, state_io
from tseeds_jax.rl.run.metrics import MetricsWriter
from tseeds_jax.sampling.placement import params_mesh
from tseeds_jax.seeds import SeedCache

# The metrics every route writes at every step (tests/test_routes.py).
CORE_METRICS = ("reward", "accuracy", "response_length", "seed_length", "seed_fraction",
                "finish_stop_frac", "num_samples", "loss", "grad_norm", "entropy/all",
                "pass_at_G", "zero_adv_group_frac", "method", "behavior_tokens",
                "slot_occupancy", "generated_tokens", "time_learner", "time_rollout",
                "time_reward", "time_refresh", "time_step", "tokens_per_second")


class TrainingError(RuntimeError):
    """Training stopped on a non-finite value; the message names the step, metric and checkpoint."""


@dataclasses.dataclass
class TrainEnv:
    """Everything the loop needs besides the config, built by `tseeds_jax.rl.setup`."""

    graphdef: Any
    params: Any  # initial parameters (nnx.State)
    sample_fn: Callable  # rl/rollout/samples.py SampleFn
    reward_fn: Callable[[list[str], list[Any]], list[tuple[float, str]]]
    decode: Callable[[list[int]], str]
    prompts: Any  # a PromptStream: take(n) -> (prompt id lists, references); get/set_state()
    pad_id: int = 0
    checkpointer: Any = None  # tseeds_jax.rl.run.state_io.RunCheckpointer or None
    ref_params: Any = None  # reference policy for the KL loss
    offpolicy: Any = None  # LUFFY trace source (tseeds_jax.rl.methods.traces) or None
    frozen: Any = None  # a LoRA run's frozen base (rl/learn/adapters.py); params: the adapters


class Trainer:
    def __init__(self, cfg: TrainConfig, env: TrainEnv, *, mesh=None, lag: int | None = None):
        """mesh: the training mesh, or None (one device). lag: run M2PO's lag machinery with
        this many steps instead of `stale.steps` (tests)."""
        self.cfg, self.env, self.mesh = cfg, env, mesh
        self.hosts = hosts_lib.Hosts.current()
        # Fail before any work when the sampler placement cannot run on this process layout.
        frozen = () if env.frozen is None else env.frozen.states
        hosts_lib.check_sampler_placement(cfg.hardware.sampler_placement, self.hosts,
                                          params_mesh((env.params, frozen)))
        # The learner places each batch on the mesh; on several hosts the batch arrives as one
        # global array of every host's rows (`Update`), already laid out.
        several = mesh is not None and mesh.devices.size > 1
        self.learner = Learner(env.graphdef, env.params, cfg.loss, cfg.optim,
                               variant=cfg.seeds.variant, old_logp_mode=old_logp_mode(cfg),
                               mesh=mesh if several and self.hosts.single else None,
                               frozen=env.frozen, layout=RowLayout(
                                   cfg.learner.layout, cfg.data.max_prompt_len,
                                   cfg.rollout.max_response_len, env.pad_id,
                                   cfg.learner.packed_row_len),
                               temperature=cfg.rollout.temperature)
        if env.frozen is not None:
            self._place_base(env)
        self.row_stats = RowStats(self.learner, hosts=self.hosts,
                                  micro_batch_size=cfg.optim.micro_batch_size,
                                  prompt_width=cfg.data.max_prompt_len,
                                  response_width=cfg.rollout.max_response_len, pad_id=env.pad_id)
        self.hooks = LearnerHooks.build(cfg, self.learner, self.row_stats,
                                        lag=None if lag is None else True)
        # Every device decodes for every host when the sampler's parameters span the processes.
        collective = not self.hosts.single and cfg.hardware.sampler_placement in ("sharded",
                                                                                 "decode")
        ctx = SourceContext(cfg, env=env, hosts=self.hosts, stats=self.row_stats,
                            hooks=self.hooks, collective_sampler=collective)
        self.source = routes.build_source(cfg, ctx, traces=env.offpolicy, lag=lag)
        self.update = Update(cfg, self.learner, self.row_stats, self.hooks, self.hosts, mesh=mesh,
                             ref_params=env.ref_params,
                             weight_sync=getattr(env.sample_fn, "weight_sync", None))
        self.state: TrainState = self.learner.init_state(env.params)
        self.step = 0
        self.writer = MetricsWriter(cfg.run_dir)
        self.history: list[dict[str, Any]] = []

    def _place_base(self, env) -> None:
        """A LoRA run's base, placed now (on every host, in the main thread) where the
        statistics passes and the sampler read it: a host-local replica is a collective when
        the base spans the processes, and overlap's worker thread makes no collective call."""
        placement = self.cfg.hardware.sampler_placement
        local = hosts_lib.sampler_params(env.params, placement, self.hosts)
        env.frozen.like(local)
        weights = getattr(env.sample_fn, "lora_weights", None)
        if weights is not None and placement != "decode":  # decode: placed at the first sync
            weights.base_on(local)

    def policy(self, params) -> Policy:
        """This step's parameters for generation (`params`: the sampler placement's copy of the
        learner's); with overlap, a copy the update cannot invalidate."""
        if self.source.keeps_params:
            params = lag.snapshot(params)
        # A LoRA run's adapters go to the sampler as they are (it casts its own base).
        sampler = params if self.env.frozen is not None else _cast(params,
                                                                    self.cfg.model.sampler_dtype)
        return Policy(sampler=sampler, stats=params, version=self.step)

    def train_step(self) -> dict[str, Any]:
        c, step = self.cfg, self.step
        t_start = time.perf_counter()
        # Sampling and per-sequence statistics use a host-local replica of the parameters, or
        # (hardware.sampler_placement="sharded") the learner's sharded parameters as they are.
        params = hosts_lib.sampler_params(self.state.params, c.hardware.sampler_placement,
                                          self.hosts)
        samples, info = self.source.next(step, self.policy(params))
        try:
            self.state, metrics = self.update(self.state, samples, info, params, step)
        except BaseException:
            self.source.settle(reraise=False)
            raise
        metrics.update(self.source.settle())
        weights = getattr(self.env.sample_fn, "lora_weights", None)
        if weights is not None:  # bytes that moved to the sampler: the adapters only
            metrics["lora_sync_bytes"] = weights.take_bytes()
        metrics["time_step"] = time.perf_counter() - t_start
        metrics["tokens_per_second"] = metrics["generated_tokens"] / max(metrics["time_step"], 1e-9)
        if not np.isfinite(metrics["loss"]) or not np.isfinite(metrics["grad_norm"]):
            bad = "loss" if not np.isfinite(metrics["loss"]) else "grad_norm"
            where = self.save(tag="nan")
            raise TrainingError(f"step {step}: {bad}={metrics[bad]} is not finite; "
                                f"state saved at {where} for inspection")
        self.step += 1
        return metrics

    # ---- checkpoints ----
    def save(self, tag: str = "") -> str | None:
        """Checkpoints the run at its current step (`tag` "nan": a historical checkpoint)."""
        if self.env.checkpointer is None:
            return None
        extra = state_io.pack_extra({**self.source.state(), **self.hooks.state()})
        where = self.env.checkpointer.save(self.step, self.state,
                                           self.source.seed_cache() or SeedCache(),
                                           self.env.prompts, tag=tag, extra=extra)
        self.writer.sync()  # a remote run dir's metrics are never behind its checkpoints
        return where

    def restore(self) -> bool:
        """Resumes from the latest checkpoint of the run dir, if any; True if it did."""
        if self.env.checkpointer is None:
            return False
        got = self.env.checkpointer.restore_latest(self.state, with_extra=True)
        if got is None:  # killed before its first checkpoint: start over, metrics included
            self.writer.truncate_after(0)
            return False
        self.step, self.state, cache, data_state, extra = got
        self.source.set_seed_cache(cache)
        parts = state_io.unpack_extra(extra)
        self.source.load(parts)
        self.hooks.load(parts)
        self.env.prompts.set_state(data_state)
        self.writer.truncate_after(self.step)
        return True

    def run(self, steps: int | None = None, *, progress=None) -> list[dict[str, Any]]:
        """Trains until `steps` (default cfg.steps) and checkpoints.

        Checkpoints every `checkpoint_every` steps and every `checkpoint_every_minutes` (host 0's
        clock). SIGTERM, SIGINT or a preemption notice: the current step finishes, all hosts
        agree on the step (rl/run/preemption.py), it is checkpointed and `preemption.Preempted` is
        raised. A second SIGINT raises KeyboardInterrupt at once, without a checkpoint (the
        step may be half done: a refresh may have consumed prompts without caching seeds)."""
        c = self.cfg
        end = c.steps if steps is None else steps
        guard = preemption.PreemptionGuard(self.hosts, every_minutes=c.checkpoint_every_minutes,
                                           continuous_s=c.checkpoint_continuous_s,
                                           window_s=c.preemption_window_s)
        ck = self.env.checkpointer
        try:
            with guard:
                while self.step < end:
                    metrics = self.train_step()
                    self.history.append(metrics)
                    if self.step % c.log_every == 0 or self.step == end:
                        self.writer.write(self.step - 1, metrics)
                    if progress is not None:
                        progress(self.step, end, metrics)
                    # collective: the same answer on every host
                    stop, timed = guard.agree(idle=ck is None or not ck.saving(),
                                              save_s=0.0 if ck is None else ck.estimate_save_s())
                    every = c.checkpoint_every and self.step % c.checkpoint_every == 0
                    if stop and not guard.fits_window and ck is not None and self.step < end:
                        # A save would not commit before the stop: let the write in flight
                        # commit and resume from it (docs/tpu.md, "What each event loses").
                        ck.finish("preemption notice")
                        last = ck.ckpts.latest_step()
                        guard.agreed_reason += (f"; no time left in the {c.preemption_window_s:g}"
                                                f" s notice window to save step {self.step}")
                        print(f"[tseeds] {guard.agreed_reason}: resuming from step {last}",
                              file=sys.stderr, flush=True)
                        raise guard.preempted(last or 0, stop, None if last is None else
                                              str(ck.ckpts.directory / str(last)))
                    if stop or timed or every:
                        where = self.save()
                        guard.saved()
                    if stop and self.step < end:
                        if ck is not None:
                            ck.finish("stopping")
                        raise guard.preempted(self.step, stop, where)
        finally:
            self.writer.close()
        self.save()
        if ck is not None:
            ck.finish("end of training")
        return self.history


def _cast(params, dtype: str):
    if dtype in (None, "float32"):
        return params
    import jax.numpy as jnp

    return jax.tree_util.tree_map(lambda x: x.astype(jnp.dtype(dtype)), params)
