"""The training loop: refresh cycle, rollouts, rewards, advantages, learner update, checkpoints.

One step trains one batch of B prompts x G responses:
  * on-policy (T = 1, or batch 0 of a cycle): the current policy writes whole responses;
  * seeded (batches 1..T-1 of a cycle): each sample restarts from its own seed, a prefix of a
    behavior response written by the snapshot pi_b at the cycle's refresh, and the current policy
    writes the continuation. Seed tokens carry the behavior log-probs the learner computed under pi_b.
Every random choice derives from (run seed, step, stream, sample index), so a run resumed from a
checkpoint continues exactly as the uninterrupted run would have, and ratio = 0 or T = 1 reproduce
on-policy DAPO exactly.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from tseeds_jax.model.sharding import batch_sharding
from tseeds_jax.rewards.health import check_rewards
from tseeds_jax.rl import batch_stats, overlap, partial, preemption, rollout, rollout_correction
from tseeds_jax.rl import hosts as hosts_lib
from tseeds_jax.rl.config import TrainConfig
from tseeds_jax.rl.learner import Learner, TrainState
from tseeds_jax.rl.loss_plugins import LossPlugins, RowStats, learner_old_logp_mode
from tseeds_jax.rl.metrics import MetricsWriter
from tseeds_jax.rl.partial import PartialRollouts, occupancy
from tseeds_jax.sampling.placement import params_mesh, shards_of
from tseeds_jax.seeds import SeedCache, feedback, sample_rngs

ROLLOUT, BEHAVIOR, TOPUP = 1, 2, 3  # random streams of generation seeds


class TrainingError(RuntimeError):
    """Training stopped on a non-finite value; the message names the step, metric and checkpoint."""


def stream_seed(run_seed: int, step: int, stream: int, extra: int = 0) -> int:
    return int(np.random.SeedSequence([run_seed, step, stream, extra]).generate_state(1)[0] >> 1)


@dataclasses.dataclass
class TrainEnv:
    """Everything the loop needs besides the config, built by `tseeds_jax.rl.setup`."""

    graphdef: Any
    params: Any  # initial parameters (nnx.State)
    sample_fn: rollout.SampleFn
    reward_fn: Callable[[list[str], list[Any]], list[tuple[float, str]]]
    decode: Callable[[list[int]], str]
    prompts: Any  # a PromptStream: take(n) -> (prompt id lists, references); get/set_state()
    pad_id: int = 0
    checkpointer: Any = None  # tseeds_jax.rl.state_io.RunCheckpointer or None
    ref_params: Any = None  # reference policy for the KL loss
    offpolicy: Any = None  # LUFFY trace source (tseeds_jax.rl.offpolicy) or None


def stats_chunk_rows(rows: int, micro_batch_size: int, shards: int = 1) -> int:
    """Global rows of one forward of the statistics pass (`Trainer._row_pass`; also what
    `tseeds compile` compiles and `tseeds plan` counts): `micro_batch_size` rows (all `rows` when
    0, never more than `rows`), rounded up to whole rows on each of the `shards` devices of the
    mesh's batch axes (1: one device). The one implementation of the chunking."""
    if rows < 0 or micro_batch_size < 0 or shards < 1:
        raise ValueError(f"stats_chunk_rows: rows={rows}, micro_batch_size={micro_batch_size}, "
                         f"shards={shards}: expected rows >= 0, micro_batch_size >= 0, shards >= 1")
    chunk = min(micro_batch_size or rows, rows)
    return -(-chunk // shards) * shards


class Trainer:
    def __init__(self, cfg: TrainConfig, env: TrainEnv, *, batch_sharding=None):
        """batch_sharding: a LearnerBatch of NamedShardings (the mesh's batch layout) or None."""
        self.cfg, self.env = cfg, env
        self.hosts = hosts_lib.Hosts.current()
        # Fail before any work when the sampler placement cannot run on this process layout.
        hosts_lib.check_sampler_placement(cfg.hardware.sampler_placement, self.hosts,
                                          params_mesh(env.params))
        self.batch_sharding = batch_sharding
        self.mesh = None  # the training mesh (set by runner.make_trainer); needed multi-host
        self.learner = Learner(env.graphdef, env.params, cfg.loss, cfg.optim,
                               variant=cfg.seeds.variant, old_logp_mode=learner_old_logp_mode(cfg),
                               batch_sharding=batch_sharding if self.hosts.single else None)
        self.row_stats = RowStats(logp_entropy=self._stats, topk=self._topk,
                                  prompt_width=self._prompt_width(),
                                  response_width=cfg.rollout.max_response_len, pad_id=env.pad_id)
        self.plugins = LossPlugins.build(cfg, self.learner, self.row_stats,
                                         offpolicy=getattr(env, "offpolicy", None))
        if cfg.stale.partial_tokens:  # the pool is a plug-in: checkpointed with their state
            if self.learner.proposal_top_k:
                raise ValueError("partial rollouts (stale.partial_tokens) do not combine with a "
                                 "top-K proposal loss (SIS) yet")
            self.plugins.plugins.append(self._pool(cfg))
        self.state: TrainState = self.learner.init_state(env.params)
        self.cache = SeedCache()
        self.step = 0
        self.selector = feedback.make_selector(cfg.seeds)  # seeds/selection.py
        self.writer = MetricsWriter(cfg.run_dir)
        self.history: list[dict[str, Any]] = []

    def _pool(self, cfg) -> PartialRollouts:
        """The partial-rollout pool of this host: its share of every batch's groups; the hosts
        agree on each extra sampler call when sampling or statistics span them."""
        h = self.hosts
        if h.single:
            return PartialRollouts(cfg, self.row_stats)
        h.slice(cfg.rollout.batch_prompts, "rollout.batch_prompts")  # divisible, or a clear error
        if cfg.stale.groups_in_flight:
            h.slice(cfg.stale.groups_in_flight, "stale.groups_in_flight")
        if cfg.hardware.sampler_placement not in ("sharded", "decode"):
            return PartialRollouts(cfg, self.row_stats, host=h.index, hosts=h.count)
        return PartialRollouts(cfg, self.row_stats, host=h.index, hosts=h.count,
                               any_host=lambda flag: bool(self._per_host(int(flag)).max()),
                               collective_stats=True)

    # ---- one step ----
    def _prompt_width(self) -> int:
        return self.cfg.data.max_prompt_len

    def _stats(self, params, tokens_BT, attn_BT, response_width):
        """(logp_BR, entropy_BR) numpy: the learner's log-probs and entropies (row chunks, see
        `_row_pass`)."""
        return self._row_pass(params, tokens_BT, attn_BT, response_width, topk=False)

    def _topk(self, params, tokens_BT, attn_BT, response_width):
        """(ids_BRK int32, logp_BRK float32) numpy: the policy's top-K (the loss's proposal) at
        every response position (row chunks, see `_row_pass`)."""
        return self._row_pass(params, tokens_BT, attn_BT, response_width, topk=True)

    def _row_pass(self, params, tokens_BT, attn_BT, r, *, topk: bool):
        """A no-grad pass over this host's rows in chunks of the micro-batch size, so that it
        never holds more activations than one micro-batch of the update.

        With params sharded over a mesh (sampler_placement "sharded") a chunk is split over the
        mesh's batch axes like the update's micro-batches, rounded up to whole rows per device.
        If the mesh spans several processes, a chunk is one global array of every host's rows
        (`micro_batch_size` global rows, as in the update): all hosts run the same number of
        chunks (padded to the longest host), and each reads its own rows back."""
        k = self.learner.proposal_top_k
        n = len(tokens_BT)
        mesh = params_mesh(params)
        spread = mesh is not None and hosts_lib.spans_processes(params)
        parts = self.hosts.count if spread else 1
        n_max = int(hosts_lib.gather_rows(np.array([n], np.int32), self.hosts).max()) if spread \
            else n
        if n_max == 0:
            tail = (r, k) if topk else (r,)
            return ((np.zeros((0,) + tail, np.int32 if topk else np.float32),
                     np.zeros((0,) + tail, np.float32)))
        shards = 1 if mesh is None else shards_of(mesh, "batch")
        local = stats_chunk_rows(n_max * parts, self.cfg.optim.micro_batch_size, shards) // parts
        tok, att = _pad_rows(tokens_BT, attn_BT, -(-n_max // local) * local, self.env.pad_id)

        def put(x):
            if spread:
                return hosts_lib.to_global(x, mesh, self.hosts)
            return x if mesh is None else jax.device_put(x, batch_sharding(mesh, x.shape))

        # The learner's jitted functions, not `Learner.stats` / `topk`: those read results with
        # np.asarray, which cannot read rows that live on other processes.
        def forward(t, a):
            if topk:
                return self.learner._topk(params, put(t), put(a), int(r), int(k))
            return self.learner._stats(params, put(t), put(a), int(r))

        read = (lambda x: hosts_lib.local_rows(x, mesh)) if spread else np.asarray
        outs = [tuple(read(x) for x in forward(tok[i : i + local], att[i : i + local]))
                for i in range(0, len(tok), local)]
        return tuple(np.concatenate(pieces)[:n] for pieces in zip(*outs))

    def _sample_fn(self):
        """env.sample_fn; collective across hosts when the sampler's parameters span several
        processes (every device decodes for every host: `hosts.gathered_sample_fn`)."""
        if self.hosts.single or self.cfg.hardware.sampler_placement not in ("sharded", "decode"):
            return self.env.sample_fn
        return hosts_lib.gathered_sample_fn(self.env.sample_fn, self.hosts)

    def _local(self, prompts, refs):
        """This host's contiguous slice of a global batch of prompts, and its first sample index."""
        sl = self.hosts.slice(len(prompts), "rollout.batch_prompts")
        return prompts[sl], refs[sl], sl.start * self.cfg.rollout.group_size

    def _refresh(self, params, step: int):
        """Snapshot pi_b = params; behavior rollouts for the next T batches; seeds for 1..T-1."""
        c = self.cfg
        b, g, r = c.rollout.batch_prompts, c.rollout.group_size, c.rollout.max_response_len
        batches = [self.env.prompts.take(b) for _ in range(c.seeds.refresh_interval)]
        if self.env.checkpointer is not None:
            self.env.checkpointer.save_behavior_snapshot(step, params)
        # The adaptive selector's state outlives the cycle's seeds.
        tracker = (self.cache.tracker if self.cache.tracker is not None
                   else feedback.new_tracker(self.selector, c.seeds))
        # With partial rollouts a refresh runs when its first batch is admitted, up to
        # max_staleness steps before the previous cycle's last batches are trained: keep theirs.
        keep = dict(self.cache.batches) if self.plugins.of(PartialRollouts) is not None else {}
        self.cache = SeedCache(cycle_start=step, batches=keep, tracker=tracker)
        # All T-1 seeded batches in one sampler call and one statistics pass: per-call costs
        # dominate small models, and a bigger call fills more decode slots.
        n_global = b * g
        local = [self._local(*batches[j]) for j in range(1, c.seeds.refresh_interval)]
        prompts = [p for lp, _, _ in local for p in lp]
        refs = [x for _, lr, _ in local for x in lr]
        index = [j * n_global + first + i for j, (lp, _, first) in enumerate(local)
                 for i in range(len(lp) * g)]
        behavior = rollout.continue_samples(self._sample_fn(), params, prompts, refs, g, r,
                                            (stream_seed(c.seed, step, BEHAVIOR), index))
        responses = [s.cont_ids for s in behavior]
        n_tokens = sum(len(x) for x in responses)
        tokens, attn = rollout.sequences_for_stats(
            [(s.prompt_ids, s.cont_ids) for s in behavior], self._prompt_width(), r, self.env.pad_id)
        # Behavior log-probs come from the learner's forward pass under pi_b, not the sampler.
        logp, ent = self._stats(params, tokens, attn, r)
        # Behavior responses are complete: their rewards are known now (seed selection uses them).
        rollout.score_samples(behavior, self.env.reward_fn, self.env.decode)
        rewards = np.array([s.reward for s in behavior], np.float64)
        n_local = len(behavior) // len(local) if local else 0
        for j, (lp, lr, first) in enumerate(local, start=1):
            rows = slice((j - 1) * n_local, j * n_local)
            rngs = sample_rngs(c.seed, step + j, n_global)[first : first + n_local]
            sb = feedback.select_seed_batch(self.selector, self.cache.tracker, lp, lr,
                                            responses[rows], logp[rows], ent[rows],
                                            rewards[rows], g, rngs)
            self.cache.batches[step + j] = sb
            src = sb.source  # row i of the plugins' arrays: sample i's source rollout
            self.plugins.after_seed_batch(step + j, params, tokens[rows][src], attn[rows][src],
                                          sb.seed_lengths)
        return batches[0], n_tokens

    def _collect(self, params, step: int):
        """Samples of this step (seeded or on-policy) with rewards; returns (samples, info)."""
        c = self.cfg
        b, g, r = c.rollout.batch_prompts, c.rollout.group_size, c.rollout.max_response_len
        info = {"behavior_tokens": 0, "refresh_time": 0.0}
        seeds = sb = None
        if c.seeded and step % c.seeds.refresh_interval == 0:
            t0 = time.perf_counter()
            (prompts, refs), info["behavior_tokens"] = self._refresh(params, step)
            info["refresh_time"] = time.perf_counter() - t0
        elif c.seeded:
            sb = self.cache.take(step)
            prompts, refs = sb.prompt_ids, sb.references
            seeds = (sb.seed_tokens, sb.seed_logp) + self.plugins.seed_extras(step)
        else:
            prompts, refs = self.env.prompts.take(b)
        if seeds is None:  # seeded batches were sliced to this host at refresh time
            prompts, refs, first = self._local(prompts, refs)
        else:
            first = self.hosts.index * len(seeds[0])
        t0 = time.perf_counter()
        samples = rollout.continue_samples(self._sample_fn(), params, prompts, refs, g, r,
                                           (stream_seed(c.seed, step, ROLLOUT), first),
                                           seeds=seeds,
                                           **self.plugins.rollout_kwargs(prompts, step, first))
        info["rollout_time"] = time.perf_counter() - t0
        used, spent = occupancy([len(x.cont_ids) for x in samples if not x.offpolicy],
                                self.cfg.hardware.sampler_slots)
        info["slot_occupancy"] = used / max(spent, 1)
        t0 = time.perf_counter()
        rollout.score_samples(samples, self.env.reward_fn, self.env.decode)
        check_rewards([s.reward_reason for s in samples])  # a sandbox that runs nothing stops the run
        info["reward_time"] = time.perf_counter() - t0
        self._host_stats(samples, info, sb, scoring=True)
        if c.advantage.filter_groups:
            samples = self._filter_groups(params, step, samples, info)
        return samples, info

    def _collect_partial(self, pool: PartialRollouts, sampler_params, params, step: int,
                         version: int | None = None):
        """Samples of batch `step` from the partial-rollout pool (rl/partial.py), with rewards;
        `version`: the step of `params` (`PartialRollouts.next_batch`)."""
        c = self.cfg
        refresh = {"time": 0.0, "tokens": 0}

        def batches(j):  # refresh cycles: batch j of the prompt stream, seeded or a refresh's
            if not c.seeded:  # several hosts: each admits its share of every batch
                return (*self._local(*self.env.prompts.take(c.rollout.batch_prompts))[:2],
                        None, False)
            if j % c.seeds.refresh_interval == 0:
                t0 = time.perf_counter()
                (prompts, refs), n = self._refresh(sampler_params, j)
                refresh["time"] += time.perf_counter() - t0
                refresh["tokens"] += n
                return (*self._local(prompts, refs)[:2], None, True)
            sb = self.cache.batches[j]  # this host's seeds; taken when the batch is trained
            return sb.prompt_ids, sb.references, (sb.seed_tokens, sb.seed_logp), False

        t0 = time.perf_counter()
        samples, info = pool.next_batch(self._sample_fn(), self.env.prompts.take, sampler_params,
                                        params, step, version=version,
                                        batches=batches if c.seeded or not self.hosts.single
                                        else None)
        info["rollout_time"] = time.perf_counter() - t0 - refresh["time"]
        # generated_tokens = the tokens decoded this step (trained or carried) and the refresh's
        info["behavior_tokens"] = info["partial_decoded_tokens"] - sum(
            len(x.cont_ids) for x in samples) + refresh["tokens"]
        info["refresh_time"] = refresh["time"]
        t0 = time.perf_counter()
        rollout.score_samples(samples, self.env.reward_fn, self.env.decode)
        check_rewards([s.reward_reason for s in samples])
        info["reward_time"] = time.perf_counter() - t0
        sb = self.cache.take(step) if c.seeded and step % c.seeds.refresh_interval else None
        self._host_stats(samples, info, sb, scoring=c.seeded)
        return samples, info

    def _host_stats(self, samples, info, sb, *, scoring: bool, now: bool = False) -> None:
        """Batch-wide group statistics (and the pool's metrics) over every host's samples; with
        `scoring`, the seed metrics and the adaptive selector's update (`feedback`). Overlap on
        several hosts: left to `train_step` (`host_stats_later`), so that the generation in the
        worker thread makes no collective call beside the update's."""
        c = self.cfg
        g = c.rollout.group_size
        if c.stale.overlap and not self.hosts.single and not now:
            info["host_stats_later"] = True
            return
        tallies = info.pop("partial_tallies", None)
        if tallies is not None and not self.hosts.single:  # the pool over every host's share
            every = hosts_lib.allgather_objects(
                ({k: info[k] for k in partial.SUMMED + partial.LARGEST}, tallies), self.hosts)
            info.update(partial.merge_hosts([a for a, _ in every], [b for _, b in every]))
        info["all_groups"] = batch_stats.group_stats(batch_stats.gather_samples(samples, self.hosts),
                                                     g)
        if scoring:  # seed metrics; feeds the adaptive selector's state
            info.update(feedback.after_scoring(
                self.cache.tracker, sb, [s.prompt_ids for s in samples[::g]],
                [s.reward for s in samples], g, info["all_groups"].get("zero_adv_group_frac")))

    def _correct(self, params, batch, samples):
        """Rollout correction (stale.correction): masks tokens / rows whose weight pi_den /
        pi_sampler leaves [1/t, t], or ("tis") gives the loss the weights min(w, t)
        (rl/rollout_correction.py); (batch, metrics)."""
        c = self.cfg
        r = c.rollout.max_response_len
        if self.learner.old_logp_mode == "recompute":
            old = batch.old_logp_BR  # filled by the recompute pass or the stale annotation
        else:  # the shortcut: pi_old is these parameters
            old = self._stats(params, batch.tokens_BT, batch.attn_mask_BT, r)[0]
        return rollout_correction.correct_batch(batch, samples, old, c.stale.correction,
                                                c.stale.correction_threshold)

    def _filter_groups(self, params, step, samples, info):
        """DAPO dynamic sampling: keep groups with unequal rewards; top up with on-policy groups.

        The hosts decide together: every host draws another round while the hosts *together*
        keep fewer groups than the global batch (each round samples collectively and draws from
        the shared prompt stream, so all must run the same rounds), and the kept groups are dealt
        out as one process drawing the whole batch would keep them (`hosts.share_out`)."""
        c = self.cfg
        b, g, r = c.rollout.batch_prompts, c.rollout.group_size, c.rollout.max_response_len
        quota = len(samples)  # this host's share of the batch (the same on every host)
        rounds = [batch_stats.keep_varied_groups(samples, g)]
        counts = [self._per_host(len(rounds[0]))]
        while (sum(int(x.sum()) for x in counts) < quota * self.hosts.count
               and len(rounds) < c.advantage.max_gen_batches):
            prompts, refs, first = self._local(*self.env.prompts.take(b))
            extra = rollout.continue_samples(self._sample_fn(), params, prompts, refs, g, r,
                                             (stream_seed(c.seed, step, TOPUP, len(rounds)), first),
                                             **self.plugins.rollout_kwargs(prompts, step, first))
            rollout.score_samples(extra, self.env.reward_fn, self.env.decode)
            rounds.append(batch_stats.keep_varied_groups(extra, g))
            counts.append(self._per_host(len(rounds[-1])))
        kept = hosts_lib.share_out(rounds, counts, quota, self.hosts)
        for i, s in enumerate(kept):  # renumber groups densely for the advantage computation
            s.group = i // g
        info["gen_rounds"] = len(rounds)
        info["kept_groups"] = min(sum(int(x.sum()) for x in counts),
                                  quota * self.hosts.count) // g
        return kept

    def _per_host(self, n: int) -> np.ndarray:
        """[hosts] every host's value of the count `n` (collective on several hosts)."""
        return hosts_lib.gather_rows(np.array([n], np.int32), self.hosts)

    def train_step(self) -> dict[str, Any]:
        c, step = self.cfg, self.step
        t_start = time.perf_counter()
        # Sampling and per-sequence statistics use a host-local replica of the parameters, or
        # (hardware.sampler_placement="sharded") the learner's sharded parameters as they are.
        params = hosts_lib.sampler_params(self.state.params, c.hardware.sampler_placement,
                                          self.hosts)
        pool = self.plugins.of(PartialRollouts)
        ahead = overlap.Ahead(None)
        gen = params
        if c.stale.overlap:
            if not self.hosts.single and (c.hardware.sampler_placement != "replica"
                                          or c.advantage.filter_groups):
                raise NotImplementedError(
                    "stale.overlap on several processes needs a host-local sampler "
                    "(hardware.sampler_placement='replica') and no advantage.filter_groups: "
                    "the worker's collectives would interleave with the update's (docs/async.md)")
            gen = overlap.snapshot(params)  # the worker's own copy: the update donates params
        sampler_params = _cast(gen, self.cfg.model.sampler_dtype)
        if pool is not None and not c.stale.steps:
            samples, info = self._collect_partial(pool, sampler_params, gen, step)
        else:
            collect = self._collect
            if pool is not None:  # the pool behind M2PO's lag: tokens of this step's version
                def collect(sp, j):
                    return self._collect_partial(pool, sp, gen, j, version=step)
            out = self.plugins.collect(collect, sampler_params, gen, step,
                                       defer=c.stale.overlap)
            samples, info = out[:2]
            if info.pop("host_stats_later", False):  # before the worker starts
                self._host_stats(samples, info, None, scoring="partial_tallies" not in info,
                                 now=True)
            if c.stale.overlap:  # batch step + s, generated while the learner updates
                ahead = overlap.Ahead(out[2])
        try:
            metrics = self._learn(samples, info, params, step)
        except BaseException:
            ahead.wait(reraise=False)
            raise
        waited = ahead.wait()
        if c.stale.overlap:  # the worker's generation, and the part of it the step waited for
            metrics.update(time_ahead=ahead.seconds, time_ahead_wait=waited)
        metrics["time_step"] = time.perf_counter() - t_start
        metrics["tokens_per_second"] = metrics["generated_tokens"] / max(metrics["time_step"], 1e-9)
        if not np.isfinite(metrics["loss"]) or not np.isfinite(metrics["grad_norm"]):
            bad = "loss" if not np.isfinite(metrics["loss"]) else "grad_norm"
            where = self._save(tag="nan")
            raise TrainingError(f"step {step}: {bad}={metrics[bad]} is not finite; "
                                f"state saved at {where} for inspection")
        self.step += 1
        return metrics

    def _learn(self, samples, info, params, step: int) -> dict[str, Any]:
        """Advantages, the batch, its statistics and the learner's update; the step's metrics."""
        c = self.cfg
        g, r = c.rollout.group_size, c.rollout.max_response_len
        adv = (rollout.sample_advantages(samples, norm_by_std=c.advantage.norm_by_std,
                                         max_response_len=r,
                                         overlong_buffer=c.advantage.overlong_buffer,
                                         overlong_penalty=c.advantage.overlong_penalty)
               if samples else np.zeros(0))
        batch = rollout.build_batch(samples, adv, prompt_width=self._prompt_width(),
                                    response_width=r, pad_id=self.env.pad_id,
                                    num_rows=c.rollout.batch_prompts * g // self.hosts.count,
                                    top_k=self.learner.proposal_top_k)
        t0 = time.perf_counter()
        batch = self.plugins.prepare_batch(params, batch)  # old log-probs, top-K proposals
        if c.stale.correction != "off":
            batch, rc_metrics = self._correct(params, batch, samples)
            info.update(rc_metrics)
        if c.loss.kl_coef:
            batch = batch.replace(ref_logp_BR=self._stats(
                self.env.ref_params, batch.tokens_BT, batch.attn_mask_BT, r)[0])
        if not self.hosts.single:
            batch = hosts_lib.to_global(batch, self.mesh, self.hosts)
        self.state, lmetrics = self.learner.update(self.state, batch,
                                                   **self.plugins.update_kwargs(step))
        lmetrics = jax.device_get(lmetrics)
        self.plugins.after_update(lmetrics)
        learner_time = time.perf_counter() - t0
        metrics = batch_stats.sample_metrics(batch_stats.gather_samples(samples, self.hosts), g)
        metrics.update({k: v for k, v in lmetrics.items()})
        metrics.update(info.pop("all_groups"))
        metrics.update(self.plugins.step_metrics(samples))
        gen_tokens = sum(len(s.cont_ids) for s in samples) + info["behavior_tokens"]
        metrics.update(info)
        metrics.update(time_learner=learner_time, generated_tokens=gen_tokens)
        metrics["time_rollout"] = metrics.pop("rollout_time")
        metrics["time_reward"] = metrics.pop("reward_time")
        metrics["time_refresh"] = metrics.pop("refresh_time")
        sync = getattr(self.env.sample_fn, "weight_sync", None)
        if sync is not None:  # the decode layout's reshards of this step (inside time_rollout)
            metrics["time_weight_sync"] = sync.take_seconds()
        return metrics

    # ---- loop, checkpoints ----
    def _save(self, tag: str = "") -> str | None:
        if self.env.checkpointer is None:
            return None
        where = self.env.checkpointer.save(self.step, self.state, self.cache, self.env.prompts,
                                           tag=tag, extra=self.plugins.state())
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
        self.step, self.state, self.cache, data_state, extra = got
        self.plugins.load(extra)
        self.env.prompts.set_state(data_state)
        self.writer.truncate_after(self.step)
        return True

    def run(self, steps: int | None = None, *, progress=None) -> list[dict[str, Any]]:
        """Trains until `steps` (default cfg.steps) and checkpoints.

        Checkpoints every `checkpoint_every` steps and every `checkpoint_every_minutes` (host 0's
        clock). SIGTERM, SIGINT or a preemption notice: the current step finishes, all hosts
        agree on the step (rl/preemption.py), it is checkpointed and `preemption.Preempted` is
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
                        where = self._save()
                        guard.saved()
                    if stop and self.step < end:
                        if ck is not None:
                            ck.finish("stopping")
                        raise guard.preempted(self.step, stop, where)
        finally:
            self.writer.close()
        self._save()
        if ck is not None:
            ck.finish("end of training")
        return self.history


# ---- helpers ----
def _pad_rows(tokens_BT, attn_BT, rows: int, pad_id: int):
    """Both arrays padded to `rows` rows (equal chunks: one compilation). Pad rows repeat the first
    row, or (no rows here: other hosts have some) attend to every position, never to none."""
    pad = rows - len(tokens_BT)
    if pad <= 0:
        return tokens_BT, attn_BT
    if len(tokens_BT):
        fill_t, fill_a = tokens_BT[:1], attn_BT[:1]
    else:
        fill_t = np.full((1,) + tokens_BT.shape[1:], pad_id, tokens_BT.dtype)
        fill_a = np.ones((1,) + attn_BT.shape[1:], attn_BT.dtype)
    return (np.concatenate([tokens_BT, np.repeat(fill_t, pad, 0)]),
            np.concatenate([attn_BT, np.repeat(fill_a, pad, 0)]))


def _cast(params, dtype: str):
    if dtype in (None, "float32"):
        return params
    import jax.numpy as jnp

    return jax.tree_util.tree_map(lambda x: x.astype(jnp.dtype(dtype)), params)
