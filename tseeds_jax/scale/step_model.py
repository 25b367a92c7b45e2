"""Step time over a response-length distribution, synchronous vs asynchronous (issue #37).

Inputs: the responses of one step (`lengths`, tokens; `length_distribution.lengths` gives a
representative batch), the prompt width P, a decode step's cost as a function of the cached
positions it reads (`DecodeCost`), the prefill cost per token, the weight sync and the learner
update's time. Nothing here knows where the costs come from: `tseeds compile` builds them from the
compiled sampler programs (compile-only bounds), `tseeds plan` from the decode layout's analytic
model; the step times on top are *estimates*.

* sync (`sync_call`): today's driver. The step's requests fill the slots (continuous batching
  within the call: a finished slot takes the next waiting request); the call ends when its
  longest response ends; every decode step runs the fixed-shape program over all slots and reads
  the weights. A finished slot that is not refilled keeps its cache length (layers.py
  `_decode_one` reads `write_B + 1` positions of every slot), so its cache is still read. The
  learner waits for the last token.
* async under the runtime's rule (`step_runtime.async_runtime`, the headline "async"): the
  pool of rl/rollout/pool.py simulated call by call, with the staleness bound enforced as the
  runtime enforces it: a response of a group admitted `max_staleness` steps ago decodes to its
  end in the step's call (forced), the others at most C tokens (or, by default, until the last
  forced one ends), further calls force the oldest groups when fewer than B are complete. The
  estimate says which responses it forces (share of responses and tokens, the shortest).
* async without the bound (`async_steady`, "async_unbounded"): partial rollouts + continuous
  batching across steps, steady state.
  Every slot is always live (a freed slot takes the next prompt); a step's batch is ready after a
  token budget (default: the sync batch's tokens, so both train on the same tokens per step), so
  a step takes budget / slots decode steps; responses unfinished at the budget are interrupted and
  continued by the next policy through the seed path, which prefills their prefix again
  (`reprefill`; False if the runtime keeps the KV cache). In steady state a slot is at token j of
  a response of length L with probability proportional to 1 for every (response, j): the mean
  cached length per slot is P + sum L(L-1)/2 / sum L.
  Two placements:
  - "interleaved" (shipped default): generation and the update take turns on the same chips;
    step = weight sync + prefills + decode + update. The sampler uses the newest weights at each
    window (version lag 0); only a partial rollout's earlier segments are older.
  - "split": the sampler on r of the decode layout's replicas' chips, the learner on the rest,
    running at the same time one version apart (max_staleness >= 1); each side's time scales with
    its share of the chips (linear scaling, memory of the smaller learner mesh not checked);
    step = max(generation / a, update / (1 - a)) + weight sync, best r (generated one step ahead,
    the pool's own bound is max_staleness - 1). Since generation <= a T
    and update <= (1 - a) T give generation + update <= T, the split never beats "interleaved"
    in this model; it is reported to show that the gain is occupancy, not overlap.

Version lag (staleness) of a token: with d decode steps per training step and a response
starting at a uniform phase within a window, its token j lands in window floor((phase + j) / d)
and the response is trained after the window where it ends; the lag is the difference (+1 with
"split"). `async_steady` does not enforce `max_staleness`: it reports the share of responses
whose oldest token is older, which the runtime's rule forces to finish instead.
"""

from __future__ import annotations

import collections
import dataclasses
import math
from collections.abc import Sequence

import numpy as np

PLACEMENTS = ("interleaved", "split")


@dataclasses.dataclass(frozen=True)
class DecodeCost:
    """Seconds of one decode step of a call of `slots` slots: max(compute, HBM) + collectives,
    HBM = everything but the KV cache + the cached positions read (summed over the call's slots)
    x seconds per position."""

    slots: int
    fixed_s: float  # HBM seconds of the weights, logits, state: independent of the cache read
    kv_s_per_token: float  # HBM seconds per cached position read, summed over every slot
    flops_s: float = 0.0  # compute seconds (a fixed-shape program computes every slot)
    ici_s: float = 0.0  # collectives, serial

    def step_s(self, kv_tokens: float) -> float:
        return max(self.flops_s, self.fixed_s + self.kv_s_per_token * kv_tokens) + self.ici_s


