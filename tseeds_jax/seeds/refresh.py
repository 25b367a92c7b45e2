"""Turning behavior rollouts into seeds (the truncation half of a refresh).

The trainer snapshots pi_b, has the sampler write behavior responses and the learner compute their
log-probs and entropies under pi_b; this module cuts each response into an independent seed. Each
sample gets its own generator derived from (run seed, step, sample index), so seeds do not depend
on batch composition or on how many hosts share the work.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

import tseeds_jax.seeds.selection as selection
import tseeds_jax.seeds.truncation as truncation
from tseeds_jax.seeds.cache import SeedBatch

_TRUNCATION_STREAM = 0x5EED


def sample_rngs(run_seed: int, step: int, n: int) -> list[np.random.Generator]:
    return [np.random.default_rng([run_seed, step, i, _TRUNCATION_STREAM]) for i in range(n)]


def make_seed_batch(prompt_ids, references, responses: Sequence[Sequence[int]], logp_NR: np.ndarray,
                    entropy_NR: np.ndarray, rule: truncation.TruncationRule, rngs) -> SeedBatch:
    """Cuts N behavior responses into seeds, keeping the behavior log-probs of the kept tokens.

    logp_NR / entropy_NR: learner statistics under pi_b, response-aligned (entry t is token t).
    """
    lengths = np.array([len(r) for r in responses], np.int32)
    cut = truncation.seed_lengths(rule, lengths, entropy_NR, rngs)
    seed_tokens = [list(r[:h]) for r, h in zip(responses, cut)]
    seed_logp = [np.asarray(logp_NR[i, :h], np.float32) for i, h in enumerate(cut)]
    return SeedBatch(prompt_ids=[list(p) for p in prompt_ids], references=list(references),
                     seed_tokens=seed_tokens, seed_logp=seed_logp, behavior_lengths=lengths)


def make_selected_seed_batch(prompt_ids, references, rollouts: selection.BehaviorRollouts,
                             chosen: selection.Selection, *, p_B=None,
                             gamma: float = float("nan")) -> SeedBatch:
    """Seeds as a selector chose them: sample i keeps `tokens[source[i]][:cut[i]]` and the
    behavior log-probs of those tokens (its source's, so the state+action loss still weighs them
    by pi_theta / pi_b). `p_B`: the prompts' success estimates at selection (adaptive only)."""
    src, cut = chosen.source_N, chosen.cut_N
    lengths = rollouts.lengths_N
    g = rollouts.group_size
    if np.any(src // g != np.arange(len(src)) // g):
        raise ValueError("a seed's source rollout must belong to the sample's own prompt")
    seed_tokens = [list(rollouts.tokens[j][:h]) for j, h in zip(src, cut)]
    seed_logp = [np.asarray(rollouts.logp_NR[j, :h], np.float32) for j, h in zip(src, cut)]
    p_sel = (np.full(len(src), np.nan) if p_B is None
             else np.repeat(np.asarray(p_B, np.float64), g))
    return SeedBatch(prompt_ids=[list(p) for p in prompt_ids], references=list(references),
                     seed_tokens=seed_tokens, seed_logp=seed_logp,
                     behavior_lengths=lengths[src].astype(np.int32),
                     source=np.asarray(src, np.int32),
                     source_reward=np.asarray(rollouts.rewards_N, np.float64)[src],
                     predicted=np.asarray(chosen.predicted_N, np.float64),
                     fallback=np.asarray(chosen.fallback_N, bool), p_sel=p_sel, gamma=gamma)
