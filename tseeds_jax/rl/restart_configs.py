"""Settings of the peer restart methods (rl/restarts.py), shared by configs/tiny_<method>.py,
configs/qwen25_math_7b_<method>.py and the demo's methods. Every method is DAPO (the loss, clip
0.2/0.28, one update per batch) plus its restart rule; nothing else differs from on-policy DAPO.

  prefixrl  half of each batch's groups are pool problems continued from the first half of a
            successful base-model trace (pool: 8 samples per problem, once per run)
  questa    every group continues from a hint: 50% of the reference solution, 25% from mid-run
  fr3e      G/2 first-pass rollouts, 2 anchors at their highest-entropy tokens, G/4 branches each;
            branch advantages x exp(-(V(anchor) - V(prompt)))
  cure      the same branching (no factor) for the first half of the run, then plain DAPO
"""

from __future__ import annotations

from typing import Any

import ml_collections

from tseeds_jax.rl.restart_checks import METHODS


def overrides(method: str, *, scale: str = "tiny") -> dict[str, Any]:
    """{dotted config field: value} of `method` (the demo's method table uses these too)."""
    if method not in METHODS:
        raise ValueError(f"method={method!r}: known restart methods {METHODS}")
    if scale not in ("tiny", "paper"):
        raise ValueError(f"scale={scale!r}: expected 'tiny' or 'paper'")
    out: dict[str, Any] = {"method": method, "loss.name": "dapo", "seeds.refresh_interval": 1,
                           "restart.method": method}
    if method == "prefixrl":
        out.update({"seeds.variant": "state", "restart.prefix_share": 0.5,
                    "restart.prefix_ratio": 0.5, "restart.pool_budget": 8,
                    "restart.pool_prompts": 64 if scale == "tiny" else 2048})
    elif method == "questa":
        # QuestA trains on augmented (hinted) problems only
        out.update({"seeds.variant": "state", "restart.prefix_share": 1.0,
                    "restart.hint_start": 0.5, "restart.hint_end": 0.25,
                    "restart.hint_switch": 0.5})
    else:
        out.update({"seeds.variant": "state+action", "restart.branch_base": 0,  # G // 2
                    "restart.branch_points": 2, "restart.branch_top_k": 1,
                    "restart.value_beta": 1.0, "restart.stage1_frac": 0.5})
    return out


def apply_restart(c: ml_collections.ConfigDict, method: str, *, scale: str = "tiny"):
    """Sets `c` (tiny_config() or family_configs.qwen25_math_7b_base()) up for `method`."""
    for key, value in overrides(method, scale=scale).items():
        node = c
        *parents, leaf = key.split(".")
        for p in parents:
            node = node[p]
        node[leaf] = value
    c.run_dir = f"runs/{'tiny' if scale == 'tiny' else 'qwen25_math_7b'}_{method}"
    return c


HARD = {"data.params": {"min_terms": 8, "max_terms": 9, "min_digits": 1, "max_digits": 1},
        "data.max_prompt_len": 20, "rollout.max_response_len": 96}


def tiny_variant(c: ml_collections.ConfigDict, variant: str):
    """configs/tiny_<method>.py's variants: "default", or "hard" (the demo's hard task: chains
    of 8-9 one-digit terms, prompt width 20, response width 96)."""
    if variant not in ("default", "hard"):
        raise ValueError(f"unknown variant {variant!r}; known: ['default', 'hard']")
    if variant == "hard":
        c.data.params = ml_collections.ConfigDict(HARD["data.params"], type_safe=False)
        c.data.max_prompt_len = HARD["data.max_prompt_len"]
        c.rollout.max_response_len = HARD["rollout.max_response_len"]
    return c
