"""Checks of the partial-rollout and rollout-correction fields (`config.stale`, rl/partial.py); a
leaf module, so that `rl/config.py` can call it without importing the trainer's modules."""

from __future__ import annotations

from tseeds_jax.rl.config_fields import bad as bad_field
from tseeds_jax.rl.rollout_correction import MODES, TIS_LOSSES


def check_config(cfg) -> None:
    """ConfigValueError naming the field for bad partial-rollout / rollout-correction settings."""
    st = cfg.stale

    def bad(field, value, why):
        bad_field(f"stale.{field}", value, why)

    for name in ("partial_tokens", "max_staleness", "groups_in_flight"):
        v = getattr(st, name)
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            bad(name, v, "must be an integer >= 0")
    if st.correction not in MODES:
        bad("correction", st.correction, f"known: {MODES}")
    if st.correction == "tis" and cfg.loss.name not in TIS_LOSSES:
        bad("correction", st.correction, f"loss.name={cfg.loss.name!r} has no per-token weight; "
            f"TIS works with {TIS_LOSSES} (token_mask / seq_mask work with every loss)")
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
    if getattr(cfg.restart, "method", ""):
        bad("partial_tokens", st.partial_tokens, f"restart.method={cfg.restart.method!r} "
            "branches or prefixes inside the synchronous step; partial rollouts do not carry it")
    if cfg.offpolicy.source:
        bad("partial_tokens", st.partial_tokens, "partial rollouts do not combine with LUFFY "
            "traces (offpolicy.source)")
    if cfg.advantage.filter_groups:
        bad("partial_tokens", st.partial_tokens, "partial rollouts do not combine with "
            "advantage.filter_groups yet")
    if st.groups_in_flight and st.groups_in_flight < cfg.rollout.batch_prompts:
        bad("groups_in_flight", st.groups_in_flight,
            f"must be 0 or >= rollout.batch_prompts={cfg.rollout.batch_prompts}")
    if st.partial_tokens >= cfg.rollout.max_response_len:
        bad("partial_tokens", st.partial_tokens,
            f"must be < rollout.max_response_len={cfg.rollout.max_response_len} (else nothing "
            "is ever interrupted)")
