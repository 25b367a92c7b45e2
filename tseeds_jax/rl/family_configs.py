"""Per-method settings of the loss family, shared by configs/tiny_<method>.py and
configs/qwen25_math_7b_<method>.py (one table, so that every method runs on the same data, model
and trainer and differs only in what is listed here).

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

import ml_collections

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
    return c


def qwen25_math_7b_base() -> ml_collections.ConfigDict:
    """The paper's Qwen2.5-Math-7B setting (Section 5.1): DAPO-Math-17k, 4k tokens per sequence,
    batch 32 prompts x 8, clip-high 0.28, one update per batch, lr 1e-6.

    Paths are placeholders: override --config.model.init=hf:DIR --config.tokenizer=hf:DIR
    --config.data.source=dapo_math_17k:PATH. Same values as configs/qwen25_math_7b_dapo17k.py
    (kept separate so the family's configs stand alone); set --config.mesh.* and
    --config.optim.micro_batch_size for the hardware as that file's variants do.
    """
    from tseeds_jax.rl.config import default_config

    c = default_config()
    c.model.init = "hf:/models/Qwen2.5-Math-7B"  # placeholder: your local HF folder
    # Qwen/Qwen2.5-Math-7B config.json (architecture fields; `tseeds plan` works without weights)
    c.model.arch = ml_collections.ConfigDict(dict(
        model_type="qwen2", vocab_size=152064, hidden_size=3584, intermediate_size=18944,
        num_hidden_layers=28, num_attention_heads=28, num_key_value_heads=4,
        tie_word_embeddings=False, max_position_embeddings=4096, rope_theta=10000.0,
        rms_norm_eps=1e-6))
    c.model.param_dtype = "float32"
    c.model.dtype = "bfloat16"
    c.model.remat = True
    c.model.sampler_dtype = "bfloat16"
    c.tokenizer = "hf:/models/Qwen2.5-Math-7B"
    c.data.source = "dapo_math_17k:/data/dapo-math-17k.parquet"  # registry name : file
    c.data.size = 0  # 0: every example of the file
    c.data.params = ml_collections.ConfigDict({}, type_safe=False)
    c.data.template = "qwen_math"
    c.data.max_prompt_len = 1024
    c.reward = "math"
    c.rollout.batch_prompts = 32
    c.rollout.group_size = 8
    c.rollout.max_response_len = 3072  # prompt + response <= the 4k context window
    c.optim.lr = 1e-6
    c.optim.warmup_steps = 10
    c.optim.weight_decay = 0.1
    c.optim.micro_batch_size = 8
    c.steps = 500
    c.checkpoint_every = 20
    c.mesh.fsdp = -1
    return c
