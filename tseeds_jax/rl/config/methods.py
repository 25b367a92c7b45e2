"""Per-method settings, shared by configs/tiny_<method>.py, configs/qwen25_math_7b_<method>.py and
the demo: the loss family (`apply_method`) and the peer restart methods (`apply_restart`). One
table each, so that every method runs on the same data, model and trainer and differs only in
what is listed here.

Methods (the run label `config.method` is the method name):
  dapo            on-policy DAPO (clip 0.2/0.28, token mean), one update per batch
  thinking_seeds  DAPO + Thinking Seeds restarts (length-ratio seeds, T refresh interval)
  luffy           LUFFY: 1 off-policy trace + G-1 on-policy per group, f(p)=p/(p+0.1) on trace
                  tokens, no clip on-policy, no-std advantages, constant-length normaliser
  m2po            M2PO (paper version, τ = 0.04) on rollouts generated s steps earlier
  gspo            GSPO sequence ratio (clip 3e-4/4e-4: the loss's own defaults), mini-batched
  gspo_token      GSPO-token, mini-batched
  ctpo / ctpo_la  cumulative token ratio; ratio-space clip / position-adaptive log-space clip
  sis             SIS on DAPO (top-10 envelope test), mini-batched so pi_old != pi_theta
  sis_gspo        SIS on GSPO-token, mini-batched
  sis_seeds       Thinking Seeds + SIS on the seed tokens (proposal pi_b, top-K cached at refresh)
  seeds_ctpo      Thinking Seeds + CTPO-LA ratio
  stare           STARE (top-10% surprisal of A>0 tokens reweighted by W=1.1 under the entropy
                  gate H < 0.3), one update per batch, DAPO recipe dual clip c = 10
Mini-batching: the ratio-modifying losses (gspo*, ctpo*, sis*) are meaningless with one on-policy
update per batch (every ratio is 1), so their configs split each batch into mini-batches as their
recipes do (π_old is recomputed before the updates).
"""

from __future__ import annotations

from typing import Any

import ml_collections

from tseeds_jax.rl.methods import registry as method_registry

METHODS = ("dapo", "thinking_seeds", "luffy", "m2po", "gspo", "gspo_token", "ctpo", "ctpo_la",
           "sis", "sis_gspo", "sis_seeds", "seeds_ctpo", "stare")
SCALES = ("tiny", "paper")


def apply_method(c: ml_collections.ConfigDict, method: str, *, scale: str = "tiny"):
    """Sets `c` (a tiny_config() or qwen25_math_7b_base()) up for `method`; returns `c`."""
    if method not in METHODS:
        raise ValueError(f"method={method!r}: known methods {METHODS}")
    if scale not in SCALES:
        raise ValueError(f"scale={scale!r}: expected one of {SCALES}")
    tiny = scale == "tiny"
    c.method = method
    c.run_dir = f"runs/{'tiny' if tiny else 'qwen25_math_7b'}_{method}"
    seeds_t, seeds_ratio = (8, 0.5) if tiny else (8, 0.3)  # paper: T 8; ratio 0.3 (math/code)
    mini = 2 if tiny else 4  # updates per batch for the ratio-modifying losses

    def seeds():
        c.seeds.refresh_interval = seeds_t
        c.seeds.truncation = "ratio"
        c.seeds.ratio = seeds_ratio

    if method == "dapo":
        c.loss.name = "dapo"
    elif method == "thinking_seeds":
        c.loss.name = "dapo"
        seeds()
    elif method == "luffy":
        c.loss.name = "luffy"
        c.loss.params = {"gamma": 0.1, "on_policy_clip": False}  # LUFFY run: loss_remove_clip
        c.loss.agg_mode = "seq-mean-token-sum-norm"  # mean_i Σ_t L·m / max_response_len (Dr. GRPO)
        c.advantage.norm_by_std = False  # LUFFY run: grpo_use_std=False
        # tiny: the task's worked solutions stand in for a stronger model's traces;
        # paper: a JSONL of solutions (e.g. DeepSeek-R1 traces of OpenR1-Math) per prompt.
        c.offpolicy.source = "task" if tiny else "jsonl:/data/luffy/openr1_traces.jsonl"
        if tiny:
            c.data.size = 2000  # the 'task' source reads every example's solution
    elif method == "m2po":
        c.loss.name = "m2po"
        c.loss.params = {"tau": 0.04}  # M2 budget τ (paper: 0.04 everywhere)
        c.stale.steps = 2 if tiny else 256  # M2PO's s256 setting (train-scripts/...-s256.sh)
    elif method in ("gspo", "gspo_token"):
        c.loss.name = method  # clip 3e-4 / 4e-4 from the loss (config clip_low/high stay None)
        c.optim.mini_batches = mini
    elif method in ("ctpo", "ctpo_la"):
        c.loss.name = method
        c.loss.params = {"cum_mode": "cumprod"}  # CTPO-LA is the default of ctpo.sh
        c.optim.mini_batches = mini
    elif method in ("sis", "sis_gspo"):
        c.loss.name = "sis"
        c.loss.params = {"base": "gspo_token" if method == "sis_gspo" else "dapo", "top_k": 10,
                         "scope": "all"}
        c.optim.mini_batches = mini
    elif method == "sis_seeds":
        seeds()
        c.loss.name = "sis"
        c.loss.params = {"base": "dapo", "top_k": 10, "scope": "seed"}  # proposal of seeds: pi_b
    elif method == "seeds_ctpo":
        seeds()
        c.loss.name = "ctpo_la"
    elif method == "stare":
        c.loss.name = "stare"
        c.loss.params = {"top_p_ratio": 0.1, "pos_weight": 1.1, "entropy_target": 0.3,
                         "adaptive": False}  # 14B/32B: pos_weight 1.05
    # the method's loss keeps its own clip range (None), never the base config's by inheritance
    c.loss.clip_low = None
    c.loss.clip_high = None
    return c


