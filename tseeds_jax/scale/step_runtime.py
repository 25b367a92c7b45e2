"""The asynchronous step under the runtime's staleness rule (rl/rollout/pool.py), call by call.

Letters: B groups trained per step, G responses per group, C = `chunk` (new tokens a response
may decode per step), s = `max_staleness`, P the prompt width.

`step_model.async_steady` keeps every slot busy and only reports how many responses outlive
the bound. The runtime enforces it (rl/rollout/pool.py, `PartialRollouts.next_batch`), and this
module models what that costs:
  1. admit: new groups while the pool holds fewer than B (s + 1) and fewer than B (k + 1 + s)
     were admitted over the run;
  2. one sampler call over every unfinished response of the pool: a response of a group
     admitted s or more steps ago ("due") decodes to its end (it is *forced*); the others
     decode at most C tokens, or, with `interrupt` (`stale.partial_interrupt`, the default)
     and a due response in the call, until the last due one ends;
  3. should fewer than B groups be complete, further calls give the oldest unfinished groups
     their whole budget (they are forced too) until B are;
  4. the B oldest complete groups are trained.
A call runs on `cost.slots` slots with continuous batching inside it (a freed slot takes the
next waiting request, in pool order: oldest groups first); every decode step costs
`cost.step_s` of the cached positions its slots hold (a finished slot that is not refilled is
still read, as in `step_model.sync_call`). A continued response is prefilled again through the
seed path (P + its tokens so far) unless `reprefill` is False. Steps run from an empty pool;
the figures are means over the steps after `warmup`. Each step admits groups whose G lengths
are a seeded permutation of the step's representative lengths, so the mix is stationary.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np


@dataclasses.dataclass
class _Resp:
    length: int  # the response's full length (tokens)
    done: int = 0  # tokens decoded so far
    first: int = -1  # the step (version) of its first token
    forced: str = ""  # "due" | "batch": a call made it decode to its end, and why


@dataclasses.dataclass
class _Group:
    admitted: int
    gid: int
    resps: list[_Resp]

    @property
    def complete(self) -> bool:
        return all(r.done >= r.length for r in self.resps)


def _segment_s(cost, kv0: float, live: int, steps: int) -> float:
    """Seconds of `steps` decode steps whose cached positions start at kv0 and grow by `live`
    per step: sum over t < steps of max(flops, fixed + kv_s (kv0 + live t)) + ici."""
    if steps <= 0:
        return 0.0
    a, b = cost.fixed_s + cost.kv_s_per_token * kv0, cost.kv_s_per_token * live
    # first t at which the HBM term reaches the compute term
    if a >= cost.flops_s:
        t0 = 0
    elif b <= 0:
        t0 = steps
    else:
        t0 = min(steps, int(np.ceil((cost.flops_s - a) / b)))
    n = steps - t0
    hbm = n * a + b * (t0 + steps - 1) * n / 2 if n else 0.0
    return cost.flops_s * t0 + hbm + steps * cost.ici_s


def run_call(requests: list[tuple[_Resp, int, bool]], cost, prompt_len: int,
             step: int, reprefill: bool) -> dict:
    """One sampler call. requests: (response, budget, interruptible) in pool order; a call ends
    when every non-interruptible request reached its budget (the others stop there). Decodes
    into the responses; returns the call's decode steps, seconds, tokens, prefill tokens and
    slot-steps."""
    slots = cost.slots
    queue = list(range(len(requests)))[::-1]
    slot_req = np.full(slots, -1, np.int64)
    cached = np.zeros(slots, np.float64)  # P + tokens before the call, per occupied slot
    done = np.zeros(slots, np.int64)
    budget = np.zeros(slots, np.int64)
    mandatory_left = sum(not r[2] for r in requests)
    out = dict(decode_steps=0, decode_s=0.0, tokens=0, prefill_tokens=0, slot_steps=0)

    def start(s: int) -> None:
        i = queue.pop()
        resp, b, _ = requests[i]
        slot_req[s], done[s], budget[s] = i, 0, b
        cached[s] = prompt_len + resp.done
        out["prefill_tokens"] += prompt_len + (resp.done if reprefill else 0)

    def finish(s: int) -> None:
        nonlocal mandatory_left
        resp, _, optional = requests[slot_req[s]]
        if resp.first < 0 and done[s]:
            resp.first = step
        resp.done += int(done[s])
        mandatory_left -= not optional

    for s in range(min(slots, len(queue))):
        start(s)
    active = slot_req >= 0
    while mandatory_left > 0:
        live = active & (done < budget)
        if not live.any():
            break
        t = int((budget - done)[live].min())
        kv0 = float((cached + done)[slot_req >= 0].sum())
        n = int(live.sum())
        out["decode_s"] += _segment_s(cost, kv0, n, t)
        out["decode_steps"] += t
        out["tokens"] += n * t
        out["slot_steps"] += slots * t
        done[live] += t
        for s in np.flatnonzero(live & (done >= budget)):
            finish(s)
            active[s] = False
            if queue and mandatory_left > 0:
                start(s)
                active[s] = True
    for s in np.flatnonzero(active):  # interrupted when the last mandatory request ended
        resp = requests[slot_req[s]][0]
        if resp.first < 0 and done[s]:
            resp.first = step
        resp.done += int(done[s])
    return out


def async_runtime(lengths: Sequence[int], cost, prompt_len: int, prefill_s_per_token: float = 0.0,
                  *, group_size: int, chunk: int, max_staleness: int, interrupt: bool = True,
                  reprefill: bool = True, steps: int = 40, warmup: int = 10,
                  seed: int = 0) -> dict:
    """The asynchronous step under the runtime's rule (module docstring), steady-state means.
    `lengths`: one step's B G responses. Returns decode steps, seconds (decode, prefill),
    tokens trained per step, slot occupancy, calls per step, and which responses it forced:
    the share of trained responses (and of their tokens) a call ran to their end, how many of
    those were due (admitted s steps before) and how many the batch rule forced, the shortest
    forced response, and the oldest trained token's age (never above s)."""
    n = len(lengths)
    for name, v, lo in (("group_size", group_size, 1), ("chunk", chunk, 1),
                        ("max_staleness", max_staleness, 0), ("steps", steps, warmup + 1)):
        if v < lo:
            raise ValueError(f"{name}={v}: must be >= {lo}")
    if n % group_size:
        raise ValueError(f"lengths: {n} responses are not groups of group_size={group_size}")
    b, s = n // group_size, max_staleness
    rng = np.random.default_rng(seed)
    pool: list[_Group] = []
    upcoming: list[int] = []
    admitted = 0
    acc = dict(decode_steps=0, decode_s=0.0, prefill_tokens=0, tokens_trained=0, decoded=0,
               slot_steps=0, calls=0, forced=0, forced_due=0, forced_batch=0, forced_tokens=0,
               responses=0)
    shortest_forced, oldest = None, 0
    for k in range(steps):
        while len(pool) < b * (s + 1) and admitted < b * (k + 1 + s):
            if not upcoming:  # the next B groups: a seeded permutation of the step's lengths
                upcoming = rng.permutation(np.asarray(lengths, np.int64)).tolist()
            pool.append(_Group(k, admitted, [_Resp(int(upcoming.pop()))
                                             for _ in range(group_size)]))
            admitted += 1
        tally = dict(decode_steps=0, decode_s=0.0, tokens=0, prefill_tokens=0, slot_steps=0)
        due_any = any(k - g.admitted >= s and not g.complete for g in pool)
        reqs, forced_due = [], []
        for g in pool:
            is_due = k - g.admitted >= s
            for r in g.resps:
                left = r.length - r.done
                if left <= 0:
                    continue
                if is_due:
                    reqs.append((r, left, False))
                    forced_due.append(r)
                elif interrupt and due_any:
                    reqs.append((r, left, True))
                else:
                    reqs.append((r, min(chunk, left), False))
        calls = 0
        if reqs:
            _add(tally, run_call(reqs, cost, prompt_len, k, reprefill))
            calls += 1
        for r in forced_due:
            r.forced = r.forced or "due"
        while True:
            ready = sorted((g for g in pool if g.complete), key=lambda g: (g.admitted, g.gid))
            if len(ready) >= b:
                break
            short = sorted((g for g in pool if not g.complete), key=lambda g: (g.admitted, g.gid))
            extra = [(r, r.length - r.done, False) for g in short[: b - len(ready)]
                     for r in g.resps if r.done < r.length]
            for r, _, _ in extra:
                r.forced = r.forced or "batch"
            _add(tally, run_call(extra, cost, prompt_len, k, reprefill))
            calls += 1
        train = ready[:b]
        pool = [g for g in pool if g not in train]
        if k < warmup:
            continue
        for g in train:
            oldest = max(oldest, k - min(r.first for r in g.resps))
            for r in g.resps:
                acc["responses"] += 1
                acc["tokens_trained"] += r.length
                if r.forced:
                    acc["forced"] += 1
                    acc["forced_due" if r.forced == "due" else "forced_batch"] += 1
                    acc["forced_tokens"] += r.length
                    shortest_forced = (r.length if shortest_forced is None
                                       else min(shortest_forced, r.length))
        for key in ("decode_steps", "decode_s", "prefill_tokens", "slot_steps"):
            acc[key] += tally[key]
        acc["decoded"] += tally["tokens"]
        acc["calls"] += calls
    m = steps - warmup
    resp = max(acc["responses"], 1)
    return dict(
        rule="runtime", slots=cost.slots, chunk=chunk, max_staleness=s, interrupt=interrupt,
        tokens=acc["tokens_trained"] / m, decode_steps=acc["decode_steps"] / m,
        decode_s=acc["decode_s"] / m,
        prefill_s=prefill_s_per_token * acc["prefill_tokens"] / m, reprefill_s=0.0,
        occupancy=acc["decoded"] / max(acc["slot_steps"], 1), calls_per_step=acc["calls"] / m,
        forced_share=acc["forced"] / resp, forced_due_share=acc["forced_due"] / resp,
        forced_batch_share=acc["forced_batch"] / resp,
        forced_token_share=acc["forced_tokens"] / max(acc["tokens_trained"], 1),
        shortest_forced=shortest_forced, oldest_token_age=oldest)


def _add(total: dict, call: dict) -> None:
    for key, v in call.items():
        total[key] += v
