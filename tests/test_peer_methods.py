"""Peer restart methods (rl/methods/prefix.py, branch.py; issue 38): batch construction and
loss on small hand-computed cases, with a scripted sampler, reward and statistics pass (no
model) driven through the batch-source seam. Their 2-step training runs are tests/test_routes.py's."""

import math
import types

import numpy as np
import pytest

from tests.trainer_utils import set_fields, tiny_cd
from tseeds_jax.data import hints
from tseeds_jax.rl import losses
from tseeds_jax.rl.config import ConfigValueError, TrainConfig
from tseeds_jax.rl.config.methods import apply_restart
from tseeds_jax.rl.learn import batch as batch_lib
from tseeds_jax.rl.learn import layout as layout_lib
from tseeds_jax.rl.learn.hooks import LearnerHooks
from tseeds_jax.rl.methods import branch as branching
from tseeds_jax.rl.methods import routes
from tseeds_jax.rl.methods.base import MethodSource
from tseeds_jax.rl.rollout import samples as rollout
from tseeds_jax.rl.rollout.finish import Finish
from tseeds_jax.rl.rollout.source import Policy, SourceContext
from tseeds_jax.rl.run.hosts import Hosts
from tseeds_jax.seeds import prefix_pool

R = 8  # response width of the scripted cases
CHAIN = {"metadata": {"expression": "1 + 2 + 3"}}  # worked solution "1+2=3 3+3=6 #6"


# ---- pure helpers ----
def test_hint_is_the_solution_head_and_the_curriculum_halves_it():
    solution = "1+2=3 3+3=6 #6"
    assert hints.solution_text(CHAIN) == solution
    enc = lambda text: [ord(ch) for ch in text]
    assert hints.hint_tokens(CHAIN, 0.5, enc) == enc("1+2=3 3")  # floor(0.5 * 14) = 7
    assert hints.hint_tokens(CHAIN, 0.25, enc) == enc("1+2")  # floor(3.5) = 3
    assert hints.hint_length(4, 1.0) == 3  # never the whole solution
    assert [hints.hint_share(s, 10, 0.5, 0.25, 0.5) for s in (0, 4, 5, 9)] == [0.5, 0.5, .25, .25]
    with pytest.raises(ValueError, match="worked reference solution"):
        hints.solution_text("42")


def test_pool_keeps_the_first_success_and_cuts_ratio_prefixes():
    def s(prompt, resp, reward):
        return rollout.Sample(group=0, prompt_ids=prompt, reference={"a": prompt[0]}, seed_ids=[],
                              seed_logp=np.zeros(0), cont_ids=resp, cont_logp=np.zeros(len(resp)),
                              finish="stop", reward=reward)

    tries = [s([1], [5, 6], 0.0), s([1], [7, 8, 9], 1.0), s([1], [4], 1.0),
             s([2], [3], 0.0), s([2], [3], 0.0), s([2], [3], 0.0)]
    pool = prefix_pool.first_successes(tries, 3)
    assert pool == [{"prompt_ids": [1], "reference": {"a": 1}, "trace": [7, 8, 9]}]
    assert prefix_pool.prefix(list(range(10)), 0.5) == [0, 1, 2, 3, 4]
    assert prefix_pool.prefix(list(range(10)), 0.99) == list(range(9))  # never the last token
    assert prefix_pool.prefix([3, 4, 5], 0.5) == [3, 4]  # round half up: floor(1.5 + 0.5) = 2