# ---- peer restart methods (rl/methods/prefix.py, branch.py; docs/restart_methods.md) ----
# Every method is DAPO (the loss, clip 0.2/0.28, one update per batch) plus its restart rule;
# nothing else differs from on-policy DAPO. Each rule's own settings are its registry entry's
# presets (rl/methods/registry.py).


def overrides(method: str, *, scale: str = "tiny") -> dict[str, Any]:
    """{dotted config field: value} of `method` (the demo's method table uses these too)."""
    if method not in method_registry.names():
        raise ValueError(f"method={method!r}: known restart methods {method_registry.names()}")
    if scale not in ("tiny", "paper"):
        raise ValueError(f"scale={scale!r}: expected 'tiny' or 'paper'")
    spec = method_registry.get(method)
    return {"method": method, "loss.name": "dapo", "seeds.refresh_interval": 1,
            "restart.method": method, "seeds.variant": spec.variant, **spec.presets(scale)}


def apply_restart(c: ml_collections.ConfigDict, method: str, *, scale: str = "tiny"):
    """Sets `c` (tiny_config() or recipes.qwen25_math_7b_base()) up for `method`."""
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


# ---- LoRA (rl/learn/adapters.py; docs/lora.md) ----
# Adapters on every projection of a frozen base. The learning rate is 10x the full-parameter
# run's (the tiny recipe's 1e-4, the paper recipe's 1e-6): LoRA's best rate is about ten times
# full fine-tuning's at these ranks ("LoRA Without Regret", Thinking Machines, 2025, which also
# finds low ranks enough for RL). Not tuned on our tasks (docs/lora.md).
LORA = {"tiny": {"lora.rank": 8, "lora.alpha": 16.0, "optim.lr": 1e-3},
        "paper": {"lora.rank": 32, "lora.alpha": 64.0, "optim.lr": 1e-5}}


def lora_overrides(*, scale: str = "tiny") -> dict[str, Any]:
    """{dotted config field: value} that turn a run of `scale` into its LoRA run (the demo's
    LoRA entries add these to a method's)."""
    if scale not in LORA:
        raise ValueError(f"scale={scale!r}: expected one of {tuple(LORA)}")
    return dict(LORA[scale])


def apply_lora(c: ml_collections.ConfigDict, *, scale: str = "tiny"):
    """Sets `c` (a method's config) up as its LoRA run; the label gains "+lora"."""
    for key, value in lora_overrides(scale=scale).items():
        node = c
        *parents, leaf = key.split(".")
        for p in parents:
            node = node[p]
        node[leaf] = value
    if c.method:
        c.method = f"{c.method}+lora"
    return c
