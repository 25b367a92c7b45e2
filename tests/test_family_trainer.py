"""Every method of the loss family trains the tiny model in the trainer; trainer-level invariants.

Per-method runs are 2 steps of a ~30k-parameter model (marked slow: ~25 s each on 2 CPU cores).
"""

import json
import types

import jax
import numpy as np
import pytest
from flax import nnx

from tests.trainer_utils import parity_reward, set_fields, tiny_cd
from tseeds_jax.rl.config import ConfigValueError, TrainConfig
from tseeds_jax.rl.config.errors import ConfigValueError as LossConfigError
from tseeds_jax.rl.config.methods import METHODS, apply_method
from tseeds_jax.rl.learn import batch as batch_lib
from tseeds_jax.rl.rollout import samples as rollout
from tseeds_jax.rl.setup import make_trainer


def _trainer(run_dir, method=None, *, checkpoints=False, lag=None, **overrides):
    c = tiny_cd(run_dir)
    if method is not None:
        apply_method(c, method, scale="tiny")
        c.run_dir = str(run_dir)
        if c.seeds.refresh_interval > 1:
            c.seeds.refresh_interval = 2  # a refresh at step 0, a seeded batch at step 1
    c.steps = 2
    set_fields(c, overrides)
    cfg = TrainConfig.from_config(c)
    return make_trainer(cfg, checkpoints=checkpoints, env_overrides={"reward_fn": parity_reward},
                        lag=lag)


def _leaves(params):
    return [np.asarray(x) for x in jax.tree_util.tree_leaves(params)]


def _traces_file(path, size):
    """Worked solutions of the compact chain-sum examples (the tiny data source, run seed 0)."""
    from tseeds_jax.data.compact_arith import CompactChainSum

    src = CompactChainSum(seed=0, size=size, config={"min_terms": 3, "max_terms": 4,
                                                     "min_digits": 1, "max_digits": 1})
    with open(path, "w") as f:
        for i in range(size):
            f.write(json.dumps({"prompt": src[i]["prompt"], "response": src.solution(i)}) + "\n")


@pytest.mark.slow
@pytest.mark.parametrize("method", [m for m in METHODS if m not in ("dapo", "thinking_seeds")])
def test_method_trains_tiny_model_without_nans(tmp_path, method):
    over = {"data.size": 200}
    if method == "m2po":
        over["stale.steps"] = 1
    tr = _trainer(tmp_path, method, **over)
    hist = tr.run()
    assert len(hist) == 2
    for m in hist:
        assert m["method"] == method
        for key in ("loss", "grad_norm", "pg_loss", "entropy/all"):
            assert np.isfinite(m[key]), (key, m[key])
    assert any(m["grad_norm"] > 0 for m in hist)
    last = hist[-1]
    if method == "luffy":
        g = tr.cfg.rollout.group_size
        assert all(m["offpolicy_frac"] == 1 / g for m in hist)
        assert last["luffy_offpolicy_frac"] > 0
    if method == "m2po":
        assert [m["stale_age"] for m in hist] == [0, 1]
    if method.startswith("sis"):
        assert 0 <= last["sis_accept_frac"] <= 1 and last["sis_in_topk_frac"] > 0
    if method in ("sis_seeds", "seeds_ctpo"):
        assert last["seed_length"] > 0
    if method == "stare":
        assert np.isfinite(last["stare_entropy_mean"]) and last["stare_gate_on"] in (0.0, 1.0)