def test_branch_split_anchors_and_fr3e_factor():
    assert branching.branch_split(8, 0, 2) == (4, 2)
    assert branching.branch_split(6, 2, 4) == (2, 1)
    with pytest.raises(ValueError, match="divisible"):
        branching.branch_split(8, 3, 2)
    ent = np.array([[0.1, 0.9, 0.2, 0.0], [0.3, 0.1, 0.8, 0.5]])
    got = branching.anchors([4, 3], ent, 3, 1, np.random.default_rng(0))
    # k = 1: the highest-entropy token of rollouts 0, 1, 0 (anchor a uses rollout a % base)
    assert [(a.rollout, a.cut) for a in got] == [(0, 1), (1, 2), (0, 1)]
    f = branching.fr3e_factors([1, 0, 0, 0], [[1, 1], [0, 0]], beta=1.0)  # V0 = 0.25
    np.testing.assert_allclose(f, [[math.exp(-0.75)] * 2, [math.exp(0.25)] * 2], rtol=1e-12)


# ---- the methods behind the seam, on a scripted run ----
class Scripted:
    """A scripted run: responses in order, reward '8 in the response', and a statistics pass
    whose entropies and log-probs are given per response row. `source()`: the run's method
    behind the seam (MethodSource with the collection tail)."""

    def __init__(self, cfg, responses, ent_rows=None, logp_rows=None):
        self.cfg, self.calls, self.queue = cfg, [], list(responses)
        prompts = types.SimpleNamespace(take=self._take, encode_text=lambda t: [ord(c) for c in t])
        stats = types.SimpleNamespace(
            logp_entropy=self._stats, prompt_width=4, response_width=R, pad_id=0,
            sequences=lambda samples: layout_lib.padded_rows(
                [(x.prompt_ids, x.response_ids) for x in samples], 4, R, 0))
        env = types.SimpleNamespace(
            sample_fn=self._sample, prompts=prompts, decode=lambda ids: " ".join(map(str, ids)),
            reward_fn=lambda texts, refs: [(float("8" in t.split()), "r") for t in texts])
        self.ctx = SourceContext(cfg, env=env, hosts=Hosts(0, 1), stats=stats,
                                 hooks=LearnerHooks([], stats))
        self.ent_rows, self.logp_rows, self.taken = ent_rows, logp_rows, 0

    def _take(self, n):
        out = [[10 + self.taken + i] for i in range(n)]
        self.taken += n
        return out, [CHAIN] * n

    def _sample(self, params, requests, budgets, seed):
        self.calls.append((list(map(list, requests)), list(budgets)))
        out = [self.queue.pop(0)[:b] for b in budgets]
        return [(t, np.full(len(t), -0.5), "stop") for t in out]

    def _stats(self, params, tokens, attn, r):
        n = len(tokens)
        ent = np.zeros((n, r), np.float32)
        logp = np.zeros((n, r), np.float32)
        ent[:, : len(self.ent_rows[0])] = self.ent_rows
        logp[:, : len(self.logp_rows[0])] = self.logp_rows
        return logp, ent

    def source(self):
        method = routes.build_method(self.cfg, self.ctx)
        src = MethodSource(method, Finish(self.ctx, method))
        return lambda step: src.next(step, Policy(None, None, step))


def _cfg(method, **over):
    c = apply_restart(tiny_cd("/tmp/unused", **{"rollout.max_response_len": R}), method)
    set_fields(c, over)
    return TrainConfig.from_config(c)


def _batch(samples, cfg):
    adv = batch_lib.sample_advantages(samples, norm_by_std=True, max_response_len=R)
    batch = batch_lib.build_batch(samples, adv, prompt_width=4, response_width=R)
    mask = np.asarray(losses.seed_loss_mask(batch.resp_mask_BR, batch.seed_mask_BR,
                                            cfg.seeds.variant))
    return batch, mask


def _dapo_loss(batch, mask, logp_BR):
    """DAPO token-mean loss at old log-probs pi_b on prefix tokens, pi_old = current elsewhere."""
    old = np.asarray(losses.mix_old_logp(batch.seed_mask_BR, batch.behavior_logp_BR, logp_BR))
    dens = losses.agg_denominators(mask)
    out = losses.get("dapo")(losses.LossInputs.create(logp_BR, old, batch.advantages_B, mask),
                             denominators=dens)
    return float(out.loss)


