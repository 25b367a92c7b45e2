"""The learner's hooks: what a loss's declared needs (rl/losses/needs.py) and the old-log-prob
mode ask of a training step beyond the update itself, chosen from the config and the loss's
registry entry, never from a loss name.

Letters: N samples of a batch, R response width, K top-K of a proposal.

  OldLogpRecompute several updates per batch: pi_old's log-probs from a statistics pass over the
                   batch before the updates.
  OldLogpAnnotation M2PO's lag: the generating policy's log-probs, attached to each sample when
                   its batch is generated (the lag's sources call `annotate`).
  Controller       the loss's cross-step controller (adaptive STARE): its state goes into every
                   update and advances after it.
  TopKProposal     the loss's top-K proposal (SIS): pi_b's top-K at the seed tokens, computed at
                   a refresh (`after_seed_batch`) and handed to the seeded batch's samples
                   (`seed_extras`); pi_old's top-K elsewhere; the uniforms key of each update.

With plain DAPO / Thinking Seeds none is active. A hook sees the run only through the row passes
(rl/learn/row_pass.py). Cross-step state is checkpointed with the run under each hook's key
(`state` / `load`), in the same arrays as before these hooks had a module of their own.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from tseeds_jax.rl.rollout import streams


def old_logp_mode(cfg) -> str:
    """The learner's pi_old: M2PO's lag reads the generation-time log-probs, never the shortcut."""
    if cfg.stale.steps and cfg.optim.old_logp == "auto":
        return "recompute"
    return cfg.optim.old_logp


class Hook:
    """No-op hooks; a hook overrides the ones it needs. `key`: its checkpoint group."""

    key = ""

    def annotate(self, params, samples, tokens_BT, attn_BT) -> None:
        pass

    def after_seed_batch(self, step: int, params, tokens_BT, attn_BT, seed_lengths) -> None:
        pass

    def seed_extras(self, step: int) -> tuple:
        return ()

    def prepare_batch(self, params, batch):
        return batch

    def update_kwargs(self, step: int) -> dict[str, Any]:
        return {}

    def after_update(self, metrics: dict[str, Any]) -> None:
        pass

    def state(self) -> tuple[Any, Any] | None:
        """(arrays tree, json meta or None) of the cross-step state, or None when empty."""
        return None

    def load(self, tree: dict[str, Any] | None, meta: Any) -> None:
        pass


class OldLogpRecompute(Hook):
    def __init__(self, stats):
        self.stats = stats

    def prepare_batch(self, params, batch):
        return batch.replace(old_logp_BR=self.stats.logp_entropy(
            params, batch.tokens_BT, batch.attn_mask_BT, self.stats.response_width)[0])


class OldLogpAnnotation(Hook):
    def __init__(self, stats):
        self.stats = stats

    def annotate(self, params, samples, tokens_BT, attn_BT):
        logp = self.stats.logp_entropy(params, tokens_BT, attn_BT, self.stats.response_width)[0]
        for i, s in enumerate(samples):
            s.old_logp = logp[i, : len(s.response_ids)].copy()


class Controller(Hook):
    def __init__(self, spec, state, hparams):
        self.spec, self.value, self.hparams = spec, state, hparams
        self.key = spec.checkpoint_key

    def update_kwargs(self, step):
        return {"controller_state": self.value}

    def after_update(self, metrics):
        metrics.update(self.spec.report(self.value))
        self.value = self.spec.advance(self.value, metrics, self.hparams)

    def state(self):
        return self.spec.to_arrays(self.value), None

    def load(self, tree, meta):
        if tree is not None:
            self.value = self.spec.from_arrays(tree)


class TopKProposal(Hook):
    key = "seed_topk"

    def __init__(self, stats, k: int, run_seed: int, *, recompute: bool):
        self.stats, self.k, self.run_seed, self.recompute = stats, k, run_seed, recompute
        self.seed_topk: dict[int, list[tuple[np.ndarray, np.ndarray]]] = {}

    def annotate(self, params, samples, tokens_BT, attn_BT):
        ids, lp = self.stats.topk(params, tokens_BT, attn_BT, self.stats.response_width)
        for i, s in enumerate(samples):
            n = len(s.response_ids)
            s.topk_ids, s.topk_logp = ids[i, :n].copy(), lp[i, :n].copy()

    def after_seed_batch(self, step, params, tokens_BT, attn_BT, seed_lengths):
        ids, lp = self.stats.topk(params, tokens_BT, attn_BT, self.stats.response_width)
        self.seed_topk[step] = [(ids[i, :h].copy(), lp[i, :h].copy())
                                for i, h in enumerate(np.asarray(seed_lengths).tolist())]

    def seed_extras(self, step):
        return (self.seed_topk.pop(step),)

    def prepare_batch(self, params, batch):
        if not self.recompute:
            return batch  # stale / shortcut: the proposal came with the samples or is pi_theta
        ids, lp = self.stats.topk(params, batch.tokens_BT, batch.attn_mask_BT,
                                  self.stats.response_width)
        keep = batch.topk_valid_BR[..., None] > 0  # seed tokens: pi_b's top-K from the refresh
        return batch.replace(
            topk_ids_BRK=np.where(keep, batch.topk_ids_BRK, ids),
            topk_logp_BRK=np.where(keep, batch.topk_logp_BRK, lp),
            topk_valid_BR=np.asarray(batch.resp_mask_BR, np.float32).copy())

    def update_kwargs(self, step):
        seed = streams.method_seed(self.run_seed, step, streams.SIS)
        return {"rng": jax.random.PRNGKey(seed)}

    def state(self):
        if not self.seed_topk:
            return None
        tree, meta = {}, {}
        for step, rows in self.seed_topk.items():
            tree[str(step)] = {
                "lengths": np.array([len(a) for a, _ in rows], np.int64),
                "ids": np.concatenate([a for a, _ in rows] + [np.zeros((0, self.k), np.int32)]),
                "logp": np.concatenate([b for _, b in rows]
                                       + [np.zeros((0, self.k), np.float32)])}
            meta[str(step)] = len(rows)
        return tree, meta

    def load(self, tree, meta):
        self.seed_topk = {}
        for step, n in (meta or {}).items():
            t = tree[step]
            lens = np.asarray(t["lengths"])[:n]
            ends = np.cumsum(lens)
            ids, lp = np.asarray(t["ids"]), np.asarray(t["logp"])
            self.seed_topk[int(step)] = [(ids[a:b].copy(), lp[a:b].copy())
                                         for a, b in zip((ends - lens).tolist(), ends.tolist())]


class LearnerHooks:
    """The active hooks of a run, called in order at fixed points of a training step."""

    def __init__(self, hooks: list[Hook], stats):
        self.hooks, self.stats = hooks, stats

    @classmethod
    def build(cls, cfg, learner, stats, *, lag: bool | None = None) -> LearnerHooks:
        """The hooks `cfg` and `learner.needs` call for. lag: the batches are generated ahead
        (default: `stale.steps` > 0; a test runs the lag machinery with lag 0)."""
        lag = bool(cfg.stale.steps) if lag is None else lag
        hooks: list[Hook] = []
        recompute = not lag and learner.needs_old_logp
        if lag:
            hooks.append(OldLogpAnnotation(stats))
        elif recompute:
            hooks.append(OldLogpRecompute(stats))
        controller = learner.initial_controller_state()
        if controller is not None:
            hooks.append(Controller(learner.needs.controller, controller, learner.hparams))
        if learner.proposal_top_k:
            hooks.append(TopKProposal(stats, learner.proposal_top_k, cfg.seed,
                                      recompute=recompute))
        return cls(hooks, stats)

    def of(self, kind: type) -> Any:
        """The active hook of class `kind`, or None."""
        return next((h for h in self.hooks if isinstance(h, kind)), None)

    def annotate(self, params, samples) -> None:
        """Attaches the learner's statistics under `params` to every sample. Runs with no
        samples too: with parameters spread over several hosts the passes are collective, and
        another host may have samples."""
        if not any(type(h).annotate is not Hook.annotate for h in self.hooks):
            return
        tokens, attn = self.stats.sequences(samples)
        for h in self.hooks:
            h.annotate(params, samples, tokens, attn)

    def after_seed_batch(self, step: int, params, tokens_BT, attn_BT, seed_lengths) -> None:
        for h in self.hooks:
            h.after_seed_batch(step, params, tokens_BT, attn_BT, seed_lengths)

    def seed_extras(self, step: int) -> tuple:
        return tuple(x for h in self.hooks for x in h.seed_extras(step))

    def prepare_batch(self, params, batch):
        """Fills the ratio denominators (and top-K proposals) the learner reads."""
        for h in self.hooks:
            batch = h.prepare_batch(params, batch)
        return batch

    def update_kwargs(self, step: int) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for h in self.hooks:
            out.update(h.update_kwargs(step))
        return out

    def after_update(self, metrics: dict[str, Any]) -> None:
        for h in self.hooks:
            h.after_update(metrics)

    def state(self) -> dict[str, tuple[Any, Any]]:
        out = {}
        for h in self.hooks:
            got = h.state()
            if got is not None:
                out[h.key] = got
        return out

    def load(self, extra: dict[str, tuple[Any, Any]]) -> None:
        for h in self.hooks:
            h.load(*extra.get(h.key, (None, None)))
