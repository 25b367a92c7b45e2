"""Trainer hooks of the loss family: LUFFY traces, M2PO stale rollouts, SIS proposals, STARE state.

Letters: N samples of a batch, R response width, K SIS top-K.

The trainer calls these hooks at fixed points of a step; with plain DAPO / Thinking Seeds they are
no-ops, so those runs are unchanged. Their statistics passes go through the trainer's row-chunked
passes (`Trainer._stats` / `_topk`: `optim.micro_batch_size` rows per forward, global arrays when
the parameters span several hosts), never one whole-batch forward:
  rollout_kwargs   LUFFY: the trace source's trace for every prompt (first sample of its group).
  collect          M2PO stale mode: the queued batch generated s steps earlier (rl/stale.py).
  after_seed_batch SIS + Thinking Seeds: pi_b's top-K at the seed tokens, computed at refresh time
                   (the seed tokens' proposal is pi_b), kept per step until that step is trained.
  seed_extras      those top-K rows, handed to the seeded samples.
  prepare_batch    old log-probs: recompute pass (several updates per batch) or, in stale mode,
                   the generation-time log-probs already in the samples; SIS: pi_old's top-K.
  update_kwargs    SIS uniforms key (run seed, step); STARE adaptive controller state.
  after_update     STARE: one controller step with the batch's pre-update entropy.
  state / load     everything above that lives across steps, checkpointed with the run.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from tseeds_jax.rl import losses, rollout
from tseeds_jax.rl.stale import StaleRollouts

SIS_STREAM = 0x515


def learner_old_logp_mode(cfg) -> str:
    """Stale rollouts read the generation-time log-probs: never the on-policy shortcut."""
    if cfg.stale.steps and cfg.optim.old_logp == "auto":
        return "recompute"
    return cfg.optim.old_logp


def _stream_seed(run_seed: int, step: int, stream: int) -> int:
    return int(np.random.SeedSequence([run_seed, step, stream]).generate_state(1)[0] >> 1)


class MethodPlugins:
    def __init__(self, trainer):
        self.trainer = trainer
        self.cfg = cfg = trainer.cfg
        self.learner = trainer.learner
        self.method = cfg.method_label
        self.stale = StaleRollouts(cfg.stale.steps) if cfg.stale.steps else None
        self.stare_state = self.learner.initial_stare_state()
        self.top_k = self.learner.sis_top_k
        self.seed_topk: dict[int, list[tuple[np.ndarray, np.ndarray]]] = {}

    # ---- rollouts ----
    def rollout_kwargs(self, prompts, step: int, first_sample: int) -> dict[str, Any]:
        source = getattr(self.trainer.env, "offpolicy", None)
        if source is None:
            return {}
        g = self.cfg.rollout.group_size
        return {"offpolicy": source.traces(prompts, step, first_sample // g),
                "stop_ids": getattr(source, "stop_ids", ())}

    def collect(self, sampler_params, params, step: int):
        if self.stale is None:
            return self.trainer._collect(sampler_params, step)
        return self.stale.next_batch(self.trainer._collect, self.annotate, sampler_params, params,
                                     step)

    def annotate(self, params, samples: list[rollout.Sample]) -> None:
        """Attaches the learner's log-probs (and SIS top-K) under `params` to every sample.
        Runs with no samples too: with parameters spread over several hosts the passes are
        collective (`Trainer._row_pass`), and another host may have samples."""
        r = self.cfg.rollout.max_response_len
        tokens, attn = rollout.sequences_for_stats(
            [(s.prompt_ids, s.response_ids) for s in samples], self.trainer._prompt_width(), r,
            self.trainer.env.pad_id)
        logp = self.trainer._stats(params, tokens, attn, r)[0]
        ids = lp = None
        if self.top_k:
            ids, lp = self.trainer._topk(params, tokens, attn, r)
        for i, s in enumerate(samples):
            n = len(s.response_ids)
            s.old_logp = logp[i, :n].copy()
            if ids is not None:
                s.topk_ids, s.topk_logp = ids[i, :n].copy(), lp[i, :n].copy()

    def after_seed_batch(self, step: int, params, tokens, attn) -> None:
        if not self.top_k:
            return
        r = self.cfg.rollout.max_response_len
        ids, lp = self.trainer._topk(params, tokens, attn, r)
        lengths = self.trainer.cache.batches[step].seed_lengths
        self.seed_topk[step] = [(ids[i, :h].copy(), lp[i, :h].copy())
                                for i, h in enumerate(lengths.tolist())]

    def seed_extras(self, step: int) -> tuple:
        if not self.top_k:
            return ()
        return (self.seed_topk.pop(step),)

    # ---- learner ----
    def prepare_batch(self, params, batch):
        """Fills the ratio denominators (and SIS proposals) the learner reads."""
        if self.stale is not None or not self.learner.needs_old_logp:
            return batch  # stale: generation-time values came with the samples
        r = self.cfg.rollout.max_response_len
        batch = batch.replace(old_logp_BR=self.trainer._stats(
            params, batch.tokens_BT, batch.attn_mask_BT, r)[0])
        if self.top_k:
            ids, lp = self.trainer._topk(params, batch.tokens_BT, batch.attn_mask_BT, r)
            keep = batch.topk_valid_BR[..., None] > 0  # seed tokens: pi_b's top-K from the refresh
            batch = batch.replace(
                topk_ids_BRK=np.where(keep, batch.topk_ids_BRK, ids),
                topk_logp_BRK=np.where(keep, batch.topk_logp_BRK, lp),
                topk_valid_BR=np.asarray(batch.resp_mask_BR, np.float32).copy())
        return batch

    def update_kwargs(self, step: int) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.top_k:
            out["rng"] = jax.random.PRNGKey(_stream_seed(self.cfg.seed, step, SIS_STREAM))
        if self.stare_state is not None:
            out["stare_state"] = self.stare_state
        return out

    def after_update(self, metrics: dict[str, Any]) -> None:
        if self.stare_state is None:
            return
        metrics["stare_pos_weight"] = float(self.stare_state.pos_weight)
        metrics["stare_neg_weight"] = float(self.stare_state.neg_weight)
        self.stare_state = losses.stare_controller_update(
            self.stare_state, metrics["stare_entropy_mean"], self.learner.hparams)

    def step_metrics(self, samples) -> dict[str, Any]:
        out: dict[str, Any] = {"method": self.method}
        if getattr(self.trainer.env, "offpolicy", None) is not None:
            off = [s for s in samples if s.offpolicy]
            out["offpolicy_frac"] = len(off) / max(len(samples), 1)
            out["offpolicy_reward"] = float(np.mean([s.reward for s in off])) if off else 0.0
            out["offpolicy_length"] = float(np.mean([len(s.seed_ids) for s in off])) if off else 0.0
        return out

    # ---- checkpointing (host-local files beside the seed cache; rl/state_io.py) ----
    def state(self) -> dict[str, Any] | None:
        """{"arrays": flat name -> numpy array, "json": dict} of the cross-step state, or None."""
        tree: dict[str, Any] = {}
        meta: dict[str, Any] = {}
        if self.stale is not None and self.stale.queue:
            tree["stale"], meta["stale"] = self.stale.state()
        if self.stare_state is not None:
            tree["stare"] = {"pos_weight": np.asarray(self.stare_state.pos_weight),
                             "neg_weight": np.asarray(self.stare_state.neg_weight)}
        if self.seed_topk:
            tree["seed_topk"], meta["seed_topk"] = {}, {}
            k = self.top_k
            for step, rows in self.seed_topk.items():
                tree["seed_topk"][str(step)] = {
                    "lengths": np.array([len(a) for a, _ in rows], np.int64),
                    "ids": np.concatenate([a for a, _ in rows] + [np.zeros((0, k), np.int32)]),
                    "logp": np.concatenate([b for _, b in rows] + [np.zeros((0, k), np.float32)])}
                meta["seed_topk"][str(step)] = len(rows)
        if not tree:
            return None
        return {"arrays": _flatten(tree), "json": meta}

    def load(self, extra: dict[str, Any] | None) -> None:
        tree = _unflatten((extra or {}).get("arrays") or {})
        meta = (extra or {}).get("json") or {}
        if self.stale is not None:
            self.stale.queue = {}
            if "stale" in meta:
                self.stale.load(tree["stale"], meta["stale"])
        if self.stare_state is not None and "stare" in tree:
            self.stare_state = losses.STAREState(
                pos_weight=jax.numpy.asarray(tree["stare"]["pos_weight"], jax.numpy.float32),
                neg_weight=jax.numpy.asarray(tree["stare"]["neg_weight"], jax.numpy.float32))
        self.seed_topk = {}
        for step, n in (meta.get("seed_topk") or {}).items():
            t = tree["seed_topk"][step]
            lens = np.asarray(t["lengths"])[:n]
            ends = np.cumsum(lens)
            ids, lp = np.asarray(t["ids"]), np.asarray(t["logp"])
            self.seed_topk[int(step)] = [(ids[a:b].copy(), lp[a:b].copy())
                                         for a, b in zip((ends - lens).tolist(), ends.tolist())]


def _flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, np.ndarray]:
    out = {}
    for key, value in tree.items():
        if "/" in key:
            raise ValueError(f"state key {key!r} contains '/'")
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flatten(value, name + "/"))
        else:
            out[name] = np.asarray(value)
    return out


def _unflatten(flat: dict[str, Any]) -> dict[str, Any]:
    tree: dict[str, Any] = {}
    for name, value in flat.items():
        node = tree
        *path, last = name.split("/")
        for p in path:
            node = node.setdefault(p, {})
        node[last] = value
    return tree
