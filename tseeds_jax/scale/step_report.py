"""The step model's report (scale/step_model.py): its CLI flags (shared by `tseeds compile` and
`tseeds plan`), the estimate from a dict of inputs (`compile_run.step_model_inputs` or
`step_model.plan_inputs`), and its text lines."""

from __future__ import annotations

from typing import Any


def step_model_from_inputs(inputs: dict[str, Any], *, update_s: float | None,
                           length_distribution: str | None = None, **params) -> dict[str, Any]:
    """`step_model.estimate` of the on-policy step from `step_model_inputs` (its length
    distribution unless one is given); update_s None: the update is left out (0) and said so."""
    from tseeds_jax.rl.config import lengths as ld
    from tseeds_jax.scale import step_model

    spec = length_distribution or inputs["length_distribution"]
    dist = ld.parse(spec)
    lengths = dist.lengths(inputs["requests"], inputs["max_response_len"])
    cost = step_model.DecodeCost(inputs["slots"], inputs["decode_fixed_s"],
                                 inputs["decode_kv_s_per_token"], inputs["decode_flops_s"],
                                 inputs["decode_ici_s"])
    if params.get("group_size", 1) and inputs["requests"] % params.get("group_size", 1):
        params["group_size"] = 1  # a step's requests that are not whole groups: one per group
    est = step_model.estimate(lengths, cost, prompt_len=inputs["prompt_len"],
                              update_s=update_s or 0.0, chips=inputs["chips"],
                              prefill_s_per_token=inputs["prefill_s_per_token"],
                              sync_s=inputs["sync_s"], replicas=inputs["replicas"], **params)
    est["length_distribution"] = dict(spec=dist.spec, mean_fraction=sum(lengths) / len(lengths)
                                      / inputs["max_response_len"], cap_share=dist.cap_share())
    est["update_included"] = update_s is not None
    est["basis"] = inputs.get("basis", "compile-only bounds")
    return est


def step_model_flags(flags, fv) -> None:
    """The step model's own knobs (scale/step_model.py), shared with `tseeds plan`."""
    flags.DEFINE_float("update_s", None, "step model: the learner update's seconds (default: "
                       "the compiled update's roofline + ICI, else left out)", flag_values=fv)
    flags.DEFINE_integer("max_staleness", None, "step model: versions a token may lag (enforced "
                         "as the runtime does, by forcing due responses to finish; default: the "
                         "config's stale.max_staleness)", flag_values=fv)
    flags.DEFINE_integer("partial_tokens", None, "step model: C, new tokens a response decodes "
                         "per step (default: the config's stale.partial_tokens, else the steady "
                         "model's decode steps per step)", flag_values=fv)
    flags.DEFINE_float("budget_tokens", None, "step model: async token budget per step "
                       "(default: the sync batch's tokens)", flag_values=fv)
    flags.DEFINE_bool("keep_kv", False, "step model: interrupted responses keep their KV cache "
                      "(default: the seed path prefills them again)", flag_values=fv)
    flags.DEFINE_enum("async_placement", "interleaved", ["interleaved", "split"], "step model: "
                      "async generation and update on the same chips, or on split sub-meshes",
                      flag_values=fv)


def step_params(fv, config=None) -> dict:
    """The knobs from the flags; a flag left unset reads the config (`stale.max_staleness`)."""
    staleness = fv.max_staleness
    if staleness is None:
        staleness = int(config.stale.max_staleness) if config is not None else None
    chunk = fv.partial_tokens
    if chunk is None and config is not None:
        chunk = int(config.stale.partial_tokens) or None
    return dict(update_s=fv.update_s, max_staleness=staleness,
                budget_tokens=fv.budget_tokens, reprefill=not fv.keep_kv,
                placement=fv.async_placement, partial_tokens=chunk,
                group_size=int(config.rollout.group_size) if config is not None else 1,
                interrupt=bool(config.stale.partial_interrupt) if config is not None else True)


def step_model_lines(est: dict) -> list[str]:
    """The step model's summary (sync vs async on-policy step) as text lines."""
    sy, a, dist = est["sync"], est["async"], est["length_distribution"]
    u = est.get("async_unbounded")
    curve = " ".join(f"{x:.2f}" for x in sy["occupancy_curve"])
    upd = "" if est["update_included"] else " (update not included: pass --update-s)"
    lines = [
        f"step model ({dist['spec']}: mean {dist['mean_fraction']:.2f} R, "
        f"{dist['cap_share']:.0%} at the cap; an estimate on {est['basis']}){upd}:",
        f"  sync: {sy['step_s']:.2f} s = generation {sy['generation_s']:.2f} (decode "
        f"{sy['decode_steps']} steps {sy['decode_s']:.2f} s, prefill {sy['prefill_s']:.2f}) + "
        f"update {sy['update_s']:.2f}; {sy['tokens_per_s_per_chip']:.0f} tokens/s/chip; slot "
        f"occupancy {sy['occupancy']:.2f} (by tenths of the call: {curve})",
        f"  async ({a['placement']}, partial rollouts, C {a['chunk']} tokens, max_staleness "
        f"{a['max_staleness']} enforced as the runtime does): {a['step_s']:.2f} s = generation "
        f"{a['generation_s']:.2f} (decode {a['decode_steps']:.0f} steps {a['decode_s']:.2f} s "
        f"in {a['calls_per_step']:.2f} calls, prefill with re-prefill {a['prefill_s']:.2f}) + "
        f"update {a['update_s']:.2f}; {a['tokens_per_s_per_chip']:.0f} tokens/s/chip; "
        f"occupancy {a['occupancy']:.2f}",
        f"  async / sync tokens/s/chip = {est['speedup']:.2f}x; forced to finish: "
        f"{a['forced_share']:.0%} of the responses ({a['forced_token_share']:.0%} of the "
        f"tokens; due {a['forced_due_share']:.0%}, batch rule {a['forced_batch_share']:.0%}; "
        f"the shortest {a['shortest_forced'] or '-'} tokens); oldest trained token "
        f"{a['oldest_token_age']} versions"]
    if u:
        lines.append(
            f"  without the bound (every slot busy): {u['step_s']:.2f} s, "
            f"{est['speedup_unbounded']:.2f}x; its responses older than max_staleness="
            f"{u['max_staleness']}: {u['responses_over_staleness']:.0%} (token lag shares "
            + " ".join(f"{x:.2f}" for x in u["token_lag_share"]) + ")")
    if a["split"]:
        sp = a["split"]
        lines.append(f"  async split: sampler on {sp['sampler_replicas']} of {sp['replicas']} "
                     f"replicas: {sp['step_s']:.2f} s ({sp['tokens_per_s_per_chip']:.0f} "
                     "tokens/s/chip)")
    return lines