def _curve(live: Sequence[int], slots: int, points: int = 10) -> list[float]:
    """Slot occupancy (live / slots) averaged over `points` equal shares of the call's steps."""
    n = len(live)
    if n == 0:
        return []
    out = []
    for k in range(points):
        a, b = k * n // points, max((k + 1) * n // points, k * n // points + 1)
        out.append(sum(live[a:b]) / ((b - a) * slots))
    return out


def sync_call(lengths: Sequence[int], cost: DecodeCost, prompt_len: int,
              prefill_s_per_token: float = 0.0) -> dict:
    """One synchronous sampler call of the step's requests (in the given order) on
    `cost.slots` slots: decode steps until the last response ends, their time, prefill time,
    tokens and slot occupancy (live slots / slots per decode step)."""
    slots = cost.slots
    if slots <= 0:
        raise ValueError(f"slots={slots}: must be positive")
    queue = list(reversed(lengths))
    target = np.zeros(slots, np.int64)  # response length in the slot (0: empty)
    done = np.zeros(slots, np.int64)  # tokens emitted so far
    for s in range(min(slots, len(queue))):
        target[s] = queue.pop()
    decode_s, live_trace = 0.0, []
    while True:
        live = done < target
        n_live = int(live.sum())
        if not n_live:
            break
        # a live slot at its token j reads P + j cached positions; a finished slot P + L
        kv = float(((prompt_len + done) * (target > 0)).sum())
        decode_s += cost.step_s(kv)
        live_trace.append(n_live)
        done += live
        for s in np.flatnonzero(live & (done == target)):
            if queue:  # the driver refills a finished slot while requests wait
                target[s], done[s] = queue.pop(), 0
    tokens = sum(lengths)
    steps = len(live_trace)
    return dict(requests=len(lengths), slots=slots, tokens=tokens, decode_steps=steps,
                decode_s=decode_s, prefill_s=prefill_s_per_token * prompt_len * len(lengths),
                occupancy=tokens / (steps * slots) if steps else 0.0,
                occupancy_curve=_curve(live_trace, slots))


def mean_position(lengths: Sequence[int]) -> float:
    """Mean token index j of a live slot in steady state: sum L(L-1)/2 / sum L."""
    total = sum(lengths)
    return sum(n * (n - 1) / 2 for n in lengths) / total if total else 0.0


def version_lags(lengths: Sequence[int], d: float, offset: int = 0,
                 phases: int = 64) -> tuple[list[float], list[float]]:
    """(share of tokens by version lag, share of responses by their oldest token's lag) with
    d decode steps per training step, the phase of a response's start uniform over a window."""
    tok = np.zeros(1)
    resp = np.zeros(1)
    for length, count in collections.Counter(lengths).items():
        for k in range(phases):
            phi = (k + 0.5) / phases * d
            first, last = math.floor(phi / d), math.floor((phi + length - 1) / d)
            w = np.arange(first, last + 1)
            # tokens j of window w: ceil(w d - phi) <= j < ceil((w + 1) d - phi), within [0, L)
            n = (np.minimum(length, np.ceil((w + 1) * d - phi))
                 - np.maximum(0, np.ceil(w * d - phi)))
            lag = last - w + offset
            if lag.max() >= tok.size:
                tok = np.pad(tok, (0, lag.max() + 1 - tok.size))
            np.add.at(tok, lag, np.maximum(n, 0) * count)
            oldest = last - first + offset
            if oldest >= resp.size:
                resp = np.pad(resp, (0, oldest + 1 - resp.size))
            resp[oldest] += count
    return (tok / tok.sum()).tolist(), (resp / resp.sum()).tolist()


