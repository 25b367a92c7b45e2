"""Supervised warm start of the demo's base policy on worked chain-sum solutions.

Letters: B sequences per batch, P prompt width (left-padded), R response width (right-padded),
T = P + R, V vocabulary.

The base policy must be right sometimes but not always, so that RL has groups with mixed rewards
to learn from. The demonstrations therefore inject step errors (each intermediate result is off
by ±1-2 with probability `error_rate`, and the chain continues from the wrong value): the warmed
model learns a noisy policy whose sampled accuracy sits well below its greedy accuracy, which is
the headroom that reward-driven training can remove. The sequence layout is the learner's
([pad.. prompt | response ..pad], positions counted over real tokens), so the positions the base
was trained on are the ones the sampler and the RL learner use.
"""

from __future__ import annotations

import dataclasses
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from tseeds_jax.data.compact_arith import worked_solution
from tseeds_jax.eval.problems import SplitSource, is_held_out  # noqa: F401  (re-exported)
from tseeds_jax.rl.learn import layout as layout_lib


@dataclasses.dataclass(frozen=True)
class WarmStartConfig:
    steps: int = 1500  # optimizer steps
    batch_size: int = 64  # B sequences per step
    lr: float = 2e-3  # peak AdamW learning rate (cosine decay to 10%)
    warmup: int = 50
    error_rate: float = 0.25  # probability that a demonstrated step result is off by ±1-2
    seed: int = 0
    time_limit_s: float = 0.0  # stop early after this many seconds (0: no limit)


def encode_example(tok, prompt: str, solution: str) -> tuple[list[int], list[int]]:
    return tok.encode(prompt), tok.encode(solution) + [tok.eos_id]


def make_batch(pairs, prompt_width: int, response_width: int, pad_id: int):
    """(tokens_BT, attn_BT, loss_mask_BT) in the learner's layout; the loss covers the response."""
    pairs = [(p, r[:response_width]) for p, r in pairs]
    tokens, attn = layout_lib.padded_rows(pairs, prompt_width, response_width, pad_id)
    loss = np.zeros(tokens.shape, np.float32)
    cols = layout_lib.response_columns(prompt_width, response_width)
    loss[:, cols] = attn[:, cols]
    return tokens, attn, loss


def _sft_loss(params, graphdef, tokens_BT, attn_BT, loss_BT):
    model = nnx.merge(graphdef, params)
    logits_BTV = model(tokens_BT[:, :-1], attn_mask_BT=attn_BT[:, :-1])
    logp_BTV = jax.nn.log_softmax(logits_BTV, axis=-1)
    tgt_BT = tokens_BT[:, 1:]
    nll_BT = -jnp.take_along_axis(logp_BTV, tgt_BT[..., None], axis=-1)[..., 0]
    m_BT = loss_BT[:, 1:]
    return jnp.sum(nll_BT * m_BT) / jnp.maximum(jnp.sum(m_BT), 1.0)


def warm_start(model, tok, source, cfg: WarmStartConfig, *, prompt_width: int,
               response_width: int, progress=None, callback=None, callback_every: int = 0):
    """Trains `model` (in place semantics: returns the new params) on demonstrations from
    `source` (a SplitSource on the training side). Returns (graphdef, params, info).

    `callback(step, graphdef, params)` runs every `callback_every` steps (0: never), e.g. to
    evaluate the policy while it warms up."""
    graphdef, params = nnx.split(model)
    sched = optax.warmup_cosine_decay_schedule(0.0, cfg.lr, cfg.warmup, max(cfg.steps, cfg.warmup + 1),
                                               end_value=cfg.lr * 0.1)
    tx = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(sched, weight_decay=0.0))
    opt_state = tx.init(params)

    @jax.jit
    def step(params, opt_state, tokens, attn, loss_mask):
        loss, grads = jax.value_and_grad(_sft_loss)(params, graphdef, tokens, attn, loss_mask)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    rng = np.random.default_rng([cfg.seed, 0x5F7])
    t0 = time.perf_counter()
    losses = []
    done = 0
    for i in range(cfg.steps):
        pairs = []
        for _ in range(cfg.batch_size):
            idx = int(rng.integers(len(source)))
            ex = source[idx]
            terms = ex["meta"]["terms"]
            sol = worked_solution(terms, error_rate=cfg.error_rate, rng=rng)
            pairs.append(encode_example(tok, ex["prompt"], sol))
        batch = make_batch(pairs, prompt_width, response_width, tok.pad_id)
        params, opt_state, loss = step(params, opt_state, *batch)
        done = i + 1
        if i % 25 == 0 or i == cfg.steps - 1:
            losses.append(float(loss))
            if progress is not None:
                progress(done, cfg.steps, losses[-1])
        if callback is not None and callback_every and done % callback_every == 0:
            callback(done, graphdef, params)
        if cfg.time_limit_s and time.perf_counter() - t0 > cfg.time_limit_s:
            break
    info = {"steps": done, "seconds": time.perf_counter() - t0,
            "final_loss": float(loss), "loss_curve": losses}
    return graphdef, params, info
