"""The step model (scale/step_model.py) on hand-computed cases, the length distribution field,
and `tseeds plan` printing the estimate."""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
import pytest

from tseeds_jax.rl.config import lengths as ld
from tseeds_jax.rl.config.errors import ConfigValueError
from tseeds_jax.scale import step_model as sm


def test_sync_call_hand_computed_occupancy_and_time():
    # 4 slots, responses of 1, 2, 3, 6 tokens, a step costs 1 s whatever it reads: the call runs
    # until the 6-token response ends (6 steps), 12 tokens in 24 slot-steps.
    cost = sm.DecodeCost(slots=4, fixed_s=1.0, kv_s_per_token=0.0)
    r = sm.sync_call([1, 2, 3, 6], cost, prompt_len=0)
    assert r["decode_steps"] == 6
    assert r["decode_s"] == pytest.approx(6.0, abs=1e-12)
    assert r["tokens"] == 12
    assert r["occupancy"] == pytest.approx(0.5, abs=1e-12)
    # live slots per step: 4, 3, 2, 1, 1, 1 -> tenths of 6 steps (each step its own share)
    assert r["occupancy_curve"][0] == pytest.approx(1.0)
    assert r["occupancy_curve"][-1] == pytest.approx(0.25)


def test_sync_call_cache_reads_include_finished_slots():
    # prompt 2, 0.1 s per cached position: a live slot at token j reads 2 + j, a finished one
    # keeps reading 2 + L. Step t's reads, by hand: t0 8, t1 3+3*3=12, t2 3+4+2*4=15,
    # t3 3+4+5+5=17, t4 18, t5 19 -> time 6 x 1 + 0.1 x 89 = 14.9 s.
    cost = sm.DecodeCost(slots=4, fixed_s=1.0, kv_s_per_token=0.1)
    r = sm.sync_call([1, 2, 3, 6], cost, prompt_len=2, prefill_s_per_token=0.5)
    assert r["decode_s"] == pytest.approx(14.9, abs=1e-9)
    assert r["prefill_s"] == pytest.approx(0.5 * 2 * 4, abs=1e-12)


def test_sync_call_refills_a_freed_slot():
    # 2 slots, requests 3, 1, 2 in order: the 1-token response frees its slot after step 1 and
    # the 2-token one runs in steps 2-3, ending with the 3-token one: 3 steps, every slot busy.
    cost = sm.DecodeCost(slots=2, fixed_s=1.0, kv_s_per_token=0.0)
    r = sm.sync_call([3, 1, 2], cost, prompt_len=0)
    assert r["decode_steps"] == 3 and r["occupancy"] == pytest.approx(1.0)


def test_async_steady_hand_computed():
    # 2 slots always live, budget 12 tokens -> 6 decode steps; a live slot's mean token index
    # = (0 + 1 + (0+1+2) + (0+...+5)) / 12 = 19/12, so a step reads 2 x 19/12 positions.
    cost = sm.DecodeCost(slots=2, fixed_s=1.0, kv_s_per_token=0.1)
    a = sm.async_steady([1, 2, 3, 6], cost, prompt_len=0, prefill_s_per_token=0.5)
    assert a["decode_steps"] == pytest.approx(6.0)
    assert sm.mean_position([1, 2, 3, 6]) == pytest.approx(19 / 12)
    assert a["decode_s"] == pytest.approx(6 * (1 + 0.1 * 2 * 19 / 12), abs=1e-12)
    # the 2 interrupted responses are prefilled again: 2 x 19/12 positions at 0.5 s
    assert a["reprefill_s"] == pytest.approx(0.5 * 2 * 19 / 12, abs=1e-12)
    assert sm.async_steady([1, 2, 3, 6], cost, 0, 0.5, reprefill=False)["reprefill_s"] == 0


