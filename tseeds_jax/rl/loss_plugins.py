"""The trainer's plug-ins for the loss family: one object per need, chosen from the run's config
and the loss's registry entry (rl/losses/needs.py), never from a loss name.

Letters: N samples of a batch, R response width, K top-K of a proposal.

  OffpolicyTraces  LUFFY's trace source: a trace for every prompt (first sample of its group).
  StaleQueue       stale rollouts (`stale.steps`): the queued batch generated s steps earlier,
                   annotated with the generating policy's log-probs (rl/stale.py).
  OldLogpRecompute several updates per batch: pi_old's log-probs from a recompute pass.
  Controller       the loss's cross-step controller (adaptive STARE): its state goes into every
                   update and advances after it.
  TopKProposal     the loss's top-K proposal (SIS): pi_b's top-K at the seed tokens computed at
                   refresh time (the seed tokens' proposal is pi_b), kept per step until that step
                   is trained; pi_old's top-K elsewhere; the uniforms key of each update.

With plain DAPO / Thinking Seeds none is active and those runs are unchanged. A plug-in sees the
trainer only through `RowStats`: the row-chunked statistics passes (`Trainer._stats` / `_topk`:
`optim.micro_batch_size` rows per forward, global arrays when the parameters span several hosts)
and the batch layout. Cross-step state is checkpointed with the run (`state` / `load`; host-local
files beside the seed cache, rl/state_io.py), in the same arrays as before this split.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from tseeds_jax.rl import rollout
from tseeds_jax.rl.stale import StaleRollouts

SIS_STREAM = 0x515  # random stream of the top-K proposal's uniforms (its value fixes old runs)


def learner_old_logp_mode(cfg) -> str:
    """Stale rollouts read the generation-time log-probs: never the on-policy shortcut."""
    if cfg.stale.steps and cfg.optim.old_logp == "auto":
        return "recompute"
    return cfg.optim.old_logp


def _stream_seed(run_seed: int, step: int, stream: int) -> int:
    return int(np.random.SeedSequence([run_seed, step, stream]).generate_state(1)[0] >> 1)


@dataclasses.dataclass(frozen=True)
class RowStats:
    """What a plug-in may ask of the trainer: no-grad passes over rows, and the batch layout."""

    logp_entropy: Callable[..., tuple[np.ndarray, np.ndarray]]  # (params, tokens_BT, attn_BT, R)
    topk: Callable[..., tuple[np.ndarray, np.ndarray]]  # same args -> (ids_BRK, logp_BRK)
    prompt_width: int
    response_width: int
    pad_id: int

    def sequences(self, samples) -> tuple[np.ndarray, np.ndarray]:
        """(tokens_BT, attn_BT) of samples' prompt + response, in the learner's layout."""
        return rollout.sequences_for_stats([(s.prompt_ids, s.response_ids) for s in samples],
                                           self.prompt_width, self.response_width, self.pad_id)


class Plugin:
    """No-op hooks; a plug-in overrides the ones it needs. `key`: its checkpoint group."""

    key = ""

    def rollout_kwargs(self, prompts, step: int, first_sample: int) -> dict[str, Any]:
        return {}

    def wrap_collect(self, collect: Callable, params) -> Callable:
        """The step's generation: `collect` (Trainer._collect) or one of the plug-in's own."""
        return collect

    def annotate(self, params, samples, tokens_BT, attn_BT) -> None:
        """Attaches this plug-in's per-sample statistics under `params` (stale rollouts)."""

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

    def step_metrics(self, samples) -> dict[str, Any]:
        return {}

    def state(self) -> tuple[Any, Any] | None:
        """(arrays tree, json meta or None) of the cross-step state, or None when empty."""
        return None

    def load(self, tree: dict[str, Any] | None, meta: Any) -> None:
        pass