def async_steady(lengths: Sequence[int], cost: DecodeCost, prompt_len: int,
                 prefill_s_per_token: float = 0.0, *, budget_tokens: float | None = None,
                 reprefill: bool = True) -> dict:
    """One training step of the asynchronous sampler in steady state (every slot live)."""
    slots = cost.slots
    total = sum(lengths)
    budget = float(total if budget_tokens is None else budget_tokens)
    if budget <= 0 or total <= 0:
        raise ValueError(f"budget_tokens={budget_tokens}: must be positive")
    d = budget / slots  # decode steps per training step
    if d < 1:
        raise ValueError(f"budget_tokens={budget:g}: less than one decode step of the {slots} "
                         "slots")
    j = mean_position(lengths)
    kv = slots * (prompt_len + j)
    new_prompts = len(lengths) * budget / total  # responses completed per step
    reprefill_tokens = slots * (prompt_len + j) if reprefill else 0.0
    return dict(requests=new_prompts, slots=slots, tokens=budget, decode_steps=d,
                decode_s=d * cost.step_s(kv),
                prefill_s=prefill_s_per_token * prompt_len * new_prompts,
                reprefill_s=prefill_s_per_token * reprefill_tokens, occupancy=1.0,
                occupancy_curve=[1.0] * 10, mean_cached_len=prompt_len + j)


def estimate(lengths: Sequence[int], cost: DecodeCost, *, prompt_len: int, update_s: float,
             chips: int, prefill_s_per_token: float = 0.0, sync_s: float = 0.0,
             budget_tokens: float | None = None, reprefill: bool = True,
             max_staleness: int | None = None,
             replicas: int = 1, placement: str = "interleaved", group_size: int = 1,
             partial_tokens: int | None = None, interrupt: bool = True) -> dict:
    """Sync and async step time, tokens/s/chip and speed-up for one step's responses.
    "async": the runtime's rule (`step_runtime.async_runtime`: the staleness bound enforced by
    forcing due responses to finish; C = `partial_tokens`, default the steady model's decode
    steps per step, so that both give every slot the same window); "async_unbounded": the
    steady-state model without the bound (`async_steady`, every slot busy), with the share of
    its responses older than allowed. `replicas`: the decode layout's replicas (the split
    placement gives the sampler r of them; generated one step ahead, its pool's own bound is
    max_staleness - 1, as in rl/rollout/pool.py); `placement`: which async estimate is the headline
    ("interleaved" or "split"). max_staleness: None = the runs' default (`config.stale`)."""
    from tseeds_jax.scale.step_runtime import async_runtime

    if max_staleness is None:
        from tseeds_jax.rl.config.sections import StaleConfig

        max_staleness = StaleConfig.max_staleness

    if placement not in PLACEMENTS:
        raise ValueError(f"placement={placement!r}: expected one of {PLACEMENTS}")
    if max_staleness < 0:
        raise ValueError(f"max_staleness={max_staleness}: must be >= 0")
    s = sync_call(lengths, cost, prompt_len, prefill_s_per_token)
    s_gen = sync_s + s["prefill_s"] + s["decode_s"]
    s_step = s_gen + update_s
    a = async_steady(lengths, cost, prompt_len, prefill_s_per_token,
                     budget_tokens=budget_tokens, reprefill=reprefill)
    a_gen = sync_s + a["prefill_s"] + a["reprefill_s"] + a["decode_s"]
    chunk = partial_tokens or max(1, int(round(a["decode_steps"])))
    rule = dict(group_size=group_size, chunk=chunk, interrupt=interrupt, reprefill=reprefill)
    rt = async_runtime(lengths, cost, prompt_len, prefill_s_per_token,
                       max_staleness=max_staleness, **rule)
    rt_gen = sync_s + rt["prefill_s"] + rt["decode_s"]
    split = None
    if replicas > 1 and max_staleness >= 1:
        ahead = async_runtime(lengths, cost, prompt_len, prefill_s_per_token,
                              max_staleness=max_staleness - 1, **rule)
        g = ahead["prefill_s"] + ahead["decode_s"]
        best = min(range(1, replicas), key=lambda r: max(g * replicas / r,
                                                          update_s * replicas / (replicas - r)))
        t = max(g * replicas / best, update_s * replicas / (replicas - best)) + sync_s
        split = dict(step_s=t, sampler_replicas=best, replicas=replicas,
                     tokens_per_s_per_chip=ahead["tokens"] / t / chips)
    inter = rt_gen + update_s
    head = inter if placement == "interleaved" or split is None else split["step_s"]
    lag_tok, lag_resp = version_lags(lengths, a["decode_steps"],
                                     offset=1 if placement == "split" else 0)
    over = sum(lag_resp[max_staleness + 1:])
    sync = dict(s, generation_s=s_gen, update_s=update_s, step_s=s_step,
                tokens_per_s_per_chip=s["tokens"] / s_step / chips)
    asy = dict(rt, generation_s=rt_gen, update_s=update_s, step_s=head, interleaved_step_s=inter,
               split=split, placement=placement,
               tokens_per_s_per_chip=(rt["tokens"] if head == inter else
                                      split["tokens_per_s_per_chip"] * head * chips)
               / head / chips)
    free = a_gen + update_s
    unbounded = dict(a, generation_s=a_gen, update_s=update_s, step_s=free,
                     tokens_per_s_per_chip=a["tokens"] / free / chips,
                     max_staleness=max_staleness, token_lag_share=lag_tok,
                     response_oldest_lag_share=lag_resp, responses_over_staleness=over)
    return {"sync": sync, "async": asy, "async_unbounded": unbounded,
            "speedup": asy["tokens_per_s_per_chip"] / sync["tokens_per_s_per_chip"],
            "speedup_unbounded": unbounded["tokens_per_s_per_chip"]
            / sync["tokens_per_s_per_chip"]}