def test_estimate_speedup_hand_computed():
    # 4 slots, lengths 1, 2, 3, 6, 1 s per decode step, update 1 s, no prefill / sync:
    # sync 6 + 1 = 7 s; without the staleness bound 12 / 4 = 3 steps + 1 = 4 s, same 12 tokens:
    # 7 / 4 = 1.75x.
    cost = sm.DecodeCost(slots=4, fixed_s=1.0, kv_s_per_token=0.0)
    e = sm.estimate([1, 2, 3, 6], cost, prompt_len=0, update_s=1.0, chips=2)
    assert e["sync"]["step_s"] == pytest.approx(7.0)
    assert e["async_unbounded"]["step_s"] == pytest.approx(4.0)
    assert e["speedup_unbounded"] == pytest.approx(1.75)
    assert e["sync"]["tokens_per_s_per_chip"] == pytest.approx(12 / 7 / 2)
    # the headline is the runtime's rule with C = the unbounded model's 3 decode steps
    from tseeds_jax.scale.step_runtime import async_runtime

    rt = async_runtime([1, 2, 3, 6], cost, 0, group_size=1, chunk=3, max_staleness=1)
    assert e["async"]["step_s"] == pytest.approx(rt["decode_s"] + 1.0)
    assert e["speedup"] == pytest.approx(7.0 / (rt["decode_s"] + 1.0) * rt["tokens"] / 12)


def test_every_response_at_the_cap_gains_nothing():
    # "full": sync already runs every slot to the end; async without re-prefill is equal
    cost = sm.DecodeCost(slots=4, fixed_s=1.0, kv_s_per_token=0.01)
    lengths = ld.parse("full").lengths(4, 8)
    e = sm.estimate(lengths, cost, prompt_len=4, update_s=0.5, chips=1, reprefill=False)
    assert e["speedup"] == pytest.approx(1.0, abs=1e-12)


def test_split_never_beats_interleaved():
    # max(g / a, u / (1 - a)) >= g + u for every a in (0, 1)
    cost = sm.DecodeCost(slots=8, fixed_s=1e-3, kv_s_per_token=1e-7)
    lengths = ld.parse(ld.DEFAULT).lengths(8, 64)
    for update_s in (0.001, 0.05, 1.0):
        e = sm.estimate(lengths, cost, prompt_len=16, update_s=update_s, chips=8, replicas=8,
                        placement="split")
        assert e["async"]["step_s"] >= e["async"]["interleaved_step_s"] - 1e-12


def test_version_lags_hand_computed():
    # one 4-token response, 2 decode steps per window, start phase uniform over the window:
    # phase < 1: tokens in windows 0,0,1,1 -> lags 1,1,0,0; phase >= 1: 0,1,1,2 -> lags 2,1,1,0
    tok, resp = sm.version_lags([4], d=2.0)
    assert tok == pytest.approx([3 / 8, 4 / 8, 1 / 8])
    assert resp == pytest.approx([0.0, 0.5, 0.5])
    tok1, _ = sm.version_lags([4], d=2.0, offset=1)  # split: the sampler one version behind
    assert tok1 == pytest.approx([0.0, 3 / 8, 4 / 8, 1 / 8])
    e = sm.estimate([4, 4], sm.DecodeCost(1, 1.0, 0.0), prompt_len=0, update_s=0.0, chips=1,
                    budget_tokens=2.0, max_staleness=1)
    assert e["async_unbounded"]["responses_over_staleness"] == pytest.approx(0.5)
    assert e["async"]["oldest_token_age"] <= 1  # the runtime's rule never trains older ones


