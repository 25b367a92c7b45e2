"""Sampling strategies: each a small frozen dataclass that picks one token per row.

Letters: B rows (slots), V vocab, K kept candidates (top-k).

A strategy's `sample(logits_BV, keys_B2)` takes float32 raw model logits and one raw PRNG key
(uint32[2]) per row, and returns int32 token ids [B]. Every row draws its noise from its own key
only, so a row's token never depends on the other rows of the batch (vmapped `jax.random` calls
give the same bits as per-row calls). Strategies are hashable: they are static jit arguments.

Which distribution each log-prob is of: the sampler reports `log_softmax(logits / T)[token]`
(`token_logprobs` of `tempered(logits, logprob_temperature(strategy))`), the strategy's tempered
distribution over the whole vocabulary (T = 1 for Greedy). For `Temperature` that is exactly the
distribution the token was drawn from, and what the learner recomputes for training (the fused
kernels at the rollout's temperature, rl/learn/learner.py), so a fresh on-policy ratio starts at 1
and a seed token's pi_b is the distribution that drew it. For TopK / TopP it is the tempered
distribution before truncation, not the renormalised truncated one the token was drawn from:
training therefore refuses rollout.top_k / rollout.top_p (rl/config/checks.py `sampling`), and
only evaluation, whose log-probs enter no ratio, samples with them.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp


def _check_temperature(temperature):
    if not isinstance(temperature, (int, float)) or isinstance(temperature, bool) or \
            not math.isfinite(temperature) or temperature <= 0:
        raise ValueError(f"temperature={temperature!r}: must be a finite number > 0 "
                         "(use Greedy for temperature 0)")


def _categorical(scaled_BX, keys_B2):
    """Exact categorical draw per row from softmax(scaled), by inverse CDF with one uniform from
    that row's key. (Gumbel-max needs one random number per vocabulary entry per row per step:
    measured ~30% of sampling time on CPU; the inverse CDF needs one per row.)"""
    u_B = jax.vmap(lambda k: jax.random.uniform(k, (), jnp.float32))(keys_B2)
    probs_BX = jax.nn.softmax(scaled_BX.astype(jnp.float32), axis=-1)
    cdf_BX = jnp.cumsum(probs_BX, axis=-1)
    # Scale u by the total mass so rounding in the cumsum can never leave u beyond the last entry.
    target_B1 = (u_B * cdf_BX[:, -1])[:, None]
    idx_B = jnp.sum((cdf_BX <= target_B1).astype(jnp.int32), axis=-1)
    # A zero-probability entry can never be picked: take the first entry at or after idx with p>0.
    idx_B = jnp.minimum(idx_B, scaled_BX.shape[-1] - 1)
    positive_BX = probs_BX > 0
    after_BX = jnp.arange(scaled_BX.shape[-1])[None, :] >= idx_B[:, None]
    return first_true(positive_BX & after_BX)


def first_true(mask_BX):
    """Index of the first True per row (0 when none), as argmax over bools -- written as a min
    over indices, which XLA:CPU vectorises (its variadic argmax reduce measured ~6x slower)."""
    x = mask_BX.shape[-1]
    idx_BX = jax.lax.broadcasted_iota(jnp.int32, mask_BX.shape, mask_BX.ndim - 1)
    first_B = jnp.min(jnp.where(mask_BX, idx_BX, x), axis=-1)
    return jnp.where(first_B == x, 0, first_B).astype(jnp.int32)


def first_argmax(x_BV):
    """argmax per row, first index on ties (torch.argmax / jnp.argmax for finite inputs)."""
    return first_true(x_BV == jnp.max(x_BV, axis=-1, keepdims=True))


@dataclasses.dataclass(frozen=True)
class Greedy:
    """temperature 0: the most likely token (first index on ties, as torch.argmax)."""

    def sample(self, logits_BV, keys_B2):
        del keys_B2
        return first_argmax(logits_BV)


@dataclasses.dataclass(frozen=True)
class Temperature:
    """Draw from softmax(logits / temperature) over the whole vocabulary."""

    temperature: float = 1.0

    def __post_init__(self):
        _check_temperature(self.temperature)

    def sample(self, logits_BV, keys_B2):
        return _categorical(logits_BV / self.temperature, keys_B2)


@dataclasses.dataclass(frozen=True)
class TopK:
    """Draw from softmax(logits / temperature) restricted to the k most likely tokens."""

    k: int
    temperature: float = 1.0

    def __post_init__(self):
        if not isinstance(self.k, int) or isinstance(self.k, bool) or self.k <= 0:
            raise ValueError(f"top_k={self.k!r}: must be a positive integer")
        _check_temperature(self.temperature)

    def sample(self, logits_BV, keys_B2):
        k = min(self.k, logits_BV.shape[-1])
        top_BK, idx_BK = jax.lax.top_k(logits_BV, k)
        pick_B = _categorical(top_BK / self.temperature, keys_B2)
        return jnp.take_along_axis(idx_BK, pick_B[:, None], axis=-1)[:, 0].astype(jnp.int32)


@dataclasses.dataclass(frozen=True)
class TopP:
    """Nucleus sampling: the smallest set of most likely tokens whose tempered probability mass
    reaches `p` (the token that crosses `p` is kept), optionally within the top `top_k` first."""

    p: float
    temperature: float = 1.0
    top_k: int = 0  # 0: no top-k pre-filter

    def __post_init__(self):
        if not isinstance(self.p, (int, float)) or not 0.0 < self.p <= 1.0:
            raise ValueError(f"top_p={self.p!r}: must be in (0, 1]")
        if not isinstance(self.top_k, int) or isinstance(self.top_k, bool) or self.top_k < 0:
            raise ValueError(f"top_k={self.top_k!r}: must be an integer >= 0")
        _check_temperature(self.temperature)

    def sample(self, logits_BV, keys_B2):
        v = logits_BV.shape[-1]
        k = v if self.top_k == 0 else min(self.top_k, v)
        # top_k with k == V is a full descending sort that also returns the indices.
        top_BK, idx_BK = jax.lax.top_k(logits_BV, k)
        scaled_BK = top_BK / self.temperature
        probs_BK = jax.nn.softmax(scaled_BK, axis=-1)
        mass_before_BK = jnp.cumsum(probs_BK, axis=-1) - probs_BK
        keep_BK = mass_before_BK < self.p
        keep_BK = keep_BK.at[:, 0].set(True)
        masked_BK = jnp.where(keep_BK, scaled_BK, -jnp.inf)
        pick_B = _categorical(masked_BK, keys_B2)
        return jnp.take_along_axis(idx_BK, pick_B[:, None], axis=-1)[:, 0].astype(jnp.int32)


Strategy = Greedy | Temperature | TopK | TopP


def make_strategy(temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0) -> Strategy:
    """The strategy for HF-style knobs: temperature 0 is greedy; top_k 0 and top_p 1 are off."""
    if not isinstance(temperature, (int, float)) or isinstance(temperature, bool) or \
            not math.isfinite(temperature) or temperature < 0:
        raise ValueError(f"temperature={temperature!r}: must be a finite number >= 0")
    if not isinstance(top_k, int) or isinstance(top_k, bool) or top_k < 0:
        raise ValueError(f"top_k={top_k!r}: must be an integer >= 0 (0 disables top-k)")
    if not isinstance(top_p, (int, float)) or not 0.0 < top_p <= 1.0:
        raise ValueError(f"top_p={top_p!r}: must be in (0, 1] (1 disables top-p)")
    if temperature == 0:
        return Greedy()
    if top_p < 1.0:
        return TopP(float(top_p), float(temperature), top_k)
    if top_k > 0:
        return TopK(top_k, float(temperature))
    return Temperature(float(temperature))


def logprob_temperature(strategy) -> float:
    """The temperature T of the distribution whose log-probs the sampler reports for `strategy`:
    its own temperature (Temperature, TopK, TopP: the tempered full-vocabulary distribution), 1 for
    Greedy (no distribution is sampled)."""
    return float(getattr(strategy, "temperature", 1.0))


def tempered(logits_BV, temperature: float):
    """logits / temperature; the logits themselves at temperature 1 (bit for bit: no division)."""
    return logits_BV if temperature == 1.0 else logits_BV / temperature


def token_logprobs(logits_BV, tokens_B):
    """log_softmax(logits_BV)[b, tokens_B[b]] in float32 [B] (pass `tempered` logits for the
    log-prob at a temperature)."""
    # log_softmax's own arithmetic, (x - max) - log(sum(exp(x - max))), on the picked entry only:
    # no [B, V] log-prob array is written.
    x_BV = logits_BV.astype(jnp.float32)
    m_B1 = jax.lax.stop_gradient(jnp.max(x_BV, axis=-1, keepdims=True))
    log_z_B = jnp.log(jnp.sum(jnp.exp(x_BV - m_B1), axis=-1))
    picked_B = jnp.take_along_axis(x_BV, tokens_B[:, None], axis=-1)[:, 0]
    return (picked_B - m_B1[:, 0]) - log_z_B


def step_keys(base_keys_B2, index_B):
    """The key for the `index_B`-th new token of each request: fold_in(request key, index)."""
    return jax.vmap(jax.random.fold_in)(base_keys_B2, index_B.astype(jnp.uint32))
