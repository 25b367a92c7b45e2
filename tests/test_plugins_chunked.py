"""The learner hooks' statistics passes (rl/learn/hooks.py) run in the trainer's row chunks
(`optim.micro_batch_size` rows per forward) and give the whole-batch values: old log-probs of the
recompute pass (ctpo / sis), SIS top-K (sis, sis_seeds at refresh time), M2PO's generation-time
log-probs of stale samples (m2po).

Runs on the 8 emulated CPU devices of conftest.py.
"""

import numpy as np
import pytest

from tests.trainer_utils import parity_reward, set_fields, tiny_cd
from tseeds_jax.rl.config import TrainConfig
from tseeds_jax.rl.config.methods import apply_method
from tseeds_jax.rl.learn import batch as batch_lib
from tseeds_jax.rl.learn import layout as layout_lib
from tseeds_jax.rl.learn.hooks import TopKProposal
from tseeds_jax.rl.rollout import samples as rollout
from tseeds_jax.rl.run import hosts
from tseeds_jax.rl.setup import make_trainer

ATOL = 1e-5  # float32 log-probs of a tiny model


def _trainer(run_dir, method, **overrides):
    c = apply_method(tiny_cd(run_dir), method, scale="tiny")  # as configs/tiny_<method>.py
    c.run_dir = str(run_dir)
    c.optim.micro_batch_size = 2
    set_fields(c, overrides)
    return make_trainer(TrainConfig.from_config(c), checkpoints=False,
                        env_overrides={"reward_fn": parity_reward})


def _samples(n, seed, r):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        prompt = rng.integers(3, 40, size=int(rng.integers(3, 12))).tolist()
        cont = rng.integers(3, 40, size=int(rng.integers(1, r))).tolist()
        out.append(rollout.Sample(group=i // 4, prompt_ids=prompt, reference=None, seed_ids=[],
                                  seed_logp=np.zeros(0, np.float32), cont_ids=cont,
                                  cont_logp=np.zeros(len(cont), np.float32), finish="length"))
    return out


def _spy_rows(tr, monkeypatch):
    """Rows of every forward of the learner's jitted statistics / top-K functions."""
    rows = []
    for name in ("stats_pass", "topk_pass"):
        real = getattr(tr.learner, name)

        def spy(params, tokens, *rest, _real=real):
            rows.append(tokens.shape[0])
            return _real(params, tokens, *rest)

        monkeypatch.setattr(tr.learner, name, spy)
    return rows


def _params(tr):
    return hosts.sampler_params(tr.state.params, tr.cfg.hardware.sampler_placement, tr.hosts)


@pytest.mark.parametrize("method,placement", [("ctpo", "replica"), ("sis", "replica"),
                                              ("sis", "sharded")])
def test_prepare_batch_recompute_matches_whole_batch(tmp_path, monkeypatch, method, placement):
    over = {"hardware.sampler_placement": placement}
    if placement == "sharded":  # 4 batch shards: the chunk of 2 rows is rounded up to 4
        over.update({"mesh.data": 2, "mesh.fsdp": 2, "mesh.tensor": 2})
    tr = _trainer(tmp_path, method, **over)
    assert tr.learner.needs_old_logp  # mini-batched: pi_old is recomputed
    r, k = tr.cfg.rollout.max_response_len, tr.learner.proposal_top_k
    samples = _samples(8, seed=1, r=r)
    batch = batch_lib.build_batch(samples, np.zeros(8), prompt_width=tr.cfg.data.max_prompt_len,
                                response_width=r, top_k=k)
    params = _params(tr)
    want_logp = tr.learner.stats(params, batch.tokens_BT, batch.attn_mask_BT, r)[0]
    want = tr.learner.topk(params, batch.tokens_BT, batch.attn_mask_BT, r) if k else None
    rows = _spy_rows(tr, monkeypatch)
    got = tr.hooks.prepare_batch(params, batch)
    chunk = 4 if placement == "sharded" else 2
    assert rows and set(rows) == {chunk}
    np.testing.assert_allclose(got.old_logp_BR, want_logp, rtol=0, atol=ATOL)
    if k:
        mask = batch.resp_mask_BR[..., None] > 0
        np.testing.assert_array_equal(np.where(mask, got.topk_ids_BRK, 0),
                                      np.where(mask, want[0], 0))
        np.testing.assert_allclose(np.where(mask, got.topk_logp_BRK, 0),
                                   np.where(mask, want[1], 0), rtol=0, atol=ATOL)


def test_annotate_stale_samples_matches_whole_batch(tmp_path, monkeypatch):
    tr = _trainer(tmp_path, "m2po")
    r = tr.cfg.rollout.max_response_len
    samples = _samples(5, seed=2, r=r)  # 5 rows: the last chunk is padded
    tokens, attn = layout_lib.padded_rows([(s.prompt_ids, s.response_ids) for s in samples],
                                               tr.cfg.data.max_prompt_len, r)
    params = _params(tr)
    want = tr.learner.stats(params, tokens, attn, r)[0]
    rows = _spy_rows(tr, monkeypatch)
    tr.hooks.annotate(params, samples)
    assert rows == [2, 2, 2]
    for i, s in enumerate(samples):
        np.testing.assert_allclose(s.old_logp, want[i, : len(s.response_ids)], rtol=0, atol=ATOL)
    rows.clear()
    tr.hooks.annotate(params, [])  # nothing to do, no forward
    assert rows == []


def test_seed_topk_at_refresh_matches_whole_batch(tmp_path, monkeypatch):
    tr = _trainer(tmp_path, "sis_seeds")
    r, k = tr.cfg.rollout.max_response_len, tr.learner.proposal_top_k
    samples = _samples(6, seed=3, r=r)
    tokens, attn = layout_lib.padded_rows([(s.prompt_ids, s.response_ids) for s in samples],
                                               tr.cfg.data.max_prompt_len, r)
    lengths = np.array([min(len(s.response_ids), h) for s, h in zip(samples, [0, 3, 5, 1, 7, 2])])
    params = _params(tr)
    want_ids, want_lp = tr.learner.topk(params, tokens, attn, r)
    rows = _spy_rows(tr, monkeypatch)
    tr.hooks.after_seed_batch(1, params, tokens, attn, lengths)
    assert rows == [2, 2, 2]
    got = tr.hooks.of(TopKProposal).seed_topk[1]
    for i, h in enumerate(lengths.tolist()):
        assert got[i][0].shape == (h, k)
        np.testing.assert_array_equal(got[i][0], want_ids[i, :h])
        np.testing.assert_allclose(got[i][1], want_lp[i, :h], rtol=0, atol=ATOL)
