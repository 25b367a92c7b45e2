"""A LoRA run end to end on the tiny task (rl/learn/adapters.py, rl/setup.py): the sampler decodes
with the current adapters after every update (both sync modes), only adapter bytes move to it,
checkpoints and pi_b snapshots hold adapters, a resumed run continues bit for bit, bad config
values name their field.

The sampler is checked against an independent reference: `sampling.generate` on a plain model
whose weights are W + scale A B (`lora.merge_lora` of the learner's current adapters over the
base), with the same request seeds. Log-probs: float32, 1e-5 of the largest magnitude
(conventions); the merged and low-rank decode steps round differently.
"""

import os
import re

import jax
import numpy as np
import pytest
from flax import nnx

from tests.trainer_utils import tiny_cd, tiny_trainer
from tseeds_jax import checkpoint, sampling
from tseeds_jax.model import lora
from tseeds_jax.rl.config import ConfigValueError, TrainConfig
from tseeds_jax.rl.learn import adapters as adapters_lib

LORA = {"lora.rank": 4, "lora.alpha": 8.0, "optim.lr": 3e-2}
REL = 1e-5
PROMPTS = [[5, 6, 7], [8, 9], [10, 11, 12, 13]]
SEEDS = [11, 12, 13]


def _sample(tr, adapters):
    """The run's own sampler path: the policy the trainer hands a source, the run's sample_fn."""
    policy = tr.policy(adapters)
    return tr.env.sample_fn(policy.sampler, PROMPTS, [8] * len(PROMPTS), (7, 0))


def _reference(tr, adapters):
    """Independent: a plain model with merged weights, the same request seeds."""
    from tseeds_jax.rl.rollout import streams

    model = lora.merge_lora(nnx.merge(tr.env.graphdef, adapters, *tr.env.frozen.states))
    seeds = [streams.request_seed(7, i) for i in range(len(PROMPTS))]
    r = tr.cfg.rollout
    res = sampling.generate(model, PROMPTS, max_new_tokens=8, temperature=r.temperature,
                            top_p=r.top_p, top_k=r.top_k, seed=seeds,
                            max_prefill_length=tr.cfg.data.max_prompt_len + r.max_response_len)
    return [(x.tokens, x.logprobs) for x in res]


def _same_outputs(got, want):
    """The run's outputs (stopped at the task's stop token) are the reference's first tokens
    (which runs on without stop tokens: token i depends only on its key and the prefix)."""
    for (t, lp, _), (wt, wlp) in zip(got, want, strict=True):
        assert len(t) and list(t) == list(wt[:len(t)])
        lp, wlp = np.asarray(lp, np.float64), np.asarray(wlp[:len(t)], np.float64)
        assert np.abs(lp - wlp).max() <= REL * np.abs(wlp).max()


@pytest.mark.parametrize("mode", ["merged", "lowrank"])
def test_sampler_decodes_with_the_current_adapters(tmp_path, mode):
    """Fails if the adapters never reach the sampler, or reach it a step late: after an
    update that changes them, the sampler's outputs change and equal the reference's."""
    tr = tiny_trainer(tmp_path, **LORA, **{"lora.sampler": mode, "seeds.refresh_interval": 1})
    before_ad = jax.tree.map(np.array, tr.state.params)
    before = _sample(tr, tr.state.params)
    _same_outputs(before, _reference(tr, tr.state.params))
    for _ in range(2):
        metrics = tr.train_step()
    after = _sample(tr, tr.state.params)
    _same_outputs(after, _reference(tr, tr.state.params))
    moved = max(float(np.abs(np.asarray(a) - b).max()) for a, b in zip(
        jax.tree.leaves(tr.state.params), jax.tree.leaves(before_ad)))
    assert moved > 1e-3  # the updates changed the adapters
    gap = max(float(np.abs(np.asarray(a[1]) - np.asarray(b[1])[:len(a[1])]).max())
              for a, b in zip(after, before) if len(a[1]) and len(b[1]))
    assert gap > 1e-3, gap  # ... and the sampler's log-probs with them
    # the weight sync: the adapters' bytes per step, nothing of the base
    assert metrics["lora_sync_bytes"] == adapters_lib.nbytes(tr.state.params)
    assert metrics["lora_sync_bytes"] < adapters_lib.nbytes(tr.env.frozen.base) / 2


