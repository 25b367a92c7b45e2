"""The learner's batch: its layout, its assembly from a step's samples, and its sharding.

Letters: B sequences in a batch, P prompt width (left-padded), R response width (right-padded),
T = P + R, K SIS top-K.

Rows are laid out by rl/learn/layout.py (the padded layout on the host: `[pad.. prompt |
response ..pad]`; the learner packs them itself when `learner.layout = "packed"`). Per-token
arrays are response-aligned [B, R]. Sharding has one rule for every field: rows over the mesh's
batch axes (data x fsdp), every other dimension replicated (`shardings`).
"""

from __future__ import annotations

from typing import Any

import flax.struct
import jax
import numpy as np

from tseeds_jax.model import sharding as sharding_lib
from tseeds_jax.rl.learn import advantages as adv_lib
from tseeds_jax.rl.learn import layout as layout_lib


@flax.struct.dataclass
class LearnerBatch:
    """One training batch (host numpy or device arrays); see the module docstring for layout."""

    tokens_BT: Any  # int32
    attn_mask_BT: Any  # int32, 1 on real tokens
    resp_mask_BR: Any  # float32, 1 on response tokens (seed + continuation)
    seed_mask_BR: Any  # float32, 1 on seed tokens
    behavior_logp_BR: Any  # float32, cached log pi_b (read on seed tokens only)
    sampler_logp_BR: Any  # float32, the sampler's log-probs (continuation tokens)
    old_logp_BR: Any  # float32, log pi_old from a recompute pass (read when old_logp=recompute)
    ref_logp_BR: Any  # float32, reference log-probs (read when kl_coef > 0)
    advantages_B: Any  # float32
    topk_ids_BRK: Any = None  # int32 proposal top-K ids (SIS only)
    topk_logp_BRK: Any = None  # float32 proposal log-probs at those ids (SIS only)
    topk_valid_BR: Any = None  # float32, 1 where topk_* hold the proposal (SIS only)
    tis_weight_BR: Any = None  # float32 truncated importance weights (stale.correction "tis")
    # Packed rows only (learner.layout "packed", layout.pack_rows; the learner fills them): then
    # tokens_BT holds the packed rows [X * Q, L] and attn_mask_BT their segment ids.
    positions_BT: Any = None  # int32 [X * Q, L] positions, restarting at each segment
    gather_BR: Any = None  # int32 [B, R] where in its micro-batch's states response token r is
    targets_BR: Any = None  # int32 [B, R] the response tokens

    @property
    def response_width(self) -> int:
        return self.resp_mask_BR.shape[1]

    @property
    def rows(self) -> int:
        """Sequences in the batch (packed rows hold several)."""
        return self.advantages_B.shape[0]