@pytest.mark.slow
def test_sis_accepting_everything_equals_its_base(tmp_path):
    # One on-policy update: pi_old = pi_theta, so with K = V every token is in the top-K and is
    # accepted with probability 1; the unit ratio then equals the on-policy ratio of DAPO.
    base = _trainer(tmp_path / "dapo", **{"loss.name": "dapo"})
    v = nnx.merge(base.env.graphdef, base.env.params).cfg.vocab_size
    sis = _trainer(tmp_path / "sis", **{"loss.name": "sis",
                                        "loss.params": {"base": "dapo", "top_k": v}})
    assert sis.learner.proposal_top_k == v
    h_sis, h_base = sis.run(), base.run()
    for a, b in zip(h_sis, h_base, strict=True):
        assert a["sis_accept_frac"] == 1.0
        np.testing.assert_allclose(a["loss"], b["loss"], rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(a["grad_norm"], b["grad_norm"], rtol=1e-5)
    for x, y in zip(_leaves(sis.state.params), _leaves(base.state.params), strict=True):
        np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_m2po_stale_zero_equals_on_policy_and_resume_restores_the_queue(tmp_path):
    over = {"loss.name": "m2po", "optim.old_logp": "recompute", "steps": 3}
    on = _trainer(tmp_path / "on", **over)
    queued = _trainer(tmp_path / "queued", lag=0, **over)  # the queue machinery with lag 0
    h_on, h_q = on.run(), queued.run()
    for a, b in zip(h_on, h_q, strict=True):
        for k in ("loss", "reward", "grad_norm", "response_length", "m2po_masked_frac"):
            np.testing.assert_array_equal(a[k], b[k], err_msg=k)
        assert b["stale_age"] == 0
    assert all(np.array_equal(x, y) for x, y in zip(_leaves(on.state.params),
                                                    _leaves(queued.state.params)))
    # Lag 2 with the adaptive STARE controller: stop after 2 steps, resume, match the full run.
    over = {"loss.name": "stare", "loss.params": {"adaptive": True, "entropy_target": 10.0},
            "stale.steps": 2, "steps": 3}
    full = _trainer(tmp_path / "full", checkpoints=True, **over)
    h_full = full.run()
    assert [m["stale_age"] for m in h_full] == [0, 1, 2]
    assert h_full[2]["stare_pos_weight"] > h_full[0]["stare_pos_weight"]  # controller moved
    part = _trainer(tmp_path / "part", checkpoints=True, **over)
    part.run(steps=2)
    resumed = _trainer(tmp_path / "part", checkpoints=True, **over)
    assert resumed.restore() and resumed.step == 2
    assert sorted(resumed.source.stale.queue) == [2, 3]  # generated at steps 0 and 1
    h_rest = resumed.run()
    for k in ("loss", "reward", "grad_norm", "stare_pos_weight", "stare_entropy_mean"):
        np.testing.assert_array_equal(h_full[2][k], h_rest[0][k], err_msg=k)
    assert all(np.array_equal(x, y) for x, y in zip(_leaves(full.state.params),
                                                    _leaves(resumed.state.params)))


@pytest.mark.slow
def test_luffy_jsonl_trace_is_the_first_sample_with_seed_mask_over_the_response(tmp_path):
    path = tmp_path / "traces.jsonl"
    _traces_file(path, 50)
    tr = _trainer(tmp_path / "run", **{"loss.name": "luffy", "offpolicy.source": f"jsonl:{path}",
                                       "data.size": 50, "rollout.max_response_len": 32})
    g = tr.cfg.rollout.group_size
    samples, _ = tr.source.next(0, tr.policy(tr.state.params))
    for i, s in enumerate(samples):
        assert s.offpolicy == (i % g == 0)
    tok_decode = tr.env.decode
    from tseeds_jax.data.compact_arith import extract_answer

    for s in samples[::g]:
        assert s.cont_ids == [] and s.finish == "stop" and len(s.seed_ids) > 0
        # the trace is the worked solution of this very prompt (its answer is the reference's)
        assert extract_answer(tok_decode(s.seed_ids)) == str(s.reference["answer"])
    batch = batch_lib.build_batch(samples, np.zeros(len(samples)), prompt_width=16,
                                response_width=tr.cfg.rollout.max_response_len)
    np.testing.assert_array_equal(batch.seed_mask_BR[::g], batch.resp_mask_BR[::g])
    assert batch.seed_mask_BR[1::g].sum() == 0 and batch.resp_mask_BR[::g].sum() > 0
    m = tr.train_step()
    assert np.isfinite(m["loss"]) and m["offpolicy_frac"] == 1 / g
    # "another checkpoint via the sampler": here the run's current model writes the traces.
    from tseeds_jax.rl.methods import traces as offpolicy
    from tseeds_jax.rl.setup import build_source, build_tokenizer

    tok = build_tokenizer(tr.cfg, build_source(tr.cfg))
    params = jax.tree_util.tree_map(jax.numpy.copy, tr.state.params)  # the update donates state
    src = offpolicy.ModelTraces(tr.env.graphdef, params,
                                offpolicy._sampler(tr.cfg, tr.env.graphdef, tok), 12, run_seed=0,
                                stop_ids=tuple(tok.stop_ids))
    prompts = [s.prompt_ids for s in samples[::g]]
    got = src.traces(prompts, step=3, first_prompt=0)
    assert got == src.traces(prompts, step=3, first_prompt=0)  # deterministic per (step, prompt)
    assert all(0 < len(t) <= 12 for t in got)


def test_bad_family_config_names_the_field(tmp_path):
    def cfg(**over):
        c = tiny_cd(tmp_path)
        set_fields(c, over)
        return TrainConfig.from_config(c)

    # rl/config/family.py raises the leaf module's ConfigValueError (it may not import rl/config/schema.py);
    # once rl/config/schema.py re-exports that class, both names are one class.
    with pytest.raises(ConfigValueError, match=r"config.loss.name='nope': unknown loss"):
        cfg(**{"loss.name": "nope"})
    with pytest.raises(LossConfigError, match=r"config.loss.params.taux=.*known: \['agg_mode'"):
        cfg(**{"loss.name": "m2po", "loss.params": {"taux": 1.0}})
    with pytest.raises(LossConfigError, match=r"config.loss.params.base='ppo'"):
        cfg(**{"loss.name": "sis", "loss.params": {"base": "ppo"}})
    with pytest.raises(ConfigValueError, match=r"config.offpolicy.source=.*loss.name='luffy'"):
        cfg(**{"offpolicy.source": "jsonl:x.jsonl"})
    with pytest.raises(ConfigValueError,
                       match=r"config.stale.steps=2 with config.seeds.refresh_interval=4"):
        cfg(**{"stale.steps": 2, "seeds.refresh_interval": 4})
    with pytest.raises(ConfigValueError, match=r"config.loss.params.scope='seed'"):
        cfg(**{"loss.name": "sis", "loss.params": {"scope": "seed"}})
    with pytest.raises(LossConfigError, match=r"config.loss.params.top_k=0"):
        cfg(**{"loss.name": "sis", "loss.params": {"top_k": 0}})


def test_clip_defaults_come_from_the_loss_unless_set(tmp_path):
    from tseeds_jax.rl.learn.learner import loss_hparams

    def hp(**loss):
        c = tiny_cd(tmp_path)
        for k, v in loss.items():
            c.loss[k] = v
        return loss_hparams(TrainConfig.from_config(c).loss)[1]

    g = hp(name="gspo")
    assert (g.clip_low, g.clip_high) == (3e-4, 4e-4)
    d = hp(name="dapo")
    assert (d.clip_low, d.clip_high, d.clip_c) == (0.2, 0.28, 10.0)
    assert (hp(name="grpo").clip_high, hp(name="gspo", clip_high=1e-3).clip_high) == (0.2, 1e-3)
    s = hp(name="sis", params={"base": "gspo_token"})
    assert (s.base.clip_low, s.base.clip_high) == (3e-4, 4e-4)


def test_trace_file_errors_name_file_and_line(tmp_path):
    from tseeds_jax.rl.methods.traces import JsonlTraces

    enc = lambda text: [ord(ch) % 50 for ch in text]  # noqa: E731
    with pytest.raises(FileNotFoundError, match=r"trace file '.*missing.jsonl' does not exist"):
        JsonlTraces(str(tmp_path / "missing.jsonl"), enc, eos_id=1)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "1+2:", "response": "1+2=3 #3"}\n{"prompt": "3+4:"}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:2: missing field 'response'"):
        JsonlTraces(str(bad), enc, eos_id=1)
    bad.write_text('{"prompt": "1+2:", "response": "1+2=3 #3"}\n\n{not json\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:3: not valid JSON"):
        JsonlTraces(str(bad), enc, eos_id=1)
    bad.write_text('{"prompt": 5, "response": "x"}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:1: field 'prompt' must be a string"):
        JsonlTraces(str(bad), enc, eos_id=1)
    good = tmp_path / "good.jsonl"
    good.write_text('{"prompt": "1+2:", "responses": ["a", "b"]}\n'
                    '{"prompt_ids": [7, 8], "response_ids": [9, 1]}\n')
    tr = JsonlTraces(str(good), enc, eos_id=1, run_seed=3)
    got = tr.traces([enc("1+2:"), [7, 8]], step=0, first_prompt=0)
    assert got[0] in ([*enc("a"), 1], [*enc("b"), 1]) and got[1] == [9, 1]  # EOS appended to text
    with pytest.raises(KeyError, match=r"good.jsonl: no trace for prompt"):
        tr.traces([[4]], step=0, first_prompt=0)
    lenient = JsonlTraces(str(good), enc, eos_id=1, on_missing="on_policy")
    assert lenient.traces([[4]], step=0, first_prompt=0) == [None]


def test_missing_trace_file_fails_at_trainer_build(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"nowhere.jsonl"):
        _trainer(tmp_path, **{"loss.name": "luffy",
                              "offpolicy.source": f"jsonl:{tmp_path / 'nowhere.jsonl'}"})


def test_packed_samples_roundtrip_exactly():
    rng = np.random.default_rng(0)
    samples = [
        rollout.Sample(group=0, prompt_ids=[1, 2], reference={"answer": "3"}, seed_ids=[4, 5],
                       seed_logp=rng.normal(size=2).astype(np.float32), cont_ids=[6],
                       cont_logp=rng.normal(size=1).astype(np.float32), finish="stop",
                       reward=1.0, reward_reason="ok", old_logp=rng.normal(size=3).astype(
                           np.float32), topk_ids=rng.integers(0, 9, (3, 2)).astype(np.int32),
                       topk_logp=rng.normal(size=(3, 2)).astype(np.float32)),
        rollout.Sample(group=0, prompt_ids=[1, 2], reference={"answer": "3"}, seed_ids=[7, 8, 9],
                       seed_logp=np.zeros(3, np.float32), cont_ids=[], cont_logp=np.zeros(0),
                       finish="length", offpolicy=True),
        # a partial rollout's sample: per-token versions, carried sampler log-probs, a factor
        rollout.Sample(group=1, prompt_ids=[3], reference=None, seed_ids=[5, 6],
                       seed_logp=rng.normal(size=2).astype(np.float32), cont_ids=[7],
                       cont_logp=rng.normal(size=1).astype(np.float32), finish="stop",
                       versions=np.array([0, 1, 2], np.int32), adv_factor=0.5,
                       seed_sampler_logp=np.array([np.nan, -0.25], np.float32)),
    ]
    arrays, meta = rollout.pack_samples(samples)
    back = rollout.unpack_samples(arrays, json.loads(json.dumps(meta)))
    for a, b in zip(samples, back, strict=True):
        for f in ("group", "prompt_ids", "reference", "seed_ids", "cont_ids", "finish", "reward",
                  "reward_reason", "offpolicy", "adv_factor"):
            assert getattr(a, f) == getattr(b, f), f
        for f in ("seed_logp", "cont_logp", "old_logp", "topk_ids", "topk_logp", "versions",
                  "seed_sampler_logp"):
            x, y = getattr(a, f), getattr(b, f)
            assert (x is None) == (y is None), f
            if x is not None:
                np.testing.assert_array_equal(np.asarray(x, np.float64), np.asarray(y, np.float64))


def test_run_checks_come_from_the_loss_entry():
    # The checks rl/config/schema.py makes by loss name today, asked of the registry entry instead
    # (family.check_run); messages as rl/config/schema.py words them.
    from tseeds_jax.rl.config import family

    def lcfg(name, **params):  # check_run reads a loss section's name and params
        return types.SimpleNamespace(name=name, params=params)

    with pytest.raises(LossConfigError, match=r"^config.offpolicy.source='jsonl:x.jsonl': "
                       r"off-policy traces have no behavior log-probs; they need "
                       r"loss.name='luffy' \(got 'dapo'\)$"):
        family.check_run(lcfg("dapo"), refresh_interval=1, offpolicy_source="jsonl:x.jsonl")
    family.check_run(lcfg("luffy"), refresh_interval=1, offpolicy_source="jsonl:x.jsonl")
    with pytest.raises(LossConfigError, match=r"^config.loss.params.scope='seed': SIS on seed "
                       r"tokens needs seeds.refresh_interval > 1$"):
        family.check_run(lcfg("sis", scope="seed"), refresh_interval=1, offpolicy_source="")
    family.check_run(lcfg("sis", scope="seed"), refresh_interval=2, offpolicy_source="")
    family.check_run(lcfg("sis", scope="all"), refresh_interval=1, offpolicy_source="")
