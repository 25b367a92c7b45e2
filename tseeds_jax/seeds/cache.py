"""The seed cache: behavior rollouts of one refresh cycle, truncated into seeds, kept on host.

Letters: J seeded batches of the cycle (T - 1), N = B * G samples per batch, R response width.

At a refresh the behavior policy pi_b writes G responses for every prompt of the next T batches.
Batch 0 of the cycle is trained on-policy from those rollouts directly; batches 1..T-1 keep only a
seed per sample: its token ids and the behavior log-probs / entropies that the learner computed
under pi_b (never the sampler's numbers). The cache is plain numpy so it checkpoints as a pytree.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from tseeds_jax.seeds.tracker import SuccessTracker


@dataclasses.dataclass
class SeedBatch:
    """Seeds for one training batch: N samples = B prompts x G, in group order.

    The batch's prompts were drawn at refresh time, so they travel with their seeds.
    """

    prompt_ids: list[list[int]]  # B prompts
    references: list[Any]  # B references (JSON-serialisable)
    seed_tokens: list[list[int]]  # N token prefixes (possibly empty)
    seed_logp: list[np.ndarray]  # N arrays: behavior log-probs of the seed tokens
    behavior_lengths: np.ndarray  # [N] full length of each seed's source rollout (statistics)
    # How each seed was chosen (seeds/selection.py); None for hand-built batches.
    source: np.ndarray | None = None  # [N] index of the source rollout among the batch's N
    source_reward: np.ndarray | None = None  # [N] reward of the source rollout (NaN: unscored)
    predicted: np.ndarray | None = None  # [N] value-model success estimate (NaN: no model)
    fallback: np.ndarray | None = None  # [N] bool: the fixed rule chose the seed
    p_sel: np.ndarray | None = None  # [N] prompt's success estimate at selection (NaN: none)
    gamma: float = float("nan")  # value-model shape at selection

    @property
    def seed_lengths(self) -> np.ndarray:
        return np.array([len(s) for s in self.seed_tokens], np.int32)

    @property
    def cut_ratios(self) -> np.ndarray:
        """[N] seed length / source rollout length (0 for an empty source)."""
        return self.seed_lengths / np.maximum(np.asarray(self.behavior_lengths, np.float64), 1)

    def selection_arrays(self) -> dict[str, np.ndarray]:
        """The selection fields as [N] arrays (defaults where a field is None)."""
        n = len(self.seed_tokens)
        nan = np.full(n, np.nan)
        pick = lambda v, d: d if v is None else np.asarray(v)  # noqa: E731
        return {"source": pick(self.source, np.arange(n)).astype(np.int32),
                "source_reward": pick(self.source_reward, nan).astype(np.float64),
                "predicted": pick(self.predicted, nan).astype(np.float64),
                "fallback": pick(self.fallback, np.zeros(n, bool)).astype(bool),
                "p_sel": pick(self.p_sel, nan).astype(np.float64)}


@dataclasses.dataclass
class SeedCache:
    """Seeds of the current cycle, indexed by the step they will be trained at."""

    cycle_start: int = -1  # step of the last refresh (-1: none yet)
    batches: dict[int, SeedBatch] = dataclasses.field(default_factory=dict)
    # The adaptive selector's state (per-prompt estimates, calibration); it outlives a cycle, so
    # a refresh hands it to the next cycle's cache. None for the fixed rules.
    tracker: SuccessTracker | None = None

    def take(self, step: int) -> SeedBatch:
        if step not in self.batches:
            raise KeyError(f"no seeds cached for step {step} (cycle started at {self.cycle_start})")
        return self.batches.pop(step)

    # ---- checkpointing: a pytree of numpy arrays plus a JSON part (prompts, references) ----
    def to_json(self) -> dict[str, Any]:
        return {str(s): {"prompt_ids": b.prompt_ids, "references": b.references}
                for s, b in self.batches.items()}

    def to_pytree(self, max_len: int) -> dict[str, Any]:
        """Arrays [J, N, R]; padded to at least one (unused, step -1) row since Orbax refuses
        zero-size arrays."""
        steps = sorted(self.batches)
        n = len(next(iter(self.batches.values())).seed_tokens) if steps else 0
        j_pad, n_pad = max(len(steps), 1), max(n, 1)
        tokens = np.zeros((j_pad, n_pad, max_len), np.int32)
        logp = np.zeros((j_pad, n_pad, max_len), np.float32)
        lens = np.zeros((j_pad, n_pad), np.int32)
        blen = np.zeros((j_pad, n_pad), np.int32)
        step_ids = np.full((j_pad,), -1, np.int64)
        sel = {"source": np.zeros((j_pad, n_pad), np.int32),
               "source_reward": np.full((j_pad, n_pad), np.nan),
               "predicted": np.full((j_pad, n_pad), np.nan),
               "fallback": np.zeros((j_pad, n_pad), bool), "p_sel": np.full((j_pad, n_pad), np.nan)}
        gammas = np.full((j_pad,), np.nan)
        for j, s in enumerate(steps):
            b = self.batches[s]
            step_ids[j] = s
            for k, v in b.selection_arrays().items():
                sel[k][j] = v
            gammas[j] = b.gamma
            for i, (tok, lp) in enumerate(zip(b.seed_tokens, b.seed_logp)):
                tokens[j, i, : len(tok)] = tok
                logp[j, i, : len(tok)] = lp
                lens[j, i] = len(tok)
            blen[j] = b.behavior_lengths
        tree = {"cycle_start": np.asarray(self.cycle_start, np.int64), "steps": step_ids,
                "num_samples": np.asarray(n, np.int64), "tokens": tokens, "logp": logp,
                "lengths": lens, "behavior_lengths": blen, "sel_gamma": gammas}
        tree.update({f"sel_{k}": v for k, v in sel.items()})
        if self.tracker is not None:
            arrays = self.tracker.to_arrays()
            count = len(arrays["keys"])
            arrays["keys"] = np.pad(arrays["keys"], (0, 1 - min(count, 1)))
            arrays["p"] = np.pad(arrays["p"], (0, 1 - min(count, 1)))
            tree.update({f"tracker_{k}": v for k, v in arrays.items()})
            tree["tracker_count"] = np.asarray(count, np.int64)
        return tree

    @classmethod
    def from_state(cls, tree: dict[str, Any], json_part: dict[str, Any]) -> SeedCache:
        cache = cls(cycle_start=int(tree["cycle_start"]))
        if "tracker_hparams" in tree:
            count = int(tree["tracker_count"])
            arrays = {k[len("tracker_"):]: np.asarray(v) for k, v in tree.items()
                      if k.startswith("tracker_")}
            arrays["keys"], arrays["p"] = arrays["keys"][:count], arrays["p"][:count]
            cache.tracker = SuccessTracker.from_arrays(arrays)
        n = int(tree["num_samples"])
        for j, s in enumerate(np.asarray(tree["steps"]).tolist()):
            if s < 0:
                continue
            prompts = json_part[str(s)]
            lens = np.asarray(tree["lengths"][j])[:n]
            toks = np.asarray(tree["tokens"][j])
            lps = np.asarray(tree["logp"][j])
            cache.batches[int(s)] = SeedBatch(
                prompt_ids=prompts["prompt_ids"], references=prompts["references"],
                seed_tokens=[toks[i, : lens[i]].tolist() for i in range(len(lens))],
                seed_logp=[lps[i, : lens[i]].copy() for i in range(len(lens))],
                behavior_lengths=np.asarray(tree["behavior_lengths"][j])[:n].copy())
            if "sel_source" in tree:  # absent in checkpoints written before seed selection
                b = cache.batches[int(s)]
                b.source, b.source_reward, b.predicted, b.fallback, b.p_sel = (
                    np.asarray(tree[f"sel_{k}"][j])[:n].copy()
                    for k in ("source", "source_reward", "predicted", "fallback", "p_sel"))
                b.gamma = float(tree["sel_gamma"][j])
        return cache
