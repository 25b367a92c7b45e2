"""Checks of `config.restart` (the peer restart methods, rl/restarts.py) against the rest of
the run, and the group layout of FR3E / CURE. JAX-free, so the config imports it."""

from __future__ import annotations

from tseeds_jax.rl.config_fields import bad as bad_field

METHODS = ("prefixrl", "questa", "fr3e", "cure")
PREFIX_METHODS = ("prefixrl", "questa")


def split(group_size: int, base: int, points: int) -> tuple[int, int]:
    """(first-pass rollouts, branches per anchor) of FR3E / CURE's groups; ValueError when
    G - base is not split evenly over the anchors."""
    base = base or group_size // 2
    rest = group_size - base
    if base < 1 or rest < 1 or points < 1 or rest % points:
        raise ValueError(f"branching: group_size={group_size}, branch_base={base}, "
                         f"branch_points={points}: need 1 <= base < G and (G - base) divisible "
                         "by branch_points")
    return base, rest // points


def validate(cfg) -> None:
    """Checks `config.restart` against the rest of the run (called by TrainConfig.validate)."""
    def bad(field, value, why):
        bad_field(f"restart.{field}", value, why)

    rs = cfg.restart
    if rs.method == "":
        return
    if rs.method not in METHODS:
        bad("method", rs.method, f"unknown restart method; known: {('',) + METHODS}")
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
    if cfg.seeded or cfg.stale.steps or cfg.offpolicy.source:
        bad("method", rs.method, "runs on the on-policy trainer: needs seeds.refresh_interval=1, "
            "stale.steps=0 and no offpolicy.source")
    want = "state" if rs.method in PREFIX_METHODS else "state+action"
    if cfg.seeds.variant != want:
        bad("method", rs.method, f"needs seeds.variant={want!r} (the prefix is "
            f"{'context only' if want == 'state' else 'on-policy and trained'}), got "
            f"{cfg.seeds.variant!r}")
    if rs.method in ("fr3e", "cure"):
        try:
            split(cfg.rollout.group_size, rs.branch_base, rs.branch_points)
        except ValueError as e:
            bad("branch_points", rs.branch_points, str(e))
