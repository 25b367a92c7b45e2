"""The learner's row layout: the one place that turns sequences into learner rows and gives back
the response-aligned [N, R] view that losses, hooks, correction and metrics read.

Letters: N sequences, P prompt width, R response width, T = P + R, X row groups (micro-batches,
or chunks of a statistics pass), Q packed rows per group, L packed row length, D model width.

Two layouts (`learner.layout`):

* "padded": one sequence per row, `[pad.. prompt | response ..pad]` at T = P + R. Response token
  r of every row sits at column P + r and is predicted by the hidden state at column P + r - 1.
  This is the layout of every host-side array (`build_batch`, `padded_rows`) and of the
  response-aligned view.
* "packed": the sequences of each group are packed first-fit-decreasing into Q rows of L tokens
  (several sequences per row; Q bucketed to 2^k or 3 * 2^k so a run compiles a handful of
  programs, `bucket_rows`). Each sequence is a segment (ids 1, 2, ... within a row; 0 is padding), positions
  restart at 0 in each segment, attention stays within a segment (model/attention.py), and
  `gather_NR` says where in its group's flattened [Q * L] hidden states the state predicting
  response token r of sequence n sits. Only the forward pass sees packed rows: the hidden states
  are gathered back to [N, R] (`response_hidden`), so every loss, hook and method reads what it
  reads in the padded layout.

Packed rows are built from padded ones (`pack_rows`): a padded row holds its real tokens
contiguously, so one host-side copy gives the packed form, and the padded arrays stay the one
form of the batch's per-token fields.
"""

from __future__ import annotations

import dataclasses

import flax.struct
import jax.numpy as jnp
import numpy as np

LAYOUTS = ("padded", "packed")
# Packed row counts a group is rounded up to (`bucket_rows`): 1, 2, 3, 4, 6, 8, 12, 16, 24, ...
ROW_BUCKETS = tuple(sorted({2**k for k in range(32)} | {3 * 2**k for k in range(31)}))


@dataclasses.dataclass(frozen=True)
class RowLayout:
    """The layout of one run's learner rows: its kind and widths (`learner.layout`)."""

    kind: str = "padded"
    prompt_width: int = 0
    response_width: int = 0
    pad_id: int = 0
    row_len: int = 0  # packed row length L; 0: P + R (always holds the longest sequence)

    def __post_init__(self):
        if self.kind not in LAYOUTS:
            raise ValueError(f"learner.layout must be one of {LAYOUTS}, got {self.kind!r}")

    @property
    def packed(self) -> bool:
        return self.kind == "packed"

    @property
    def width(self) -> int:
        """T = P + R: a padded row's tokens."""
        return self.prompt_width + self.response_width

    @property
    def packed_row_len(self) -> int:
        return self.row_len or self.width


@flax.struct.dataclass
class PackedRows:
    """Packed rows of X groups (host numpy or device arrays): rows of group x are
    x * Q .. (x + 1) * Q - 1, and its sequences' rows of `gather_NR` index its [Q * L] states."""

    tokens_BT: object  # int32 [X * Q, L]
    segments_BT: object  # int32 [X * Q, L], 0 at padding
    positions_BT: object  # int32 [X * Q, L], restarting at each segment
    gather_BR: object  # int32 [N, R] flat index (within the group) predicting response token r
    targets_BR: object  # int32 [N, R] response tokens (pad_id past each response)


# ---------------------------------------------------------------- padded rows (host numpy)


def padded_rows(prompts_and_responses, prompt_width: int, response_width: int, pad_id: int = 0):
    """(tokens_BT, attn_mask_BT) int32 of (prompt, response) pairs in the padded layout."""
    n = len(prompts_and_responses)
    p, r = prompt_width, response_width
    tokens = np.full((n, p + r), pad_id, np.int32)
    attn = np.zeros_like(tokens)
    for i, (prompt, response) in enumerate(prompts_and_responses):
        if len(prompt) > p:
            raise ValueError(f"prompt of {len(prompt)} tokens exceeds prompt_width={p}")
        if len(response) > r:
            raise ValueError(f"response of {len(response)} tokens exceeds response_width={r}")
        tokens[i, p - len(prompt) : p] = prompt
        attn[i, p - len(prompt) : p] = 1
        tokens[i, p : p + len(response)] = response
        attn[i, p : p + len(response)] = 1
    return tokens, attn


def response_columns(prompt_width: int, response_width: int) -> slice:
    """The columns of a padded row holding response tokens 0..R-1."""
    return slice(prompt_width, prompt_width + response_width)


# ---------------------------------------------------------------- the response-aligned view


def response_hidden(model, tokens_BT, attn_mask_BT, response_width: int, *, positions_BT=None,
                    gather_BR=None, targets_BR=None):
    """(h_NRD hidden states predicting the response tokens, targets_NR) of padded rows, or of
    packed rows when `gather_BR` is given (`attn_mask_BT` then holds the segment ids)."""
    if gather_BR is None:
        h_BTD, _ = model.hidden(tokens_BT, attn_mask_BT=attn_mask_BT)
        t = h_BTD.shape[1]
        p = t - response_width
        return h_BTD[:, p - 1 : t - 1], tokens_BT[:, p:]
    h_QLD, _ = model.hidden(tokens_BT, positions_BT, segment_ids_BT=attn_mask_BT)
    d = h_QLD.shape[-1]
    return jnp.take(h_QLD.reshape(-1, d), gather_BR, axis=0), targets_BR


