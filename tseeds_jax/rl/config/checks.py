"""Checks of one feature at a time: the values of `config.stale`, `config.restart` and the
rollout's sampling knobs, and what each feature needs of the rest of the run (a loss that takes
per-token weights, the seed variant of a restart method, ...). Which features combine with which
is compat.py's table. JAX-free to import (a restart method's own checks are in its registry
entry, loaded when one is checked).
"""

from __future__ import annotations

from tseeds_jax.rl.config.fields import bad as bad_field
from tseeds_jax.rl.methods import registry as method_registry

CORRECTION_MODES = ("off", "token_mask", "seq_mask", "tis")  # learn/correction.py


def stale(cfg) -> None:
    """`config.stale`: M2PO's lag, overlap, partial rollouts and rollout correction."""
    st = cfg.stale

    def bad(field, value, why):
        bad_field(f"stale.{field}", value, why)

    for name in ("steps", "partial_tokens", "max_staleness", "groups_in_flight"):
        v = getattr(st, name)
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            bad(name, v, "must be an integer >= 0")
    if st.steps and cfg.optim.old_logp == "shortcut":
        bad_field("optim.old_logp", cfg.optim.old_logp,
                  "stale rollouts need the generation-time log-probs ('auto' or 'recompute')")
    if st.correction not in CORRECTION_MODES:
        bad("correction", st.correction, f"known: {CORRECTION_MODES}")
    if st.correction == "tis":
        from tseeds_jax.rl import losses  # local: keeps this module JAX-free to import

        takers = [n for n in losses.names() if losses.get(n).needs.token_weights]
        if cfg.loss.name in losses.names() and not losses.get(cfg.loss.name).needs.token_weights:
            bad("correction", st.correction, f"loss.name={cfg.loss.name!r} has no per-token "
                f"weight; TIS works with {tuple(takers)} (token_mask / seq_mask work with every "
                "loss)")
    t = st.correction_threshold
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not t > 1.0:
        bad("correction_threshold", t, "must be a number > 1")
    if not isinstance(st.overlap, bool):
        bad("overlap", st.overlap, "must be True or False")
    if st.overlap and not st.steps:
        bad("overlap", st.overlap, "overlaps the generation of batch k + s with the update of "
            "batch k, so it needs stale.steps >= 1 (docs/async.md)")
    if not st.partial_tokens:
        return
    if st.steps > st.max_staleness:
        bad("max_staleness", st.max_staleness, f"must be >= stale.steps={st.steps}: batches "
            "generated that many steps ahead are that many versions old when trained")
    if st.groups_in_flight and st.groups_in_flight < cfg.rollout.batch_prompts:
        bad("groups_in_flight", st.groups_in_flight,
            f"must be 0 or >= rollout.batch_prompts={cfg.rollout.batch_prompts}")
    if st.partial_tokens >= cfg.rollout.max_response_len:
        bad("partial_tokens", st.partial_tokens,
            f"must be < rollout.max_response_len={cfg.rollout.max_response_len} (else nothing "
            "is ever interrupted)")


def sampling(cfg) -> None:
    """`config.rollout`'s sampling knobs for training: the learner and the sampler compute every
    log-prob (ratios, seed tokens' behavior log-probs) of softmax(logits / rollout.temperature)
    over the whole vocabulary, which is the distribution that sampled only without truncation.
    Top-k / top-p draw from a renormalised truncated distribution, so training refuses them
    (evaluation samples with its own settings: `tseeds eval --top_p`)."""
    r = cfg.rollout
    if r.top_k != 0:
        bad_field("rollout.top_k", r.top_k, "training rollouts sample the whole vocabulary: the "
                  "learner's ratios use softmax(logits / rollout.temperature), not a top-k "
                  "truncation (set rollout.top_k=0; rollout.temperature is supported)")
    if r.top_p != 1.0:
        bad_field("rollout.top_p", r.top_p, "training rollouts sample the whole vocabulary: the "
                  "learner's ratios use softmax(logits / rollout.temperature), not a top-p "
                  "truncation (set rollout.top_p=1.0; rollout.temperature is supported)")