def test_fr3e_branches_from_the_top_entropy_token_with_trained_prefix_and_value_factor():
    cfg = _cfg("fr3e", **{"rollout.batch_prompts": 1, "restart.branch_points": 1})
    # G 4: 2 first-pass rollouts, 1 anchor with 2 branches
    tr = Scripted(cfg, [[1, 2, 3, 9], [4, 8, 9], [8, 9], [8, 9]],
                  ent_rows=[[0.1, 0.9, 0.2, 0.0], [0.3, 0.1, 0.2, 0.0]],
                  logp_rows=[[-0.1, -0.2, -0.3, -0.4], [-1.0, -1.0, -1.0, -1.0]])
    samples, info = tr.source()(0)
    # first pass from the prompt; branches continue [prompt, 1] (cut before the 0.9 token)
    assert tr.calls == [([[10], [10]], [R, R]), ([[10, 1], [10, 1]], [R - 1, R - 1])]
    assert [s.response_ids for s in samples] == [[1, 2, 3, 9], [4, 8, 9], [1, 8, 9], [1, 8, 9]]
    assert [s.group for s in samples] == [0, 0, 0, 0]
    batch, mask = _batch(samples, cfg)
    np.testing.assert_array_equal(batch.seed_mask_BR[:, :2], [[0, 0], [0, 0], [1, 0], [1, 0]])
    # the prefix token is trained (state+action) and its ratio denominator is the first pass's
    # current-policy log-prob (on-policy): -0.1
    np.testing.assert_array_equal(mask[:, 0], [1, 1, 1, 1])
    np.testing.assert_allclose(batch.behavior_logp_BR[2:, 0], [-0.1, -0.1])
    # rewards 0, 1, 1, 1: mean 0.75, unbiased std 0.5 -> A = -1.5, 0.5, 0.5, 0.5; the branches'
    # anchor value 1 vs the prompt's 0.5 scales theirs by exp(-(1 - 0.5))
    eps = 1e-6
    want = np.array([-0.75, 0.25, 0.25, 0.25]) / (0.5 + eps) * np.array(
        [1, 1, math.exp(-0.5), math.exp(-0.5)])
    np.testing.assert_allclose(batch.advantages_B, want, rtol=1e-6)
    # loss at ratio 1 everywhere (current = pi_b on the prefix): -sum_i A_i |o_i| / sum_i |o_i|
    # (token mean over 4 + 3 + 3 + 3 tokens)
    logp = np.asarray(losses.mix_old_logp(batch.seed_mask_BR, batch.behavior_logp_BR,
                                          np.full((4, R), -0.7, np.float32)))
    loss = _dapo_loss(batch, mask, logp)
    np.testing.assert_allclose(loss, -(want @ np.array([4, 3, 3, 3])) / 13, rtol=1e-5)


def test_cure_has_no_factor_and_trains_plain_dapo_later():
    cfg = _cfg("cure", **{"rollout.batch_prompts": 1, "restart.branch_points": 1, "steps": 4})
    tr = Scripted(cfg, [[1, 2, 3, 9], [4, 8, 9], [8, 9], [8, 9]],
                  ent_rows=[[0.1, 0.9, 0.2, 0.0], [0.3, 0.1, 0.2, 0.0]],
                  logp_rows=[[-0.1] * 4, [-1.0] * 4])
    step = tr.source()
    samples, _ = step(0)
    batch, _ = _batch(samples, cfg)
    np.testing.assert_allclose(batch.advantages_B, np.array([-1.5, .5, .5, .5]) * 0.5 / (0.5 + 1e-6),
                               rtol=1e-6)
    # stage 2 from round(0.5 * 4) = 2 on: one on-policy call of G samples of a fresh prompt
    tr.queue = [[8, 9], [1, 9], [8, 9], [8, 9]]
    samples, info = step(2)
    assert tr.calls[2:] == [([[11]] * 4, [R] * 4)]
    assert [s.seed_ids for s in samples] == [[]] * 4 and info.metrics["restart/stage"] == 2.0
    assert all(s.adv_factor == 1.0 for s in samples)


