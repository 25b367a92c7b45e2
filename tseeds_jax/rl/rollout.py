"""Samples of one training step and their assembly into a `LearnerBatch`.

Letters: N samples (B prompts x G), P prompt width, R response width.

A trained sample is `o = [h, y]`: an optional seed `h` (tokens of a behavior response, with the
behavior log-probs the learner computed at refresh time) and the continuation `y` written by the
current policy (with the sampler's log-probs). On-policy samples have an empty seed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tseeds_jax.rl import advantages as adv_lib
from tseeds_jax.rl.learner import LearnerBatch

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

    @property
    def response_ids(self) -> list[int]:
        return list(self.seed_ids) + list(self.cont_ids)


def continue_samples(sample_fn: SampleFn, params, prompts: Sequence[list[int]], references,
                     group_size: int, max_response_len: int, seed: int, *, seeds=None) -> list[Sample]:
    """Writes continuations for B prompts x G samples (from their seeds, if given) in group order.

    `seeds`: optional (seed token lists, seed log-prob arrays), N each; the request is prompt + seed
    and the continuation gets the remaining `max_response_len - |seed|` tokens.
    """
    n = len(prompts) * group_size
    seed_ids = [[] for _ in range(n)] if seeds is None else [list(s) for s in seeds[0]]
    seed_logp = ([np.zeros(0, np.float32) for _ in range(n)] if seeds is None
                 else [np.asarray(x, np.float32) for x in seeds[1]])
    requests, budgets, groups = [], [], []
    for i in range(n):
        g = i // group_size
        requests.append(list(prompts[g]) + seed_ids[i])
        budgets.append(max_response_len - len(seed_ids[i]))
        groups.append(g)
    results = sample_fn(params, requests, budgets, seed)
    samples = []
    for i, (tokens, logprobs, finish) in enumerate(results):
        samples.append(Sample(group=groups[i], prompt_ids=list(prompts[groups[i]]),
                              reference=references[groups[i]], seed_ids=seed_ids[i],
                              seed_logp=seed_logp[i], cont_ids=list(tokens),
                              cont_logp=np.asarray(logprobs, np.float32), finish=finish))
    return samples


def score_samples(samples: list[Sample], reward_fn, decode: Callable[[list[int]], str]) -> None:
    """Fills `reward` / `reward_reason` in place; a failing reward is 0 with its reason."""
    texts = [decode(s.response_ids) for s in samples]
    results = reward_fn(texts, [s.reference for s in samples])
    for s, (score, reason) in zip(samples, results):
        s.reward, s.reward_reason = float(score), reason or ""


def sample_advantages(samples: list[Sample], *, norm_by_std: bool, max_response_len: int,
                      overlong_buffer: int = 0, overlong_penalty: float = 1.0) -> np.ndarray:
    """GRPO advantages [N] over each prompt's group (DAPO soft overlong penalty if enabled)."""
    scores = np.array([s.reward for s in samples], np.float64)
    if overlong_buffer:
        lengths = np.array([len(s.response_ids) for s in samples])
        scores = scores + adv_lib.overlong_penalty(lengths, max_resp_len=max_response_len,
                                                   buffer_len=overlong_buffer,
                                                   penalty_factor=overlong_penalty)
    groups = np.array([s.group for s in samples])
    return adv_lib.grpo_advantages(scores, groups, norm_by_std=norm_by_std)


def build_batch(samples: list[Sample], advantages_N, *, prompt_width: int, response_width: int,
                pad_id: int = 0, num_rows: int | None = None) -> LearnerBatch:
    """Numpy `LearnerBatch`: prompts left-padded to P, responses right-padded to R.

    `num_rows` > len(samples) appends fully-masked rows (kept out of every denominator), so that
    dynamic sampling with fewer kept groups still feeds the jitted step a fixed shape.
    """
    n = num_rows or len(samples)
    p, r = prompt_width, response_width
    tokens = np.full((n, p + r), pad_id, np.int32)
    attn = np.zeros((n, p + r), np.int32)
    resp = np.zeros((n, r), np.float32)
    seed = np.zeros((n, r), np.float32)
    blogp = np.zeros((n, r), np.float32)
    slogp = np.zeros((n, r), np.float32)
    adv = np.zeros((n,), np.float32)
    for i, s in enumerate(samples):
        if len(s.prompt_ids) > p:
            raise ValueError(f"prompt of {len(s.prompt_ids)} tokens exceeds prompt_width={p}")
        resp_ids = s.response_ids
        if len(resp_ids) > r:
            raise ValueError(f"response of {len(resp_ids)} tokens exceeds response_width={r}")
        tokens[i, p - len(s.prompt_ids) : p] = s.prompt_ids
        attn[i, p - len(s.prompt_ids) : p] = 1
        tokens[i, p : p + len(resp_ids)] = resp_ids
        attn[i, p : p + len(resp_ids)] = 1
        resp[i, : len(resp_ids)] = 1
        h = len(s.seed_ids)
        seed[i, :h] = 1
        blogp[i, :h] = s.seed_logp
        slogp[i, h : len(resp_ids)] = s.cont_logp[: len(s.cont_ids)]
        adv[i] = advantages_N[i]
    zeros = np.zeros((n, r), np.float32)
    return LearnerBatch(tokens_BT=tokens, attn_mask_BT=attn, resp_mask_BR=resp, seed_mask_BR=seed,
                        behavior_logp_BR=blogp, sampler_logp_BR=slogp, old_logp_BR=zeros,
                        ref_logp_BR=zeros.copy(), advantages_B=adv)


def sequences_for_stats(prompts_and_responses, prompt_width, response_width, pad_id=0):
    """(tokens_BT, attn_mask_BT) for learner statistics of (prompt, response) pairs."""
    n = len(prompts_and_responses)
    tokens = np.full((n, prompt_width + response_width), pad_id, np.int32)
    attn = np.zeros_like(tokens)
    for i, (prompt, response) in enumerate(prompts_and_responses):
        tokens[i, prompt_width - len(prompt) : prompt_width] = prompt
        attn[i, prompt_width - len(prompt) : prompt_width] = 1
        tokens[i, prompt_width : prompt_width + len(response)] = response
        attn[i, prompt_width : prompt_width + len(response)] = 1
    return tokens, attn