def response_targets(tokens_BT, response_width: int, targets_BR=None):
    """The response tokens [N, R]: a packed batch's `targets_BR`, or a padded row's last R."""
    return tokens_BT[:, -response_width:] if targets_BR is None else targets_BR


# ---------------------------------------------------------------- packing


def bucket_rows(q: int, cap: int, multiple: int = 1) -> int:
    """Packed rows of a group: q rounded up to the next size 2^k or 3 * 2^k (two compiled shapes
    per doubling, at most a third of the rows wasted; pure powers of two waste up to half), at
    most `cap` (a group never needs more rows than sequences), then up to a multiple of
    `multiple` (whole rows per device of the batch axes)."""
    b = min(s for s in ROW_BUCKETS if s >= q)
    b = min(b, max(cap, q))
    return -(-b // multiple) * multiple


def first_fit_decreasing(lengths, capacity: int) -> list[list[int]]:
    """Bins (lists of indices into `lengths`) of total length <= capacity, first-fit over the
    lengths in decreasing order (stable for equal lengths). Zero lengths go in no bin."""
    bins: list[list[int]] = []
    room: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda j: -lengths[j]):
        n = int(lengths[i])
        if n == 0:
            continue
        if n > capacity:
            raise ValueError(f"a sequence of {n} tokens exceeds the packed row length {capacity}")
        for b, free in enumerate(room):
            if n <= free:
                bins[b].append(i)
                room[b] -= n
                break
        else:
            bins.append([i])
            room.append(capacity - n)
    return bins


def pack_rows(tokens_BT, attn_BT, layout: RowLayout, groups: int, *, shards: int = 1,
              rows_per_group: int | None = None) -> PackedRows:
    """Packed rows of padded `tokens_BT` / `attn_BT` [N, T], split into `groups` equal groups of
    consecutive sequences (the update's micro-batches, or one chunk of a statistics pass), every
    group packed into the same number Q of rows (`bucket_rows` of the fullest group, or
    `rows_per_group`)."""
    tokens_BT, attn_BT = np.asarray(tokens_BT), np.asarray(attn_BT)
    n, t = tokens_BT.shape
    p, r, length = layout.prompt_width, layout.response_width, layout.packed_row_len
    if t != p + r:
        raise ValueError(f"pack_rows: rows of {t} tokens, expected P + R = {p} + {r}")
    if groups < 1 or n % groups:
        raise ValueError(f"pack_rows: {n} sequences do not split into {groups} equal groups")
    per = n // groups
    plen_N = attn_BT[:, :p].sum(1)
    rlen_N = attn_BT[:, p:].sum(1)
    if ((plen_N == 0) & (rlen_N > 0)).any():
        raise ValueError("learner.layout='packed': a sequence with an empty prompt has no state "
                         "predicting its first response token")
    bins_X = [first_fit_decreasing((plen_N + rlen_N)[x * per : (x + 1) * per].tolist(), length)
              for x in range(groups)]
    q = rows_per_group or bucket_rows(max((len(b) for b in bins_X), default=1), per, shards)
    if any(len(b) > q for b in bins_X):
        raise ValueError(f"pack_rows: a group needs more than rows_per_group={q} rows")
    tok = np.full((groups * q, length), layout.pad_id, np.int32)
    seg = np.zeros((groups * q, length), np.int32)
    pos = np.zeros((groups * q, length), np.int32)
    gather = np.zeros((n, r), np.int32)
    targets = np.full((n, r), layout.pad_id, np.int32)
    for x, bins in enumerate(bins_X):
        for row, members in enumerate(bins):
            o = 0
            for s, j in enumerate(members):
                i = x * per + j
                pl, rl = int(plen_N[i]), int(rlen_N[i])
                seq = tokens_BT[i, p - pl : p + rl]
                qrow = x * q + row
                tok[qrow, o : o + pl + rl] = seq
                seg[qrow, o : o + pl + rl] = s + 1
                pos[qrow, o : o + pl + rl] = np.arange(pl + rl)
                # response token k is predicted by the state at (row, o + pl + k - 1)
                gather[i, :rl] = row * length + o + pl - 1 + np.arange(rl)
                targets[i, :rl] = seq[pl:]
                o += pl + rl
    return PackedRows(tokens_BT=tok, segments_BT=seg, positions_BT=pos, gather_BR=gather,
                      targets_BR=targets)


def pad_fraction(attn_BT) -> float:
    """The share of pad positions in rows (a padded batch's attention mask, or packed
    segments): what packing saves."""
    a = np.asarray(attn_BT)
    return float(1.0 - (a > 0).sum() / max(a.size, 1))