def plan_inputs(w, hbm_bytes=None) -> dict | None:
    """`step_model_inputs` (the keys `compile_run.step_model_inputs` gives) from the planner's
    workload and the decode layout's analytic model (`decode_layout.step_time`: weights + KV
    reads over HBM, the tensor all-reduces over ICI; HBM-bound, no compute term), prefill
    2 x params FLOPs per token over every chip. None unless the sampler has the decode layout on
    a known chip. No weight sync."""
    from tseeds_jax import chips as chips_lib
    from tseeds_jax import decode_layout as dl
    from tseeds_jax.scale.plan_common import cache_bucket
    from tseeds_jax.scale.plan_sampler import workload_decode_choice

    if w.sampler_placement != "decode" or w.family not in chips_lib.FAMILIES:
        return None
    chip = chips_lib.chip(w.family)
    dm, choice = workload_decode_choice(w, hbm_bytes)
    t, reps = choice.layout.tensor, choice.layout.replicas
    slots_rep = w.sampler_slots // reps if w.sampler_slots else \
        dl.balanced_slots(-(-w.sequences // reps), max(choice.fit, 1))
    _, ici = dl.step_time(dm, t, slots_rep, 0, chip.hbm_bandwidth, chip.ici_one_way)
    params = w.model.num_params
    return dict(
        topology=f"{w.num_devices} x {w.family}", chips=w.num_devices, replicas=reps,
        requests=w.sequences, slots=slots_rep * reps, prompt_len=w.prompt_len,
        max_response_len=w.response_len, cache_len=cache_bucket(w.prompt_len + w.response_len),
        length_distribution=w.length_distribution, basis="the planner's analytic decode model",
        decode_fixed_s=dm.weight_bytes / t / chip.hbm_bandwidth,
        decode_kv_s_per_token=dm.kv_bytes_per_token / (t * reps * chip.hbm_bandwidth),
        decode_flops_s=0.0, decode_ici_s=ici, decode_program="decode_layout.step_time (analytic)",
        prefill_s_per_token=2 * params / (w.num_devices * chip.bf16_flops), sync_s=0.0,
        update_flops_s=6 * params * w.sequences * (w.prompt_len + w.response_len)
        / (w.num_devices * chip.bf16_flops))