class OffpolicyTraces(Plugin):
    def __init__(self, source, group_size: int):
        self.source, self.group_size = source, group_size

    def rollout_kwargs(self, prompts, step, first_sample):
        return {"offpolicy": self.source.traces(prompts, step, first_sample // self.group_size),
                "stop_ids": getattr(self.source, "stop_ids", ())}

    def step_metrics(self, samples):
        off = [s for s in samples if s.offpolicy]
        return {"offpolicy_frac": len(off) / max(len(samples), 1),
                "offpolicy_reward": float(np.mean([s.reward for s in off])) if off else 0.0,
                "offpolicy_length": float(np.mean([len(s.seed_ids) for s in off])) if off else 0.0}


class StaleQueue(Plugin):
    key = "stale"

    def __init__(self, rollouts: StaleRollouts):
        self.rollouts = rollouts

    def state(self):
        return self.rollouts.state() if self.rollouts.queue else None

    def load(self, tree, meta):
        self.rollouts.queue = {}
        if meta is not None:
            self.rollouts.load(tree, meta)


class OldLogpRecompute(Plugin):
    def __init__(self, stats: RowStats):
        self.stats = stats

    def prepare_batch(self, params, batch):
        return batch.replace(old_logp_BR=self.stats.logp_entropy(
            params, batch.tokens_BT, batch.attn_mask_BT, self.stats.response_width)[0])


class OldLogpAnnotation(Plugin):
    """Stale rollouts: the generating policy's log-probs, attached when the batch is generated."""

    def __init__(self, stats: RowStats):
        self.stats = stats

    def annotate(self, params, samples, tokens_BT, attn_BT):
        logp = self.stats.logp_entropy(params, tokens_BT, attn_BT, self.stats.response_width)[0]
        for i, s in enumerate(samples):
            s.old_logp = logp[i, : len(s.response_ids)].copy()


class Controller(Plugin):
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


class TopKProposal(Plugin):
    key = "seed_topk"

    def __init__(self, stats: RowStats, k: int, run_seed: int, *, recompute: bool):
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
        return {"rng": jax.random.PRNGKey(_stream_seed(self.run_seed, step, SIS_STREAM))}

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


class LossPlugins:
    """The active plug-ins of a run, called in order at fixed points of a training step."""

    def __init__(self, plugins: list[Plugin], stats: RowStats, *, method: str,
                 stale: StaleRollouts | None = None):
        self.plugins, self.stats, self.method, self.stale = plugins, stats, method, stale

    @classmethod
    def build(cls, cfg, learner, stats: RowStats, *, offpolicy=None,
              stale: StaleRollouts | None = None) -> LossPlugins:
        """The plug-ins `cfg` and `learner.spec.needs` call for. stale: a queue to use instead of
        the one `cfg.stale.steps` makes (tests run the queue machinery with lag 0)."""
        if stale is None and cfg.stale.steps:
            stale = StaleRollouts(cfg.stale.steps)
        plugins: list[Plugin] = []
        if offpolicy is not None:
            plugins.append(OffpolicyTraces(offpolicy, cfg.rollout.group_size))
        recompute = stale is None and learner.needs_old_logp
        if stale is not None:
            plugins += [StaleQueue(stale), OldLogpAnnotation(stats)]
        elif recompute:
            plugins.append(OldLogpRecompute(stats))
        controller = learner.initial_controller_state()
        if controller is not None:
            plugins.append(Controller(learner.needs.controller, controller, learner.hparams))
        if learner.proposal_top_k:
            plugins.append(TopKProposal(stats, learner.proposal_top_k, cfg.seed,
                                        recompute=recompute))
        if cfg.restart.method:  # PrefixRL / QuestA / FR3E / CURE (rl/restarts.py)
            from tseeds_jax.rl.restarts import restart_plugin

            plugins.append(restart_plugin(cfg, Plugin))
        return cls(plugins, stats, method=cfg.method_label, stale=stale)

    def of(self, kind: type) -> Any:
        """The active plug-in of class `kind`, or None."""
        return next((p for p in self.plugins if isinstance(p, kind)), None)

    # ---- rollouts ----
    def rollout_kwargs(self, prompts, step: int, first_sample: int) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for p in self.plugins:
            out.update(p.rollout_kwargs(prompts, step, first_sample))
        return out

    def collect(self, collect: Callable, sampler_params, params, step: int, *,
                defer: bool = False):
        """collect(sampler_params, step) -> (samples, info): the trainer's generation, queued
        when rollouts are stale. defer (stale rollouts): (samples, info, ahead), ahead() being
        the generation of the batch s steps ahead, or None (`StaleRollouts.next_batch`)."""
        for p in self.plugins:
            collect = p.wrap_collect(collect, params)
        if self.stale is None:
            out = collect(sampler_params, step)
            return (*out, None) if defer else out
        return self.stale.next_batch(collect, self.annotate, sampler_params, params, step,
                                     defer=defer)

    def annotate(self, params, samples: list[rollout.Sample]) -> None:
        """Attaches the learner's statistics under `params` to every sample. Runs with no
        samples too: with parameters spread over several hosts the passes are collective
        (`Trainer._row_pass`), and another host may have samples."""
        tokens, attn = self.stats.sequences(samples)
        for p in self.plugins:
            p.annotate(params, samples, tokens, attn)

    def after_seed_batch(self, step: int, params, tokens_BT, attn_BT, seed_lengths) -> None:
        for p in self.plugins:
            p.after_seed_batch(step, params, tokens_BT, attn_BT, seed_lengths)

    def seed_extras(self, step: int) -> tuple:
        return tuple(x for p in self.plugins for x in p.seed_extras(step))

    # ---- learner ----
    def prepare_batch(self, params, batch):
        """Fills the ratio denominators (and top-K proposals) the learner reads."""
        for p in self.plugins:
            batch = p.prepare_batch(params, batch)
        return batch

    def update_kwargs(self, step: int) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for p in self.plugins:
            out.update(p.update_kwargs(step))
        return out

    def after_update(self, metrics: dict[str, Any]) -> None:
        for p in self.plugins:
            p.after_update(metrics)

    def step_metrics(self, samples) -> dict[str, Any]:
        out: dict[str, Any] = {"method": self.method}
        for p in self.plugins:
            out.update(p.step_metrics(samples))
        return out

    # ---- checkpointing ----
    def state(self) -> dict[str, Any] | None:
        """{"arrays": flat name -> numpy array, "json": dict} of the cross-step state, or None."""
        tree: dict[str, Any] = {}
        meta: dict[str, Any] = {}
        for p in self.plugins:
            got = p.state()
            if got is None:
                continue
            tree[p.key], m = got
            if m is not None:
                meta[p.key] = m
        if not tree:
            return None
        return {"arrays": _flatten(tree), "json": meta}

    def load(self, extra: dict[str, Any] | None) -> None:
        tree = _unflatten((extra or {}).get("arrays") or {})
        meta = (extra or {}).get("json") or {}
        for p in self.plugins:
            p.load(tree.get(p.key), meta.get(p.key))


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
