"""The samples of a training step: generation from prompts (and seeds), scoring, and the packed
form a checkpoint keeps (the learner's rows are laid out from them by rl/learn/layout.py).

Letters: N samples (B prompts x G), P prompt width, R response width.

A trained sample is `o = [h, y]`: an optional seed `h` (tokens of a behavior response, with the
behavior log-probs the learner computed at refresh time) and the continuation `y` written by the
current policy (with the sampler's log-probs). On-policy samples have an empty seed.

LUFFY off-policy traces are samples whose whole response is the "seed" (an external trace, marked
off-policy by the seed mask, behavior log-probs 0 = pi_phi taken as 1) and whose continuation is
empty; they are the first sample of their group. Optional per-sample extras: `old_logp` (learner
log-probs under the policy that generated the sample: M2PO stale rollouts) and the proposal's top-K
(`topk_ids` / `topk_logp`, SIS) for the first rows of the response.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

# sampler(params, requests, max_new_tokens per request, seed) -> [(tokens, logprobs, finish)]
SampleFn = Callable[[Any, list[list[int]], list[int], int], list[tuple[list[int], Any, str]]]


@dataclasses.dataclass
class Sample:
    group: int  # index of the prompt within the batch
    prompt_ids: list[int]
    reference: Any
    seed_ids: list[int]
    seed_logp: np.ndarray  # behavior log-probs of the seed tokens (learner, under pi_b)
    cont_ids: list[int]
    cont_logp: np.ndarray  # sampler log-probs of the continuation tokens
    finish: str  # "stop" | "length" | "error"
    reward: float = 0.0
    reward_reason: str = ""
    offpolicy: bool = False  # an external (LUFFY) trace: seed_ids is the whole response
    old_logp: np.ndarray | None = None  # [|o|] learner log-probs under the generating policy
    topk_ids: np.ndarray | None = None  # [L, K] int32 proposal top-K ids of response tokens 0..L-1
    topk_logp: np.ndarray | None = None  # [L, K] float32 their proposal log-probs
    # partial rollouts (rl/rollout/pool.py): the version (step) that wrote each response token, and
    # the sampler's log-probs of the seed tokens (seed_logp holds the learner's)
    versions: np.ndarray | None = None
    seed_sampler_logp: np.ndarray | None = None
    adv_factor: float = 1.0  # the sample's advantage is scaled by this (FR3E's value factor)

    @property
    def response_ids(self) -> list[int]:
        return list(self.seed_ids) + list(self.cont_ids)


def continue_samples(sample_fn: SampleFn, params, prompts: Sequence[list[int]], references,
                     group_size: int, max_response_len: int, seed, *, seeds=None,
                     offpolicy=None, stop_ids: Sequence[int] = ()) -> list[Sample]:
    """Writes continuations for B prompts x G samples (from their seeds, if given) in group order.

    `seeds`: optional (seed token lists, seed log-prob arrays[, seed top-K (ids, logp) pairs]), N
    each; the request is prompt + seed and the continuation gets the remaining
    `max_response_len - |seed|` tokens.
    `offpolicy`: optional B entries, a trace (token list) or None per prompt; a trace replaces the
    group's first sample (truncated to `max_response_len`; finish "stop" if it ends with one of
    `stop_ids`, else "length") and nothing is generated for it.
    """
    n = len(prompts) * group_size
    seed_ids = [[] for _ in range(n)] if seeds is None else [list(s) for s in seeds[0]]
    seed_logp = ([np.zeros(0, np.float32) for _ in range(n)] if seeds is None
                 else [np.asarray(x, np.float32) for x in seeds[1]])
    seed_topk = [None] * n if seeds is None or len(seeds) < 3 else list(seeds[2])
    if offpolicy is not None and len(offpolicy) != len(prompts):
        raise ValueError(f"offpolicy: expected {len(prompts)} entries (one per prompt), got "
                         f"{len(offpolicy)}")
    fixed: dict[int, Sample] = {}
    for g, trace in enumerate(offpolicy or ()):
        if trace is None:
            continue
        ids = [int(t) for t in trace][:max_response_len]
        stopped = bool(ids) and ids[-1] in set(stop_ids) and len(ids) == len(trace)
        fixed[g * group_size] = Sample(
            group=g, prompt_ids=list(prompts[g]), reference=references[g], seed_ids=ids,
            seed_logp=np.zeros(len(ids), np.float32), cont_ids=[],
            cont_logp=np.zeros(0, np.float32), finish="stop" if stopped else "length",
            offpolicy=True)
    requests, budgets, index = [], [], []
    for i in range(n):
        if i in fixed:
            continue
        g = i // group_size
        requests.append(list(prompts[g]) + seed_ids[i])
        budgets.append(max_response_len - len(seed_ids[i]))
        index.append(i)
    # A collective sampler (hosts.gathered_sample_fn) runs on every host, also with no
    # requests here: the other hosts' requests need this host's devices.
    call = bool(requests) or getattr(sample_fn, "collective", False)
    results = sample_fn(params, requests, budgets, seed) if call else []
    samples: list[Sample | None] = [fixed.get(i) for i in range(n)]
    for i, (tokens, logprobs, finish) in zip(index, results):
        g = i // group_size
        topk = seed_topk[i]
        samples[i] = Sample(group=g, prompt_ids=list(prompts[g]), reference=references[g],
                            seed_ids=seed_ids[i], seed_logp=seed_logp[i], cont_ids=list(tokens),
                            cont_logp=np.asarray(logprobs, np.float32), finish=finish,
                            topk_ids=None if topk is None else topk[0],
                            topk_logp=None if topk is None else topk[1])
    return samples


def score_samples(samples: list[Sample], reward_fn, decode: Callable[[list[int]], str]) -> None:
    """Fills `reward` / `reward_reason` in place; a failing reward is 0 with its reason."""
    texts = [decode(s.response_ids) for s in samples]
    results = reward_fn(texts, [s.reference for s in samples])
    for s, (score, reason) in zip(samples, results):
        s.reward, s.reward_reason = float(score), reason or ""


# ---- checkpointing of queued samples (M2PO's lag): flat arrays + a JSON part ----
def flat_ragged(parts, dtype, tail=()):
    """Concatenation of ragged arrays, plus one trailing pad row (Orbax refuses zero-size arrays)."""
    pad = np.zeros((1,) + tuple(tail), dtype)
    return np.concatenate([np.asarray(p, dtype).reshape((-1,) + tuple(tail)) for p in parts] + [pad])


def pack_samples(samples: list[Sample]) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """(arrays, json) with every field of the samples; `unpack_samples` inverts it exactly."""
    k = next((s.topk_ids.shape[1] for s in samples if s.topk_ids is not None), 0)
    lens = np.array([[len(s.prompt_ids), len(s.seed_ids), len(s.cont_ids),
                      -1 if s.old_logp is None else len(s.old_logp),
                      -1 if s.topk_ids is None else len(s.topk_ids)] for s in samples],
                    np.int64).reshape(-1, 5)
    arrays = {
        "lengths": np.concatenate([lens, np.zeros((1, 5), np.int64)]),
        "prompt_ids": flat_ragged([s.prompt_ids for s in samples], np.int32),
        "seed_ids": flat_ragged([s.seed_ids for s in samples], np.int32),
        "seed_logp": flat_ragged([s.seed_logp for s in samples], np.float32),
        "cont_ids": flat_ragged([s.cont_ids for s in samples], np.int32),
        "cont_logp": flat_ragged([s.cont_logp[: len(s.cont_ids)] for s in samples], np.float32),
        "old_logp": flat_ragged([s.old_logp for s in samples if s.old_logp is not None], np.float32),
        "topk_ids": flat_ragged([s.topk_ids for s in samples if s.topk_ids is not None], np.int32,
                          (max(k, 1),) if k else (1,)),
        "topk_logp": flat_ragged([s.topk_logp for s in samples if s.topk_logp is not None],
                           np.float32, (max(k, 1),) if k else (1,)),
    }
    # partial rollouts' per-token versions and carried sampler log-probs (-1: none)
    more = np.array([[-1 if s.versions is None else len(s.versions),
                      -1 if s.seed_sampler_logp is None else len(s.seed_sampler_logp)]
                     for s in samples], np.int64).reshape(-1, 2)
    arrays["more_lengths"] = np.concatenate([more, np.zeros((1, 2), np.int64)])
    arrays["versions"] = flat_ragged([s.versions for s in samples if s.versions is not None], np.int32)
    arrays["seed_sampler_logp"] = flat_ragged([s.seed_sampler_logp for s in samples
                                         if s.seed_sampler_logp is not None], np.float32)
    meta = {"top_k": k, "samples": [
        {"group": s.group, "reference": s.reference, "finish": s.finish, "reward": s.reward,
         "reward_reason": s.reward_reason, "offpolicy": s.offpolicy,
         "adv_factor": s.adv_factor} for s in samples]}
    return arrays, meta


def unpack_samples(arrays: dict[str, Any], meta: dict[str, Any]) -> list[Sample]:
    lens = np.asarray(arrays["lengths"])[:-1]
    k = int(meta["top_k"])
    cur = dict.fromkeys(("prompt", "seed", "cont", "old", "topk", "versions", "sslp"), 0)

    def take(name, key, n):
        start = cur[key]
        cur[key] += n
        return np.asarray(arrays[name])[start : start + n]

    # checkpoints written before versions were kept have no "more_lengths": None for both
    more = (np.asarray(arrays["more_lengths"])[:-1].tolist() if "more_lengths" in arrays
            else [[-1, -1]] * len(lens))
    out = []
    for (lp, ls, lc, lo, lk), (lv, lq), m in zip(lens.tolist(), more, meta["samples"]):
        prompt = take("prompt_ids", "prompt", lp).tolist()
        seed_ids = take("seed_ids", "seed", ls).tolist()
        seed_logp = np.asarray(arrays["seed_logp"])[cur["seed"] - ls : cur["seed"]].copy()
        cont_ids = take("cont_ids", "cont", lc).tolist()
        cont_logp = np.asarray(arrays["cont_logp"])[cur["cont"] - lc : cur["cont"]].copy()
        old = None if lo < 0 else take("old_logp", "old", lo).copy()
        tids = tlp = None
        if lk >= 0:
            tids = take("topk_ids", "topk", lk)[:, :k].copy()
            tlp = np.asarray(arrays["topk_logp"])[cur["topk"] - lk : cur["topk"], :k].copy()
        out.append(Sample(group=m["group"], prompt_ids=prompt, reference=m["reference"],
                          seed_ids=seed_ids, seed_logp=seed_logp, cont_ids=cont_ids,
                          cont_logp=cont_logp, finish=m["finish"], reward=m["reward"],
                          reward_reason=m["reward_reason"], offpolicy=m["offpolicy"],
                          old_logp=old, topk_ids=tids, topk_logp=tlp,
                          versions=None if lv < 0 else take("versions", "versions", lv).copy(),
                          seed_sampler_logp=None if lq < 0 else
                          take("seed_sampler_logp", "sslp", lq).copy(),
                          adv_factor=float(m.get("adv_factor", 1.0))))
    return out