def test_checkpoints_and_snapshots_hold_adapters_and_resume_bitwise(tmp_path):
    """Thinking Seeds (T 2) with snapshots: the train state and pi_b are adapter trees (their
    bytes beside a full snapshot's); a run resumed from step 2 ends as the uninterrupted one."""
    over = {**LORA, "seeds.refresh_interval": 2, "seeds.snapshots": True, "steps": 4}
    full = tiny_trainer(tmp_path / "full", checkpoints=True, **over)
    h_full = full.run()
    part = tiny_trainer(tmp_path / "part", checkpoints=True, **over)
    part.run(steps=2)
    resumed = tiny_trainer(tmp_path / "part", checkpoints=True, **over)
    assert resumed.restore() and resumed.step == 2
    h_rest = resumed.run()
    for a, b in zip(h_full[2:], h_rest, strict=True):
        for k in ("loss", "reward", "grad_norm", "ratio_mean/seed", "entropy/all"):
            np.testing.assert_array_equal(a[k], b[k], err_msg=k)
    for a, b in zip(jax.tree.leaves(full.state), jax.tree.leaves(resumed.state), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert any(m["grad_norm"] > 0 for m in h_full)

    ckpts = checkpoint.Checkpoints(str(tmp_path / "full" / "ckpt"), keep_last=None)
    tree, _ = ckpts.restore(4)
    n_ad = len(jax.tree.leaves(full.state.params))
    assert len(jax.tree.leaves(tree["train"]["params"])) == n_ad
    snap, meta = ckpts.restore_historical("behavior-00000002")
    assert meta["step"] == 2
    flat = jax.tree_util.tree_flatten_with_path(snap)[0]
    assert len(flat) == n_ad and all("lora" in jax.tree_util.keystr(p) for p, _ in flat)
    # pi_b of step 2 = the adapters after the first two updates (the resumed run's at step 2)
    want = jax.tree_util.tree_flatten_with_path(nnx.to_pure_dict(part.state.params))[0]
    got = {_key(p): x for p, x in flat}
    assert sorted(got) == sorted(_key(q) for q, _ in want)
    for q, y in want:
        np.testing.assert_array_equal(np.asarray(got[_key(q)]), np.asarray(y))


def _key(path) -> tuple:
    """A tree path as strings, without the stored State's 'value' level."""
    return tuple(str(getattr(k, "key", k)) for k in path if getattr(k, "key", None) != "value")


def test_reference_policy_is_the_base(tmp_path):
    """loss.kl_coef > 0: the run keeps no reference copy; the KL term's log-probs are the
    base's (at B = 0 the policy's own: KL 0 at the first step)."""
    tr = tiny_trainer(tmp_path, **LORA, **{"loss.kl_coef": 0.1, "seeds.refresh_interval": 1})
    assert tr.env.ref_params is None
    hist = tr.run(steps=2)
    assert abs(hist[0]["kl_loss"]) < 1e-6 and hist[1]["kl_loss"] > 1e-6


@pytest.mark.parametrize("field,value,words", [
    ("lora.rank", -1, "integer >= 0"), ("lora.alpha", 0.0, "positive"),
    ("lora.dropout", 1.0, "[0, 1)"), ("lora.targets", ("q", "qkv"), "distinct names"),
    ("lora.sampler", "fused", "known"), ("lora.init", "hf:x", "peft:DIR"),
    ("optim.train_layers", "head", "only the adapters"),
])
def test_bad_values_name_the_field(tmp_path, field, value, words):
    cd = tiny_cd(tmp_path, **{"lora.rank": 4, field: value})
    with pytest.raises(ConfigValueError, match=re.escape(f"config.{field}={value!r}")) as e:
        TrainConfig.from_config(cd)
    assert words in str(e.value)


def test_off_by_default_and_init_without_rank_refused(tmp_path):
    cfg = TrainConfig.from_config(tiny_cd(tmp_path))
    assert cfg.lora.rank == 0 and "lora" not in cfg.method_label
    with pytest.raises(ConfigValueError, match=r"config\.lora\.init='peft:x'.*rank > 0"):
        TrainConfig.from_config(tiny_cd(tmp_path, **{"lora.init": "peft:x"}))
    assert TrainConfig.from_config(tiny_cd(tmp_path, **LORA)).method_label.endswith("+lora4")


def test_load_run_gives_the_merged_model(tmp_path):
    """`load_run` (evaluation, LUFFY's run: traces) of a LoRA run: the base rebuilt from
    model.init with the checkpoint's adapters merged in."""
    from tseeds_jax.rl.setup import load_run

    tr = tiny_trainer(tmp_path, checkpoints=True, **LORA, **{"seeds.refresh_interval": 1})
    tr.run(steps=2)
    graphdef, params, cfg, _ = load_run(str(tmp_path))
    assert cfg.lora.rank == 4 and not lora.has_lora(nnx.merge(graphdef, params))
    want = lora.merge_lora(nnx.merge(tr.env.graphdef, tr.state.params, *tr.env.frozen.states))
    for a, b in zip(jax.tree.leaves(nnx.state(want)), jax.tree.leaves(params), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert os.path.isdir(tmp_path / "ckpt")