def test_prefixrl_pool_prefix_is_context_only_and_mixed_with_fresh_prompts(tmp_path):
    cfg = _cfg("prefixrl", run_dir=str(tmp_path), **{"rollout.group_size": 2,
                                                     "restart.pool_prompts": 2,
                                                     "restart.pool_budget": 2})
    # pool: prompt 10 -> [3, 9] (0), [8, 5, 9] (1, kept); prompt 11 -> nothing correct
    # step: 1 pool group (prefix round(0.5 * 3) = 2 tokens [8, 5]) + 1 fresh prompt (12)
    tr = Scripted(cfg, [[3, 9], [8, 5, 9], [1, 9], [2, 9], [9], [7, 9], [8, 9], [1, 9]])
    samples, info = tr.source()(0)
    assert tr.calls[0] == ([[10], [10], [11], [11]], [R] * 4)
    assert tr.calls[1] == ([[10, 8, 5], [10, 8, 5], [12], [12]], [R - 2, R - 2, R, R])
    assert info.behavior_tokens == 2 + 3 + 2 + 2  # the pool's sampling counts in the step
    assert prefix_pool.load(str(tmp_path))[0] == [
        {"prompt_ids": [10], "reference": CHAIN, "trace": [8, 5, 9]}]
    batch, mask = _batch(samples, cfg)
    np.testing.assert_array_equal(batch.seed_mask_BR[:, :3], [[1, 1, 0], [1, 1, 0], [0, 0, 0],
                                                              [0, 0, 0]])
    # state variant: the prefix is not trained; rows 0-1 train 1 and 2 continuation tokens
    np.testing.assert_array_equal(mask[:, :4], [[0, 0, 1, 0], [0, 0, 1, 1], [1, 1, 0, 0],
                                                [1, 1, 0, 0]])
    # rewards: [8, 5, 9] 1, [8, 5, 7, 9] 1 (all equal: A 0); [8, 9] 1, [1, 9] 0: A +-0.707
    a = 0.5 / (math.sqrt(0.5) + 1e-6)
    np.testing.assert_allclose(batch.advantages_B, [0, 0, a, -a], rtol=1e-6)
    logp = np.full((4, R), -0.3, np.float32)
    np.testing.assert_allclose(_dapo_loss(batch, mask, logp), -(a * 2 - a * 2) / 7, atol=1e-7)
    # a resumed run reads the pool instead of sampling again
    tr2 = Scripted(cfg, [[9], [9], [9], [9]])
    tr2.source()(3)
    assert len(tr2.calls) == 1 and tr2.calls[0][0][0] == [10, 8, 5]


def test_questa_hint_is_the_reference_head_and_context_only():
    cfg = _cfg("questa", **{"rollout.batch_prompts": 1, "rollout.group_size": 2, "steps": 4,
                            "rollout.max_response_len": 12})
    tr = Scripted(cfg, [[1], [2], [1], [2]])
    step = tr.source()
    step(0)
    step(2)
    enc = [ord(c) for c in "1+2=3 3+3=6 #6"]
    assert tr.calls[0] == ([[10] + enc[:7]] * 2, [12 - 7] * 2)  # 50% of 14 tokens
    assert tr.calls[1] == ([[11] + enc[:3]] * 2, [12 - 3] * 2)  # 25% from step 2 on


def test_bad_restart_config_names_the_field():
    with pytest.raises(ConfigValueError, match="config.restart.method='prefix': unknown"):
        _cfg("fr3e", **{"restart.method": "prefix"})
    with pytest.raises(ConfigValueError, match="needs seeds.variant='state'"):
        _cfg("prefixrl", **{"seeds.variant": "state+action"})
    with pytest.raises(ConfigValueError, match="restart.branch_points=3"):
        _cfg("fr3e", **{"restart.branch_points": 3})
    with pytest.raises(ConfigValueError, match="restart.method='cure' with "
                                               "config.seeds.refresh_interval=4"):
        _cfg("cure", **{"seeds.refresh_interval": 4})