def sample_advantages(samples, *, norm_by_std: bool, max_response_len: int,
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


def build_batch(samples, advantages_N, *, prompt_width: int, response_width: int,
                pad_id: int = 0, num_rows: int | None = None, top_k: int = 0) -> LearnerBatch:
    """Numpy `LearnerBatch`: rows in the padded layout (layout.padded_rows), per-token fields
    response-aligned [N, R].

    `num_rows` > len(samples) appends fully-masked rows (kept out of every denominator), so that
    dynamic sampling with fewer kept groups still feeds the jitted step a fixed shape.
    `old_logp_BR` holds the samples' `old_logp` where given (else 0, for a recompute pass).
    `top_k` > 0 adds the SIS arrays (`topk_*`), filled from the samples' top-K rows.
    """
    n = num_rows or len(samples)
    r = response_width
    tokens = np.full((n, prompt_width + r), pad_id, np.int32)
    attn = np.zeros((n, prompt_width + r), np.int32)
    tokens[: len(samples)], attn[: len(samples)] = layout_lib.padded_rows(
        [(s.prompt_ids, s.response_ids) for s in samples], prompt_width, r, pad_id)
    resp = np.zeros((n, r), np.float32)
    seed = np.zeros((n, r), np.float32)
    blogp = np.zeros((n, r), np.float32)
    slogp = np.zeros((n, r), np.float32)
    adv = np.zeros((n,), np.float32)
    old = np.zeros((n, r), np.float32)
    topk_ids = np.zeros((n, r, top_k), np.int32)
    topk_logp = np.zeros((n, r, top_k), np.float32)
    topk_valid = np.zeros((n, r), np.float32)
    for i, s in enumerate(samples):
        resp_ids = s.response_ids
        resp[i, : len(resp_ids)] = 1
        h = len(s.seed_ids)
        seed[i, :h] = 1
        blogp[i, :h] = s.seed_logp
        slogp[i, h : len(resp_ids)] = s.cont_logp[: len(s.cont_ids)]
        adv[i] = advantages_N[i]
        if s.old_logp is not None:
            old[i, : len(resp_ids)] = s.old_logp[: len(resp_ids)]
        if top_k and s.topk_ids is not None:
            rows = min(len(s.topk_ids), len(resp_ids))
            if s.topk_ids.shape[1] != top_k:
                raise ValueError(f"sample {i}: top-K width {s.topk_ids.shape[1]} != {top_k}")
            topk_ids[i, :rows] = s.topk_ids[:rows]
            topk_logp[i, :rows] = s.topk_logp[:rows]
            topk_valid[i, :rows] = 1
    extra = {}
    if top_k:
        extra = dict(topk_ids_BRK=topk_ids, topk_logp_BRK=topk_logp, topk_valid_BR=topk_valid)
    factors = np.ones(n, np.float32)
    factors[: len(samples)] = [s.adv_factor for s in samples]
    if (factors != 1.0).any():  # FR3E's value factor: float32, after the float32 advantages
        adv = adv * factors
    return LearnerBatch(tokens_BT=tokens, attn_mask_BT=attn, resp_mask_BR=resp, seed_mask_BR=seed,
                        behavior_logp_BR=blogp, sampler_logp_BR=slogp, old_logp_BR=old,
                        ref_logp_BR=np.zeros((n, r), np.float32), advantages_B=adv, **extra)


def shardings(mesh, batch: LearnerBatch) -> LearnerBatch:
    """The one sharding rule of a batch's fields (arrays or ShapeDtypeStructs; None stays None):
    rows over the mesh's batch axes, the other dimensions replicated."""
    return jax.tree_util.tree_map(lambda x: sharding_lib.batch_sharding(mesh, np.shape(x)), batch)


def shard_batch(batch: LearnerBatch, mesh) -> LearnerBatch:
    """`batch` placed on `mesh` by the one rule (`shardings`)."""
    return jax.device_put(batch, shardings(mesh, batch))


def abstract_batch(rows: int, prompt_width: int, response_width: int, *, top_k: int = 0,
                   tis: bool = False) -> LearnerBatch:
    """The shapes and dtypes of a batch of `rows` sequences (`tseeds compile`, `tseeds plan`)."""
    n, r = rows, response_width
    t = layout_lib.RowLayout(prompt_width=prompt_width, response_width=response_width).width
    i32, f32 = np.int32, np.float32

    def a(shape, dtype):
        return jax.ShapeDtypeStruct(shape, dtype)

    extra = {}
    if top_k:
        extra = dict(topk_ids_BRK=a((n, r, top_k), i32), topk_logp_BRK=a((n, r, top_k), f32),
                     topk_valid_BR=a((n, r), f32))
    if tis:
        extra["tis_weight_BR"] = a((n, r), f32)
    return LearnerBatch(tokens_BT=a((n, t), i32), attn_mask_BT=a((n, t), i32),
                        resp_mask_BR=a((n, r), f32), seed_mask_BR=a((n, r), f32),
                        behavior_logp_BR=a((n, r), f32), sampler_logp_BR=a((n, r), f32),
                        old_logp_BR=a((n, r), f32), ref_logp_BR=a((n, r), f32),
                        advantages_B=a((n,), f32), **extra)
