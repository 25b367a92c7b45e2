"""Partial rollouts continued as seeds, under a bounded staleness (docs/async.md).

Letters: B groups trained per step, G responses per group, R response width, C = `partial_tokens`
(new tokens a response may decode per step), s = `max_staleness`.

A pool holds the groups in flight (at most `groups_in_flight`, default B (s + 1)). Step k:
  1. admit: new groups from the prompt stream while the pool has room and fewer than
     B (k + 1 + s) groups were admitted over the run (AReaL's admission rule);
  2. decode: one sampler call over every unfinished response of the pool, each request being
     prompt + the response's tokens so far. A response of a group admitted at step k - s or
     earlier ("due") gets its whole remaining budget, every other one at most C tokens: the call
     ends after C decode steps instead of waiting for the longest response, and responses that
     did not finish are interrupted with their tokens, the sampler's log-probs and the version
     (step) of every token;
  3. the batch: the B oldest complete groups (all G responses finished), by admission step then
     admission order (with refresh cycles: the groups of batch k, admitted k-th). Should
     fewer than B be complete, further calls give the oldest unfinished groups their whole
     budget until B are (`partial_calls` counts the calls);
  4. the groups that stay in flight get, for the tokens this step wrote, the learner's log-probs
     under this step's parameters (the version that wrote them): the convention of the refresh
     cycle ("behavior log-probs come from the learner's forward pass under pi_b").
A trained response is then a Thinking Seeds sample: its tokens written by earlier versions are
the seed (`seed_logp`: the learner's log-probs under the version that wrote each token, so the
seed ratio is the mixed-source pi_theta / pi_version), its tokens written at step k the
continuation (ratio over pi_old = this step's policy). The sampler's log-probs of the seed
tokens are kept beside them (`Sample.seed_sampler_logp`) for rollout correction and the gap
metrics; `Sample.versions` holds every response token's version.

Staleness bound: by step k - s at most B (k + 1) groups were admitted and B k were trained
before step k (B per step), so at most B untrained groups are due at step k; they finish in step
k's first call and, being the oldest complete groups, are trained at step k. So no trained token
is more than s versions older than the learner. s = 0 makes every group due at once: synchronous training
through this path. With `partial_tokens` = 0 this module is not used at all and the trainer
runs today's synchronous step unchanged.

Refresh cycles (`seeds.refresh_interval` = T > 1): groups are admitted batch by batch
(batch j = the B groups trained at step j). Admitting batch j of a cycle's first batch (j % T = 0)
runs the cycle's refresh (`ThinkingSeeds.plan` in rl/methods/seeds.py: pi_b = the parameters of the
admitting step, behavior rollouts for T batches, seeds for batches j+1..j+T-1); admitting a
seeded batch starts each response from its seed: tokens of pi_b's version with the learner's
log-probs under pi_b and no sampler log-prob (NaN: rollout correction gives them weight 1). The
pool then continues them like any carried tokens, so a trained seeded response is pi_b's seed,
possibly tokens of versions between, and this step's continuation: one mixed-source sample.
With s = 0 this is the paper's refresh cycle bit for bit; with s >= 1 the refresh runs s steps
before its batch is trained (pi_b is s versions older than in the paper) and a seed is at most
T - 1 + s versions old when trained; the bound above holds for the tokens the pool decodes.

Generated ahead (`stale.steps` = L >= 1, rl/rollout/lag.py): the batch of step j comes from the pool
at step j - L, decoded by that step's parameters, so its tokens are of version j - L (the
continuation, over pi_old = those parameters) or older (the seed); `stale.overlap` runs that
pool call while the learner updates. The pool's own bound is then s - L, and no trained token
is more than s versions older than the learner either way.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import numpy as np

from tseeds_jax.rl.rollout import samples as rollout
from tseeds_jax.rl.rollout import streams
from tseeds_jax.rl.rollout.pool_tallies import tally_metrics, version_tallies
from tseeds_jax.rl.rollout.source import BatchSource, Policy, StepInfo
from tseeds_jax.rl.rollout.stats import occupancy

INDEX_WRAP = 1 << 62  # request indices of groups admitted before this step's first are wrapped


@dataclasses.dataclass
class Response:
    """One response in flight: its tokens so far and, per token, the sampler's log-prob, the
    learner's log-prob under the version that wrote it (filled after that version's step) and
    that version. finish: "" while in flight, else "stop" | "length"."""

    tokens: list[int] = dataclasses.field(default_factory=list)
    sampler_logp: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, np.float32))
    learner_logp: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, np.float32))
    versions: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, np.int32))
    finish: str = ""


@dataclasses.dataclass
class Group:
    gid: int  # admission order over the run (B per step in steady state)
    admitted: int  # the step that admitted it
    prompt_ids: list[int]
    reference: Any
    responses: list[Response]

    @property
    def done(self) -> bool:
        return all(r.finish for r in self.responses)


class PartialRollouts:
    """The pool of groups in flight; its state is checkpointed with the run (key "partial",
    `PoolSource`)."""

    key = "partial"

    def __init__(self, cfg, stats, *, host: int = 0, hosts: int = 1, any_host=None,
                 collective_stats: bool = False):
        """host / hosts: this process's index and the process count; each host keeps its own
        share of every batch's groups (admitted through `next_batch(batches=)`). any_host(flag)
        -> bool: True on every host when the flag is on any (collective; None on one host).
        collective_stats: the statistics pass spans the hosts (every host calls it)."""
        r, st = cfg.rollout, cfg.stale
        self.b_all, self.g, self.r = r.batch_prompts, r.group_size, r.max_response_len
        self.b, self.host = self.b_all // hosts, host  # this host's groups per batch
        # Behind M2PO's lag L (stale.steps: the batch of step j is generated at step j - L, by
        # that step's parameters) every token is L versions old when trained, so the pool's
        # own bound is max_staleness - L (docs/async.md, "Overlap").
        self.chunk, self.s = st.partial_tokens, st.max_staleness - getattr(st, "steps", 0)
        self.capacity = (st.groups_in_flight or self.b_all * (self.s + 1)) // hosts
        self.any_host = any_host or (lambda flag: flag)
        self.hosts, self.collective_stats = hosts, collective_stats
        self.run_seed, self.slots = cfg.seed, cfg.hardware.sampler_slots
        self.stats = stats
        self.interrupt = bool(getattr(st, "partial_interrupt", False))
        self.pool: list[Group] = []
        self.next_gid = 0
        # Refresh cycles: groups of the current batch not admitted yet, and the version of the
        # last refresh (pi_b of the seeds admitted until the next one).
        self.pending: list[Group] = []
        self.refresh_version = -1

    # ---- one step ----
    def next_batch(self, sample_fn, take, sampler_params, params, step: int,
                   version: int | None = None, batches=None):
        """(samples, info) to train at `step`. take(n) -> (prompt id lists, references).
        version: the step of `params` (the version of the tokens decoded now); `step` unless
        the batch is generated ahead (stale.steps). batches (refresh cycles, instead of take):
        batches(j) -> (B prompts, B references, (N seed token lists, N seed log-prob arrays) or
        None, refreshed): batch j, `refreshed` when fetching it ran a refresh."""
        version = step if version is None else version
        if batches is None and self.hosts > 1:
            raise ValueError("several hosts admit batch by batch: pass `batches`")
        room = min(self.capacity - len(self.pool), self.b * (step + 1 + self.s) - self.next_gid)
        if room > 0 and batches is not None:
            for _ in range(room):
                if not self.pending:
                    self._fetch(batches, self.next_gid // self.b, version)
                grp = self.pending.pop(0)
                grp.gid, grp.admitted = self._gid(self.next_gid), step
                self.pool.append(grp)
                self.next_gid += 1
        elif room > 0:
            prompts, refs = take(room)
            for p, ref in zip(prompts, refs):
                self.pool.append(Group(self.next_gid, step, list(p), ref,
                                       [Response() for _ in range(self.g)]))
                self.next_gid += 1
        tally = {"decoded": 0, "slot_steps": 0, "calls": 0}
        self._decode(sample_fn, sampler_params, step, version, self.pool, tally,
                     full=lambda grp: step - grp.admitted >= self.s)
        # Refresh cycles train batch `step` itself (its seeds belong to this step); otherwise a
        # later group that finished may stand in for an unfinished one before any is due.
        ours = ((lambda grp: True) if batches is None else
                (lambda grp: grp.gid < self.b_all * (step + 1)))
        while True:
            ready = sorted((x for x in self.pool if x.done and ours(x)), key=_age_order)
            short = len(ready) < self.b
            if not self.any_host(short):  # a collective sampler: every host calls, or none
                break
            unfinished = sorted((x for x in self.pool if not x.done and ours(x)), key=_age_order)
            self._decode(sample_fn, sampler_params, step, version,
                         unfinished[: self.b - len(ready)] if short else [], tally,
                         full=lambda grp: True)
        train = ready[: self.b]
        chosen = {x.gid for x in train}
        self.pool = [x for x in self.pool if x.gid not in chosen]
        t0 = time.perf_counter()
        self._annotate(params, version)
        stats_s = time.perf_counter() - t0
        samples = [self._sample(i, grp, resp, version) for i, grp in enumerate(train)
                   for resp in grp.responses]
        info = {"partial_calls": tally["calls"], "partial_decoded_tokens": tally["decoded"],
                "slot_occupancy": tally["decoded"] / max(tally["slot_steps"], 1),
                "partial_slot_steps": tally["slot_steps"],
                "partial_groups_in_flight": len(self.pool),
                "partial_responses_in_flight": sum(not r.finish for x in self.pool
                                                   for r in x.responses),
                "group_staleness_max": max(step - _first_version(x) for x in train),
                "time_partial_stats": stats_s}  # inside time_rollout
        tallies = version_tallies(samples, step)
        info.update(tally_metrics(tallies))
        info["partial_tallies"] = tallies  # for `merge_hosts` (popped by the trainer)
        return samples, info

    def _gid(self, k: int) -> int:
        """The global admission order of this host's k-th group: host h holds groups
        h b .. (h + 1) b - 1 of each batch of B (the sampler's request indices follow it)."""
        return (k // self.b) * self.b_all + self.host * self.b + k % self.b

    def _fetch(self, batches, j: int, version: int) -> None:
        """Batch j's B groups, pending admission; seeded responses start from their seeds."""
        prompts, refs, seeds, refreshed = batches(j)
        if refreshed:
            self.refresh_version = version
        for k, (p, ref) in enumerate(zip(prompts, refs)):
            rs = [Response() for _ in range(self.g)]
            if seeds is not None:
                for i, resp in enumerate(rs):
                    tok, lp = seeds[0][k * self.g + i], seeds[1][k * self.g + i]
                    resp.tokens = [int(t) for t in tok]
                    resp.sampler_logp = np.full(len(tok), np.nan, np.float32)
                    resp.learner_logp = np.asarray(lp, np.float32).copy()
                    resp.versions = np.full(len(tok), self.refresh_version, np.int32)
            self.pending.append(Group(-1, -1, list(p), ref, rs))

    def _decode(self, sample_fn, sampler_params, step, version, groups, tally, *, full) -> None:
        """One sampler call over the unfinished responses of `groups`; appends what it wrote,
        as tokens of `version`. Random streams and request indices follow `step`."""
        todo, requests, budgets, index, optional = [], [], [], [], []
        due = any(full(grp) and not r.finish for grp in groups for r in grp.responses)
        for grp in groups:
            for i, resp in enumerate(grp.responses):
                if resp.finish:
                    continue
                left = self.r - len(resp.tokens)
                todo.append(resp)
                requests.append(grp.prompt_ids + resp.tokens)
                # With due responses in the call (they run to their end), the others may decode
                # until the last due one ends (`interrupt`: the sampler stops them there);
                # without, every response decodes at most C tokens.
                may_stop = self.interrupt and due and not full(grp)
                optional.append(may_stop)
                budgets.append(left if full(grp) or may_stop else min(self.chunk, left))
                # Groups admitted at this step get the synchronous path's indices (group j of
                # the step, sample i: j G + i) and streams, so that max_staleness = 0 is the
                # synchronous algorithm bit for bit; older groups' indices wrap (unique).
                index.append(((grp.gid - self.b_all * step) * self.g + i) % INDEX_WRAP)
        if not requests and not getattr(sample_fn, "collective", False):
            return  # a collective sampler is called on every host, also with no requests
        # a step's first call: the synchronous path's stream; further calls: their own
        seed = ((streams.stream_seed(self.run_seed, step, streams.ROLLOUT) if not tally["calls"]
                 else streams.stream_seed(self.run_seed, step, streams.PARTIAL, tally["calls"])),
                index)
        kw = {"interruptible": optional} if any(optional) else {}
        results = sample_fn(sampler_params, requests, budgets, seed, **kw)
        tally["calls"] += 1
        lengths = []
        for resp, (tokens, logp, finish) in zip(todo, results):
            tokens = [int(t) for t in tokens]
            lengths.append(len(tokens))
            resp.tokens += tokens
            resp.sampler_logp = np.concatenate([resp.sampler_logp, np.asarray(logp, np.float32)])
            resp.learner_logp = np.concatenate([resp.learner_logp, np.zeros(len(tokens), np.float32)])
            resp.versions = np.concatenate([resp.versions,
                                            np.full(len(tokens), version, np.int32)])
            if finish == "error":
                raise RuntimeError("sampler returned an error for a partial rollout")
            if finish == "stop" or len(resp.tokens) >= self.r:
                resp.finish = "stop" if finish == "stop" else "length"
        done, spent = occupancy(lengths, self.slots)
        tally["decoded"] += done
        tally["slot_steps"] += spent

    def _annotate(self, params, version: int) -> None:
        """Learner log-probs under `params` (version `version`) of the tokens this step wrote
        into the responses that stay in the pool (their seed denominators when trained later)."""
        rows = [(grp, resp) for grp in self.pool for resp in grp.responses
                if _written(resp, version).any()]
        if not rows and not self.collective_stats:
            return
        if not rows:  # a pass over the hosts' rows together: this host takes part with none
            tokens, attn = self.stats.rows([])
            self.stats.logp_entropy(params, tokens, attn, self.r)
            return
        tokens, attn = self.stats.rows([(g.prompt_ids, r.tokens) for g, r in rows])
        # Rows padded to a power of two (repeats of row 0, dropped after): the statistics pass
        # compiles once per bucket, not once per number of responses in flight.
        pad = (1 << (len(rows) - 1).bit_length()) - len(rows)
        tokens = np.concatenate([tokens, np.repeat(tokens[:1], pad, 0)])
        attn = np.concatenate([attn, np.repeat(attn[:1], pad, 0)])
        logp = self.stats.logp_entropy(params, tokens, attn, self.r)[0][: len(rows)]
        for j, (_, resp) in enumerate(rows):
            new = _written(resp, version)
            resp.learner_logp = np.where(new, logp[j, : len(resp.tokens)],
                                         resp.learner_logp).astype(np.float32)

    def _sample(self, i: int, grp: Group, resp: Response, version: int) -> rollout.Sample:
        """Tokens of older versions are the seed; those of `version` (the parameters that
        generate now: pi_old of the loss) the continuation."""
        h = int(np.sum(resp.versions < version))  # versions rise along a response: a prefix
        return rollout.Sample(
            group=i, prompt_ids=list(grp.prompt_ids), reference=grp.reference,
            seed_ids=resp.tokens[:h], seed_logp=resp.learner_logp[:h].copy(),
            cont_ids=resp.tokens[h:], cont_logp=resp.sampler_logp[h:].copy(),
            finish=resp.finish, versions=resp.versions.copy(),
            seed_sampler_logp=resp.sampler_logp[:h].copy())

    # ---- checkpointing ----
    def state(self):
        if not self.next_gid:
            return None
        groups = self.pool + self.pending
        resps = [r for g in groups for r in g.responses]
        flat = rollout.flat_ragged  # ragged arrays + one pad row (Orbax refuses zero-size arrays)
        tree = {
            "groups": flat([[g.gid, g.admitted, len(g.prompt_ids)] for g in groups], np.int64,
                           (3,)),
            "prompt_ids": flat([g.prompt_ids for g in groups], np.int32),
            "lengths": flat([len(r.tokens) for r in resps], np.int64),
            "tokens": flat([r.tokens for r in resps], np.int32),
            "sampler_logp": flat([r.sampler_logp for r in resps], np.float32),
            "learner_logp": flat([r.learner_logp for r in resps], np.float32),
            "versions": flat([r.versions for r in resps], np.int32),
        }
        meta = {"next_gid": self.next_gid, "references": [g.reference for g in groups],
                "finish": [r.finish for r in resps], "pending": len(self.pending),
                "refresh_version": self.refresh_version}
        return tree, meta

    def load(self, tree, meta):
        self.pool, self.next_gid, self.pending, self.refresh_version = [], 0, [], -1
        if meta is None:
            return
        self.next_gid = int(meta["next_gid"])
        self.refresh_version = int(meta.get("refresh_version", -1))
        a = {k: np.asarray(v) for k, v in tree.items()}
        groups = a["groups"][: len(meta["references"])]
        lengths = a["lengths"][: len(meta["finish"])].tolist()
        ends = np.cumsum(lengths).tolist()
        p_at = 0
        for j, ((gid, admitted, lp), ref) in enumerate(zip(groups.tolist(), meta["references"])):
            rs = []
            for i in range(j * self.g, (j + 1) * self.g):
                lo, hi = ends[i] - lengths[i], ends[i]
                rs.append(Response(a["tokens"][lo:hi].tolist(), a["sampler_logp"][lo:hi].copy(),
                                   a["learner_logp"][lo:hi].copy(), a["versions"][lo:hi].copy(),
                                   meta["finish"][i]))
            self.pool.append(Group(int(gid), int(admitted), a["prompt_ids"][p_at : p_at + lp]
                                   .tolist(), ref, rs))
            p_at += lp
        n_pending = int(meta.get("pending", 0))
        if n_pending:
            self.pool, self.pending = self.pool[:-n_pending], self.pool[-n_pending:]


def _written(resp: Response, version: int) -> np.ndarray:
    """[tokens] the pool's own tokens of `version` (a refresh's seed of the same version keeps
    the log-probs the refresh computed under pi_b: it has no sampler log-prob)."""
    return (resp.versions == version) & np.isfinite(resp.sampler_logp)


def _age_order(grp: Group) -> tuple[int, int]:
    return grp.admitted, grp.gid


def _first_version(grp: Group) -> int:
    """The version of a group's oldest token (its admission step when nothing was written)."""
    firsts = [int(r.versions[0]) for r in grp.responses if len(r.versions)]
    return min(firsts) if firsts else grp.admitted


class PoolSource(BatchSource):
    """The partial-rollout pool as the batch source of a method: the method plans batch j
    (its prompts and seeds; a refresh when one is due) when the pool admits it, the pool
    decodes its groups interruptibly over the following steps, and a batch goes through the
    collection tail once its groups are complete. Checkpoint key "partial"."""

    def __init__(self, pool: PartialRollouts, method, finish, ctx, *, stand_in: bool):
        """stand_in: admit prompts straight from the stream, and let any complete group stand in
        for an unfinished one before one is due (one host, no refresh cycle); otherwise batch
        j's groups are admitted together and trained at step j."""
        self.pool, self.method, self.finish, self.ctx = pool, method, finish, ctx
        self.stand_in = stand_in

    def next(self, step: int, policy: Policy):
        refresh = StepInfo()

        def batches(j):  # batch j as the method plans it (refresh times / tokens into `refresh`)
            plan = self.method.plan(j, policy, refresh)
            seeds = None if plan.seeds is None else plan.seeds[:2]
            return plan.prompts, plan.references, seeds, plan.refreshed

        t0 = time.perf_counter()
        samples, raw = self.pool.next_batch(self.ctx.sample_fn, self.ctx.prompts.take,
                                            policy.sampler, policy.stats, step,
                                            version=policy.version,
                                            batches=None if self.stand_in else batches)
        # generated_tokens = the tokens decoded this step (trained or carried) and the refresh's
        carried = raw["partial_decoded_tokens"] - sum(len(x.cont_ids) for x in samples)
        info = StepInfo(rollout_s=time.perf_counter() - t0 - refresh.refresh_s,
                        refresh_s=refresh.refresh_s,
                        behavior_tokens=carried + refresh.behavior_tokens,
                        slot_occupancy=raw.pop("slot_occupancy"),
                        tallies=raw.pop("partial_tallies"), metrics=raw)
        return self.finish(samples, info, policy, step)

    def state(self):
        got = self.pool.state()
        out = {} if got is None else {self.pool.key: got}
        out.update(self.method.state())
        return out

    def load(self, extra):
        tree, meta = extra.get(self.pool.key, (None, None))
        self.pool.load(tree, meta)
        self.method.load(extra)