# ---- the demo table ----
def test_peer_table_reads_finished_seeds_and_tests_against_dapo(tmp_path):
    import json

    from scipy import stats

    from tseeds_jax.eval.peer_table import build

    def run(root, method, seed, pass1, tokens=(100,) * 7, times=(1,) * 7, equal=0.5):
        d = tmp_path / root / "runs" / method / f"seed{seed}"
        d.mkdir(parents=True)
        (d / "eval.json").write_text(json.dumps({"avg_at_n": pass1}))
        (d / "metrics.jsonl").write_text("\n".join(json.dumps(
            {"generated_tokens": t, "time_step": s, "zero_adv_group_frac": equal})
            for t, s in zip(tokens, times)))

    run("new", "fr3e", 0, 0.10, [100] * 7, [9, 9, 9, 9, 9, 1, 3], 0.5)
    run("new", "fr3e", 1, 0.14, [200] * 7, [9, 9, 9, 9, 9, 2, 2], 0.25)
    (tmp_path / "new" / "runs" / "cure" / "seed0").mkdir(parents=True)  # unfinished
    for seed, x in enumerate((0.06, 0.08, 0.07)):
        run("ref", "dapo", seed, x)
    for seed, x in enumerate((0.12, 0.11)):
        run("ref", "ts_mixture", seed, x)
    got = build(str(tmp_path / "new"), str(tmp_path / "ref"), seeds=3)
    rows = {r[0]: r for r in got["table"]["rows"]}
    fr3e = rows["FR3E"]
    # 95% t interval of (10, 14): t(0.975, 1) = 12.706, x 2.83 / 1.41 = 25.4 points
    assert fr3e[1] == "12.0 ± 25.4 (10.0, 14.0)" and fr3e[2] == "2"
    p = stats.ttest_ind([0.10, 0.14], [0.06, 0.08, 0.07], equal_var=False).pvalue
    # one finite comparison in the DAPO family (ratio has no runs, the rest too few seeds)
    assert fr3e[3].startswith("+5.0 ± ") and f"p={p:.2f}; Holm: " in fr3e[3]
    p_mix = stats.ttest_ind([0.10, 0.14], [0.12, 0.11], equal_var=False).pvalue
    assert fr3e[4].startswith("+0.5 ± ") and f"p={p_mix:.2f}; Holm: no" in fr3e[4]
    # tokens: mean over seeds of per-step means (100, 200); time from step 5 on: 2.0 and 2.0
    assert fr3e[5:] == ["150", "2.00", "37.5"]
    assert rows["CURE"][1:3] == ["did not run", "0"]
    assert rows["Thinking Seeds (ratio 0.5, T 8)"][1] == "did not run"
    assert rows["On-policy DAPO"][1].endswith("(6.0, 8.0, 7.0)")
    assert got["values"]["fr3e_pass1"]["value"] == [10.0, 14.0]


def test_demo_offers_the_four_methods_on_the_hard_task():
    from tseeds_jax.demo.experiment import DemoConfig, default_methods, rl_config, with_task

    dc = with_task(DemoConfig(), "hard")
    methods = {m.name: m for m in default_methods()}
    for name, variant in (("prefixrl", "state"), ("questa", "state"), ("fr3e", "state+action"),
                          ("cure", "state+action")):
        cfg, _ = rl_config(dc, "/tmp/tok.model", "/tmp/run", 0, methods[name])
        assert (cfg.restart.method, cfg.seeds.variant, cfg.method) == (name, variant, name)
        assert cfg.rollout.max_response_len == 96 and not cfg.seeded