def restart(cfg) -> None:
    """`config.restart`: the peer restart methods' values and the seed variant each needs."""
    def bad(field, value, why):
        bad_field(f"restart.{field}", value, why)

    rs = cfg.restart
    if rs.method == "":
        return
    if rs.method not in method_registry.names():
        bad("method", rs.method, f"unknown restart method; known: {('',) + method_registry.names()}")
    spec = method_registry.get(rs.method)
    for name in ("prefix_share", "prefix_ratio", "hint_start", "hint_end", "hint_switch",
                 "stage1_frac"):
        v = getattr(rs, name)
        if not 0 <= v <= 1:
            bad(name, v, "must be in [0, 1]")
    for name in ("pool_prompts", "pool_budget", "branch_points", "branch_top_k"):
        v = getattr(rs, name)
        if not isinstance(v, int) or v < 1:
            bad(name, v, "must be an integer >= 1")
    if rs.branch_base < 0:
        bad("branch_base", rs.branch_base, "must be >= 0 (0: group_size // 2)")
    want = spec.variant
    if cfg.seeds.variant != want:
        bad("method", rs.method, f"needs seeds.variant={want!r} (the prefix is "
            f"{'context only' if want == 'state' else 'on-policy and trained'}), got "
            f"{cfg.seeds.variant!r}")
    if spec.check is not None:
        spec.check(cfg, bad)


def lora(cfg) -> None:
    """`config.lora`: the adapters' values (checked with rank 0 too, so that a typo never waits
    for the run that switches them on) and what LoRA needs of the rest of the run."""
    from tseeds_jax.rl.config.sections import LORA_SAMPLER_MODES, LORA_TARGETS

    lo = cfg.lora

    def bad(field, value, why):
        bad_field(f"lora.{field}", value, why)

    if not isinstance(lo.rank, int) or isinstance(lo.rank, bool) or lo.rank < 0:
        bad("rank", lo.rank, "must be an integer >= 0 (0: off)")
    a = lo.alpha
    if isinstance(a, bool) or not isinstance(a, (int, float)) or not 0 < a < float("inf"):
        bad("alpha", a, "must be a positive number")
    d = lo.dropout
    if isinstance(d, bool) or not isinstance(d, (int, float)) or not 0 <= d < 1:
        bad("dropout", d, "must be in [0, 1)")
    targets = lo.targets
    if (isinstance(targets, str) or not targets or len(set(targets)) != len(targets)
            or any(t not in LORA_TARGETS for t in targets)):
        bad("targets", targets, f"expected distinct names from {LORA_TARGETS}")
    if lo.sampler not in LORA_SAMPLER_MODES:
        bad("sampler", lo.sampler, f"known: {LORA_SAMPLER_MODES}")
    kind, _, path = lo.init.partition(":")
    if lo.init and (kind not in ("peft", "orbax") or not path):
        bad("init", lo.init, "expected '' (new adapters), 'peft:DIR' or 'orbax:DIR'")
    if not lo.rank:
        if lo.init:
            bad("init", lo.init, "loads adapters, which need lora.rank > 0")
        return
    if cfg.optim.train_layers != "all":
        bad_field("optim.train_layers", cfg.optim.train_layers,
                  f"with lora.rank={lo.rank} only the adapters are trained; 'head' would "
                  "train base weights, which LoRA keeps frozen (use 'all')")


LEARNER_LAYOUTS = ("padded", "packed")  # rl/learn/layout.py


def learner(cfg) -> None:
    """`config.learner`: the row layout, and what packing cannot combine with (the process count
    is compat.py's table)."""
    ln = cfg.learner
    if ln.layout not in LEARNER_LAYOUTS:
        bad_field("learner.layout", ln.layout, f"known: {LEARNER_LAYOUTS}")
    v = ln.packed_row_len
    if not isinstance(v, int) or isinstance(v, bool) or v < 0:
        bad_field("learner.packed_row_len", v, "must be an integer >= 0 (0: prompt + response)")
    width = cfg.data.max_prompt_len + cfg.rollout.max_response_len
    if v and v < width:
        bad_field("learner.packed_row_len", v, f"must be 0 or >= data.max_prompt_len + "
                  f"rollout.max_response_len = {width} (a packed row holds any sequence)")
    if ln.layout != "packed":
        return
    if cfg.optim.grad_reduce == "update":
        bad_field("optim.grad_reduce", cfg.optim.grad_reduce,
                  "learner.layout='packed' needs 'micro_batch': per-shard gradients split a "
                  "micro-batch's rows, and packed rows hold sequences of the whole micro-batch")
    if cfg.model.attention_impl == "cudnn":
        bad_field("model.attention_impl", cfg.model.attention_impl,
                  "learner.layout='packed' needs a segment mask, which cuDNN's prefix-length "
                  "padding mask cannot express: use 'xla', 'chunked' or 'auto' off GPU, or "
                  "learner.layout='padded'")