def test_lognormal_lengths_follow_the_formula():
    dist = ld.parse("lognormal:median=0.25,sigma=0.7")
    n, cap = 1001, 4000
    lengths = np.array(dist.lengths(n, cap))
    assert np.all(np.diff(lengths) >= 0)
    assert lengths[n // 2] == round(cap * 0.25)  # the median quantile
    # share at the cap: P(Z > ln(1/0.25) / 0.7), float64 from the normal CDF
    p_cap = 1 - 0.5 * (1 + math.erf(math.log(4) / 0.7 / math.sqrt(2)))
    assert dist.cap_share() == pytest.approx(p_cap, rel=1e-9)
    assert np.mean(lengths == cap) == pytest.approx(p_cap, abs=2 / n)
    # the 10% quantile: median x exp(sigma x z_0.1)
    z = NormalDist().inv_cdf(0.1)
    assert np.quantile(lengths, 0.1) == pytest.approx(cap * 0.25 * math.exp(0.7 * z), rel=0.01)


def test_default_distribution_shape():
    dist = ld.parse(ld.DEFAULT)
    lengths = dist.lengths(4096, 8192)
    assert 0.38 < np.mean(lengths) / 8192 < 0.42  # mean 0.40 R (docs)
    assert 0.10 < dist.cap_share() < 0.12  # 11% at the cap


@pytest.mark.parametrize("spec,words", [
    ("gamma:k=2", "unknown distribution 'gamma'"),
    ("lognormal:median=0.3", "needs both"),
    ("lognormal:median=1.5,sigma=1", "median=1.5: must be in (0, 1]"),
    ("lognormal:median=0.3,sigma=0", "sigma=0: must be in (0, 5]"),
    ("lognormal:median=x,sigma=1", "'x' is not a number"),
    ("full:1", "takes no parameters"),
])
def test_bad_specs_name_field_and_value(spec, words):
    with pytest.raises(ConfigValueError) as e:
        ld.parse(spec)
    msg = str(e.value)
    assert "config.rollout.length_distribution=" in msg and repr(spec) in msg and words in msg


def test_config_validates_the_field():
    from tseeds_jax.rl.config import TrainConfig, default_config

    cd = default_config()
    assert TrainConfig.from_config(cd).rollout.length_distribution == ld.DEFAULT
    cd.rollout.length_distribution = "lognormal:median=0,sigma=1"
    with pytest.raises(ConfigValueError, match=r"rollout\.length_distribution.*median=0"):
        TrainConfig.from_config(cd)


def test_plan_cli_prints_sync_and_async(tmp_path, capsys):
    from tseeds_jax.scale import plan_cli

    cfg = tmp_path / "c.py"
    cfg.write_text("from tseeds_jax.rl.config import tiny_config\n"
                   "def get_config():\n    c = tiny_config()\n    c.model.arch.vocab_size = 64\n"
                   "    c.hardware.sampler_placement = 'decode'\n    return c\n")
    base = ["--config", str(cfg), "--accelerator", "v5p-8", "--config.mesh.fsdp=4"]
    rc = plan_cli.main(base + ["--update-s", "0.5", "--config.rollout.length_distribution=full"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "step model (full: mean 1.00 R, 100% at the cap" in out
    assert "update: --update-s" in out
    lines = [x.strip() for x in out.splitlines() if x.strip().startswith(("sync:", "async ("))]
    assert len(lines) == 2 and "update 0.50" in lines[0] and "occupancy 1.00" in lines[0]
    # every response to the cap: the same decode steps either way (32 = R)
    assert "decode 32 steps" in lines[0] and "decode 32 steps" in lines[1]
    assert plan_cli.main(base + ["--json"]) == 0
    import json

    est = json.loads(capsys.readouterr().out)["step_model"]
    assert est["length_distribution"]["spec"] == ld.DEFAULT.replace("1.0", "1")
    assert est["sync"]["occupancy"] < 1.0 and est["async_unbounded"]["occupancy"] == 1.0
    assert est["async"]["oldest_token_age"] <= est["async"]["max_staleness"]


def _inputs(**kw):
    base = dict(topology="v6e:2x2", chips=2, replicas=2, requests=4, slots=4, prompt_len=0,
                max_response_len=6, cache_len=64, length_distribution="full",
                decode_fixed_s=1.0, decode_kv_s_per_token=0.0, decode_flops_s=0.0,
                decode_ici_s=0.0, prefill_s_per_token=0.0, sync_s=0.25)
    base.update(kw)
    return base


def test_step_model_cli_reads_saved_compile_outputs(tmp_path, capsys):
    import json

    from tseeds_jax import results_record
    from tseeds_jax.scale import step_model_cli

    sampler, learner = tmp_path / "r1.sampler.json", tmp_path / "r1.learner.json"
    sampler.write_text(json.dumps({"summary": {"step_model_inputs": _inputs()}}))
    learner.write_text(json.dumps({"summary": {"learner_roofline_ici_serial_s": 2.0}}))
    rec = tmp_path / "rec.json"
    rc = step_model_cli.main([f"{sampler},{learner}", "--keep-kv", "--record", str(rec)])
    assert rc == 0
    # every response 6 tokens on 4 slots at 1 s a step: sync = 0.25 + 6 + update 2 = 8.25 s;
    # async (budget 24 tokens / 4 slots = 6 steps) the same: speed-up 1
    r = results_record.load(str(rec))
    assert r["kind"] == "estimate"
    assert r["values"]["r1__full__sync_step_s"]["value"] == pytest.approx(8.25)
    assert r["values"]["r1__full__speedup"]["value"] == pytest.approx(1.0)
    assert r["values"]["r1__full__sync_tokens_per_s_per_chip"]["value"] == round(24 / 8.25 / 2)
    assert "update from" in capsys.readouterr().out


def test_step_model_cli_bad_file_is_one_line(tmp_path, capsys):
    from tseeds_jax.scale import step_model_cli

    bad = tmp_path / "x.json"
    bad.write_text('{"summary": {}}')
    assert step_model_cli.main([str(bad)]) == 2
    assert "no summary.step_model_inputs" in capsys.readouterr().err


def test_update_left_out_is_said():
    from tseeds_jax.scale.step_report import step_model_from_inputs, step_model_lines

    est = step_model_from_inputs(_inputs(), update_s=None)
    assert not est["update_included"]
    assert "update not included" in step_model_lines(est)[0]


def test_step_model_cli_takes_a_given_update_time(tmp_path, capsys):
    import json

    from tseeds_jax.scale import step_model_cli

    sampler = tmp_path / "r1.json"
    sampler.write_text(json.dumps({"summary": {"step_model_inputs": _inputs()}}))
    assert step_model_cli.main([f"{sampler},1.5", "--keep-kv", "--json"]) == 0
    est = json.loads(capsys.readouterr().out)[f"{sampler},1.5"]
    assert est["sync"]["step_s"] == pytest.approx(0.25 + 6 + 1.5)
    assert est["inputs"]["update_from"] == "1.5 s given"


def test_budget_below_one_decode_step_is_refused():
    cost = sm.DecodeCost(slots=8, fixed_s=1.0, kv_s_per_token=0.0)
    with pytest.raises(ValueError, match="budget_tokens=4: less than one decode step of the 8"):
        sm.async_steady([3, 5], cost, prompt_len=0, budget_tokens=4)


def test_plan_cli_bad_step_model_flag_is_one_line(tmp_path, capsys):
    from tseeds_jax.scale import plan_cli

    cfg = tmp_path / "c.py"
    cfg.write_text("from tseeds_jax.rl.config import tiny_config\n"
                   "def get_config():\n    c = tiny_config()\n    c.model.arch.vocab_size = 64\n"
                   "    c.hardware.sampler_placement = 'decode'\n    return c\n")
    rc = plan_cli.main(["--config", str(cfg), "--accelerator", "v5p-8", "--config.mesh.fsdp=4",
                        "--max-staleness=-1"])
    assert rc == 2
    assert "tseeds plan: step model: max_staleness=-1: must be >= 0" in capsys.readouterr().err


def test_plan_cli_staleness_comes_from_the_config_unless_the_flag_is_given(tmp_path, capsys):
    import json

    from tseeds_jax.scale import plan_cli

    cfg = tmp_path / "c.py"
    cfg.write_text("from tseeds_jax.rl.config import tiny_config\n"
                   "def get_config():\n    c = tiny_config()\n    c.model.arch.vocab_size = 64\n"
                   "    c.hardware.sampler_placement = 'decode'\n    return c\n")
    base = ["--config", str(cfg), "--accelerator", "v5p-8", "--config.mesh.fsdp=4", "--json"]
    got = {}
    for extra in ([], ["--config.stale.max_staleness=3"],
                  ["--config.stale.max_staleness=3", "--max-staleness=0"]):
        assert plan_cli.main(base + extra) == 0
        got[len(extra)] = json.loads(capsys.readouterr().out)["step_model"]["async_unbounded"]
    assert [got[n]["max_staleness"] for n in (0, 1, 2)] == [1, 3, 0]  # 1: the config's default
    lag = got[0]["response_oldest_lag_share"]
    assert got[2]["responses_over_staleness"] == pytest.approx(sum(lag[1:]))
    assert got[1]["responses_over_staleness"] == pytest.approx(sum(lag[4:]))


def _rt(lengths, slots, **kw):
    from tseeds_jax.scale.step_runtime import async_runtime

    cost = sm.DecodeCost(slots=slots, fixed_s=1.0, kv_s_per_token=0.0)
    args = dict(group_size=1, chunk=2, max_staleness=1, steps=12, warmup=4)
    return async_runtime(lengths, cost, 0, **{**args, **kw})


def test_runtime_rule_forces_due_responses_hand_computed():
    """Two groups of one 5-token response per step, C 2, s 1, 4 slots, 1 s a decode step.
    By hand, from step 2 on: the previous step's groups are due with 3 (or 2) tokens left and
    run to their end; the new ones decode beside them until the due ones end (interrupt), so
    they have 3 (or 2) tokens when due next step: calls of 2 and 3 decode steps alternate, every
    slot busy, every trained response forced, no token older than 1 version."""
    r = _rt([5, 5], 4)
    assert r["decode_steps"] == pytest.approx(2.5) and r["decode_s"] == pytest.approx(2.5)
    assert r["tokens"] == pytest.approx(10) and r["occupancy"] == pytest.approx(1.0)
    assert r["forced_share"] == 1.0 and r["forced_due_share"] == 1.0
    assert r["forced_batch_share"] == 0.0 and r["shortest_forced"] == 5
    assert r["oldest_token_age"] == 1 and r["calls_per_step"] == 1.0
    # without interrupt the new responses stop at C = 2 while the due ones finish their 3:
    # 3 steps a call, 10 tokens in 12 slot-steps
    r = _rt([5, 5], 4, interrupt=False)
    assert r["decode_steps"] == pytest.approx(3.0)
    assert r["occupancy"] == pytest.approx(10 / 12)
    # 2 slots: the due responses take both slots first (pool order), the new ones never start
    # before the call ends, so each is due with all 5 tokens left: 5 steps, the synchronous
    # call's length (the rule takes the whole gain)
    r = _rt([5, 5], 2)
    assert r["decode_steps"] == pytest.approx(5.0) and r["oldest_token_age"] == 0
    assert sm.sync_call([5, 5], sm.DecodeCost(2, 1.0, 0.0), 0)["decode_steps"] == 5


def test_runtime_rule_batch_rule_and_bad_input():
    # counted from step 0: the first step admits 2 B groups and none is due, so the batch rule
    # forces the oldest B to finish (2 of the 8 trained responses over steps 0-3)
    r = _rt([5, 5], 4, steps=4, warmup=0)
    assert r["forced_batch_share"] == pytest.approx(2 / 8)
    with pytest.raises(ValueError, match="are not groups of group_size=4"):
        _rt([5, 5, 5], 4, group_size=4)
    with pytest.raises(ValueError, match="chunk=0: must be >= 1"):
        _rt([5, 5], 4, chunk=0)


def test_segment_seconds_match_the_step_by_step_sum():
    from tseeds_jax.scale.step_runtime import _segment_s

    rng = np.random.default_rng(0)
    for _ in range(50):
        cost = sm.DecodeCost(slots=8, fixed_s=rng.uniform(0, 1), kv_s_per_token=rng.uniform(0, 0.1),
                             flops_s=rng.uniform(0, 3), ici_s=rng.uniform(0, 0.1))
        kv0, live, steps = rng.uniform(0, 50), int(rng.integers(0, 8)), int(rng.integers(0, 40))
        ref = sum(cost.step_s(kv0 + live * t) for t in range(steps))
        assert _segment_s(cost, kv0, live, steps) == pytest.approx(ref, rel=1e-9, abs=1e-12)
