"""The learner's no-grad passes over rows (the statistics pass): log-probs and entropies of
responses (behavior log-probs at a refresh, pi_old, the reference policy, a partial pool's
carried tokens), or the policy's top-K (SIS's proposal).

Letters: B rows, T = P + R tokens per row, R response width, K top-K.

A pass runs in chunks of `optim.micro_batch_size` rows, so that it never holds more activations
than one micro-batch of the update. With parameters sharded over a mesh (sampler_placement
"sharded") a chunk is split over the mesh's batch axes like the update's micro-batches, rounded
up to whole rows per device. If the mesh spans several processes, a chunk is one global array of
every host's rows (`micro_batch_size` global rows, as in the update): all hosts run the same
number of chunks (padded to the longest host), and each reads its own rows back.

With `learner.layout = "packed"` (the learner's `layout`) each chunk's sequences are packed
(rl/learn/layout.py, packed rows bucketed to a power of two per chunk) and the pass returns the
same response-aligned [B, R] arrays; callers hand in padded rows either way.
"""

from __future__ import annotations

import jax
import numpy as np

from tseeds_jax.model.sharding import batch_sharding
from tseeds_jax.rl.learn import layout as layout_lib
from tseeds_jax.rl.run import hosts as hosts_lib
from tseeds_jax.sampling.placement import params_mesh, shards_of


def stats_chunk_rows(rows: int, micro_batch_size: int, shards: int = 1) -> int:
    """Global rows of one forward of the statistics pass (also what `tseeds compile` compiles
    and `tseeds plan` counts): `micro_batch_size` rows (all `rows` when 0, never more than
    `rows`), rounded up to whole rows on each of the `shards` devices of the mesh's batch axes
    (1: one device). The one implementation of the chunking."""
    if rows < 0 or micro_batch_size < 0 or shards < 1:
        raise ValueError(f"stats_chunk_rows: rows={rows}, micro_batch_size={micro_batch_size}, "
                         f"shards={shards}: expected rows >= 0, micro_batch_size >= 0, shards >= 1")
    chunk = min(micro_batch_size or rows, rows)
    return -(-chunk // shards) * shards


class RowStats:
    """The statistics passes of one run (the learner's jitted functions) and the row layout."""

    def __init__(self, learner, *, hosts, micro_batch_size: int, prompt_width: int,
                 response_width: int, pad_id: int):
        self.learner, self.hosts, self.micro = learner, hosts, micro_batch_size
        self.prompt_width, self.response_width, self.pad_id = prompt_width, response_width, pad_id

    def logp_entropy(self, params, tokens_BT, attn_BT, response_width: int):
        """(logp_BR, entropy_BR) numpy of the response tokens under `params`."""
        return self._rows(params, tokens_BT, attn_BT, response_width, topk=False)

    def reference(self, params, tokens_BT, attn_BT, response_width: int):
        """(logp_BR, entropy_BR) numpy under the reference policy: `params` (the initial
        parameters), or in a LoRA run the base without adapters (no copy of it)."""
        if self.learner.frozen is None:
            return self.logp_entropy(params, tokens_BT, attn_BT, response_width)
        return self._rows(self.learner.frozen.base, tokens_BT, attn_BT, response_width,
                          topk=False, reference=True)

    def topk(self, params, tokens_BT, attn_BT, response_width: int):
        """(ids_BRK int32, logp_BRK float32) numpy: the policy's top-K (the loss's proposal) at
        every response position."""
        return self._rows(params, tokens_BT, attn_BT, response_width, topk=True)

    def sequences(self, samples) -> tuple[np.ndarray, np.ndarray]:
        """(tokens_BT, attn_BT) of samples' prompt + response, in the learner's layout."""
        return self.rows([(s.prompt_ids, s.response_ids) for s in samples])

    def rows(self, prompts_and_responses) -> tuple[np.ndarray, np.ndarray]:
        """(tokens_BT, attn_BT) padded rows of (prompt, response) pairs (layout.padded_rows)."""
        return layout_lib.padded_rows(prompts_and_responses, self.prompt_width,
                                      self.response_width, self.pad_id)

    def _rows(self, params, tokens_BT, attn_BT, r, *, topk: bool, reference: bool = False):
        k = self.learner.proposal_top_k
        n = len(tokens_BT)
        frozen = () if reference else self.learner.frozen_arg(params)  # a LoRA run's base
        mesh = params_mesh((params, frozen))
        spread = mesh is not None and hosts_lib.spans_processes((params, frozen))
        parts = self.hosts.count if spread else 1
        n_max = int(hosts_lib.gather_rows(np.array([n], np.int32), self.hosts).max()) if spread \
            else n
        if n_max == 0:
            tail = (r, k) if topk else (r,)
            return ((np.zeros((0,) + tail, np.int32 if topk else np.float32),
                     np.zeros((0,) + tail, np.float32)))
        shards = 1 if mesh is None else shards_of(mesh, "batch")
        local = stats_chunk_rows(n_max * parts, self.micro, shards) // parts
        tok, att = _pad_rows(tokens_BT, attn_BT, -(-n_max // local) * local, self.pad_id)
        layout = getattr(self.learner, "layout", None)
        if layout is not None and layout.packed:
            if spread:
                raise ValueError("learner.layout='packed' runs on one host (its statistics "
                                 "passes pack each host's rows; not across processes yet)")
            return self._packed(params, tok, att, n, local, layout, shards, topk=topk,
                                reference=reference, frozen=frozen, mesh=mesh)

        def put(x):
            if spread:
                return hosts_lib.to_global(x, mesh, self.hosts)
            return x if mesh is None else jax.device_put(x, batch_sharding(mesh, x.shape))

        # The learner's jitted passes, not `Learner.stats` / `topk`: those read results with
        # np.asarray, which cannot read rows that live on other processes.
        def forward(t, a):
            if topk:
                return self.learner.topk_pass(params, put(t), put(a), int(r), int(k), *frozen)
            if reference:
                return self.learner.reference_pass(params, put(t), put(a), int(r))
            return self.learner.stats_pass(params, put(t), put(a), int(r), *frozen)

        read = (lambda x: hosts_lib.local_rows(x, mesh)) if spread else np.asarray
        outs = [tuple(read(x) for x in forward(tok[i : i + local], att[i : i + local]))
                for i in range(0, len(tok), local)]
        return tuple(np.concatenate(pieces)[:n] for pieces in zip(*outs))


    def _packed(self, params, tok, att, n, local, layout, shards, *, topk, reference, frozen,
                mesh):
        """`_rows` with each chunk of `local` sequences packed (one host)."""
        k = self.learner.proposal_top_k
        pl = layout_lib.RowLayout("packed", self.prompt_width, tok.shape[1] - self.prompt_width,
                                  self.pad_id, layout.row_len)

        def put(x):
            return x if mesh is None else jax.device_put(x, batch_sharding(mesh, x.shape))

        outs = []
        for i in range(0, len(tok), local):
            rows = layout_lib.pack_rows(tok[i : i + local], att[i : i + local], pl, 1,
                                        shards=shards)
            rows = jax.tree_util.tree_map(put, rows)
            if topk:
                got = self.learner.packed_topk_pass(params, rows, int(k), *frozen)
            elif reference:
                got = self.learner.packed_reference_pass(params, rows)
            else:
                got = self.learner.packed_stats_pass(params, rows, *frozen)
            outs.append(tuple(np.asarray(x) for x in got))
        return tuple(np.concatenate(pieces)[:n] for pieces in zip(*outs))


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
