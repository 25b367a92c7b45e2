"""Partial rollouts continued as seeds (rl/rollout/pool.py) with a scripted sampler and scripted
learner statistics, so that every number is known by hand: the mixed-source ratio of an
interrupted-then-continued response, per-token versions, the staleness bound, exact resume of the
pool, and rollout correction (rl/learn/correction.py)."""

import types

import numpy as np
import pytest

from tseeds_jax.rl.config import TrainConfig, tiny_config
from tseeds_jax.rl.config.fields import ConfigValueError
from tseeds_jax.rl.config.methods import apply_restart
from tseeds_jax.rl.learn import batch as batch_lib
from tseeds_jax.rl.learn import layout
from tseeds_jax.rl.learn.correction import correction_mask, log_weights
from tseeds_jax.rl.losses.mixed_source import mix_old_logp
from tseeds_jax.rl.rollout import samples as rollout
from tseeds_jax.rl.rollout.pool import PartialRollouts
from tseeds_jax.rl.rollout.pool_tallies import merge_hosts, version_metrics

P, R = 4, 12  # prompt width, response width
STOP = 99


def _cfg(b=2, g=2, chunk=3, s=1, in_flight=0, r=R, interrupt=False):
    return types.SimpleNamespace(
        rollout=types.SimpleNamespace(batch_prompts=b, group_size=g, max_response_len=r),
        stale=types.SimpleNamespace(partial_tokens=chunk, max_staleness=s,
                                    groups_in_flight=in_flight, partial_interrupt=interrupt),
        seed=0, hardware=types.SimpleNamespace(sampler_slots=0))


class Prompts:
    """Prompt k is [k + 1]; its reference is the number of response tokens each sample writes."""

    def __init__(self, lengths):
        self.lengths, self.k = lengths, 0

    def take(self, n):
        out = [[j + 1] for j in range(self.k, self.k + n)]
        self.k += n
        return out, [self.lengths[(p[0] - 1) % len(self.lengths)] for p in out]


def scripted_sampler(lengths):
    """Response of prompt p (sample i) is tokens 10 p + pos + i, of length lengths[p - 1] (last
    token the stop id when shorter than R). Sampler log-prob of position pos: -0.01 (pos + 1)
    - 0.001 * params (params is a number: the version). Interruptible requests (all starting
    with the others) stop after as many tokens as the longest required one wrote."""
    calls = []

    def fn(params, requests, budgets, seed, interruptible=None):
        calls.append((list(budgets), seed, interruptible))
        opt = interruptible or [False] * len(requests)

        def natural(req, budget):  # tokens the request writes uninterrupted
            done = len(req) - 1
            return min(lengths[(req[0] - 1) % len(lengths)], done + budget) - done

        cap = max((natural(q, b) for q, b, o in zip(requests, budgets, opt) if not o),
                  default=R) if any(opt) else R
        out = []
        for req, budget, o in zip(requests, budgets, opt):
            p, done = req[0], len(req) - 1
            i = seed[1][len(out)] % 2  # sample index within the group (G = 2)
            n = lengths[(p - 1) % len(lengths)]
            end = min(n, done + budget, done + cap if o else R)
            toks = [STOP if pos == n - 1 and n < R else 10 * p + pos + i for pos in range(done, end)]
            lp = [-0.01 * (pos + 1) - 0.001 * params for pos in range(done, end)]
            finish = "stop" if end == n and n < R else "length"
            out.append((toks, lp, finish))
        return out

    fn.calls = calls
    return fn


def learner_stats(params, tokens_BT, attn_BT, r):
    """Learner log-prob of response position pos under version v: -0.1 (pos + 1) - 0.01 v."""
    n = len(tokens_BT)
    pos = np.arange(r, dtype=np.float32)[None, :].repeat(n, 0)
    return (-0.1 * (pos + 1) - 0.01 * params).astype(np.float32), np.zeros((n, r), np.float32)


STATS = types.SimpleNamespace(
    prompt_width=P, pad_id=0, logp_entropy=learner_stats,
    rows=lambda pairs: layout.padded_rows(pairs, P, R, 0))  # RowStats.rows: the learner's layout


def _assert_same_batches(want, got):
    """(samples, info) per step: the same samples, token for token, and the same info."""
    for (sa, ia), (sb, ib) in zip(want, got, strict=True):
        assert {k: v for k, v in ia.items() if not k.startswith("time_")} == \
            {k: v for k, v in ib.items() if not k.startswith("time_")}
        for a, b in zip(sa, sb, strict=True):
            assert a.response_ids == b.response_ids and a.prompt_ids == b.prompt_ids
            assert a.seed_ids == b.seed_ids
            for name in ("seed_logp", "cont_logp", "seed_sampler_logp", "versions"):
                np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)


def _run(pool, prompts, sampler, steps, first=0):
    out = []
    for k in range(first, first + steps):
        out.append(pool.next_batch(sampler, prompts.take, k, k, k))  # version k = params k
    return out


def test_interrupted_then_continued_ratio_is_the_mixed_source_formula():
    # B = 1 group of G = 2, chunk 2 tokens per step, staleness 2: prompts 1-3 admitted at step 0;
    # 2 and 3 (2 tokens) finish and train at steps 0 and 1; prompt 1's responses (6 tokens) are
    # written 2 at step 0, 2 at step 1, the last 2 at step 2 (due: admitted 2 steps earlier).
    lengths = [6, 2, 2, 2, 2, 2]
    pool = PartialRollouts(_cfg(b=1, chunk=2, s=2), STATS)
    prompts = Prompts(lengths)
    sampler = scripted_sampler(lengths)
    got = _run(pool, prompts, sampler, 3)
    samples, info = got[2]
    s = next(x for x in samples if x.prompt_ids == [1])
    np.testing.assert_array_equal(s.versions, [0, 0, 1, 1, 2, 2])
    assert len(s.seed_ids) == 4 and len(s.cont_ids) == 2
    # seed denominators: the learner under the version that wrote each token (hand-computed)
    np.testing.assert_allclose(s.seed_logp, [-0.1, -0.2, -0.31, -0.41], atol=1e-6)
    np.testing.assert_allclose(s.seed_sampler_logp, [-0.01, -0.02, -0.031, -0.041], atol=1e-6)
    batch = batch_lib.build_batch([s], np.ones(1), prompt_width=P, response_width=R)
    # current policy pi_theta (hand-chosen) and pi_old on continuation tokens (the shortcut)
    theta = np.array([-0.15, -0.1, -0.3, -0.5, -0.7, -0.65] + [0.0] * (R - 6), np.float32)[None]
    den = np.asarray(mix_old_logp(batch.seed_mask_BR, batch.behavior_logp_BR, theta))
    ratio = np.exp(theta - den)[0, :6]
    np.testing.assert_allclose(ratio, np.exp([-0.05, 0.1, 0.01, -0.09, 0.0, 0.0]), rtol=1e-5)
    assert info["token_share/seed"] == pytest.approx(8 / 12)
    assert info["token_age/2"] == 4 and info["token_age/1"] == 4 and info["token_age/0"] == 4
    assert info["logp_gap_age/2"] == pytest.approx(np.mean([0.09, 0.18]), abs=1e-6)


@pytest.mark.parametrize("s,interrupt", [(0, False), (1, False), (2, False), (1, True),
                                         (2, True)])
def test_versions_and_staleness_bound_with_long_tail(s, interrupt):
    lengths = [2, 12, 3, 9, 1, 12, 5, 4, 7, 12, 2, 6]  # a long tail: a few hit the cap R
    pool = PartialRollouts(_cfg(b=2, chunk=3, s=s, interrupt=interrupt), STATS)
    prompts, sampler = Prompts(lengths), scripted_sampler(lengths)
    trained = []
    for k, (samples, info) in enumerate(_run(pool, prompts, sampler, 8)):
        assert len(samples) == 4
        assert info["group_staleness_max"] <= s
        ages = np.concatenate([k - x.versions for x in samples])
        assert ages.max() <= s and ages.min() >= 0
        for a in range(s + 1):
            assert info.get(f"token_age/{a}", 0.0) == np.sum(ages == a)
        for idx, x in enumerate(samples):
            assert np.all(np.diff(x.versions) >= 0)  # versions rise along a response
            assert len(x.seed_ids) == int(np.sum(x.versions < k))
            n, p, i = x.reference, x.prompt_ids[0], idx % 2  # sample i of its group
            pos = np.arange(n)
            # the pieces written across interruptions join into the uninterrupted response
            assert x.response_ids == [STOP if q == n - 1 and n < R else 10 * p + q + i
                                      for q in range(n)]
            np.testing.assert_allclose(x.cont_logp, -0.01 * (pos[len(x.seed_ids):] + 1)
                                       - 0.001 * k, atol=1e-6)
            np.testing.assert_allclose(x.seed_logp, -0.1 * (pos[: len(x.seed_ids)] + 1)
                                       - 0.01 * x.versions[: len(x.seed_ids)], atol=1e-6)
        trained += sorted({x.prompt_ids[0] for x in samples})
    assert len(trained) == len(set(trained))  # every group trained once
    if s == 0:  # synchronous: each step trains the prompts it admitted, in order, no seeds
        assert trained == list(range(1, 17))
        assert all(len(c[0]) == 4 and set(c[0]) == {R} for c in sampler.calls)
    if interrupt:  # some calls had due responses beside interruptible ones
        assert any(c[2] is not None and any(c[2]) for c in sampler.calls)


def test_pool_state_round_trip_continues_exactly():
    lengths = [2, 12, 3, 9, 1, 12, 5, 4, 7, 12, 2, 6]

    def fresh():
        return PartialRollouts(_cfg(b=2, chunk=3, s=2), STATS), Prompts(lengths)

    pool, prompts = fresh()
    ref = _run(pool, prompts, scripted_sampler(lengths), 6)
    pool, prompts = fresh()
    _run(pool, prompts, scripted_sampler(lengths), 3)
    tree, meta = pool.state()
    assert pool.pool, "the test needs responses in flight at the save"
    resumed, prompts2 = fresh()
    resumed.load(tree, meta)
    prompts2.k = prompts.k
    got = _run(resumed, prompts2, scripted_sampler(lengths), 3, first=3)
    _assert_same_batches(ref[3:], got)


def test_version_metrics_count_sources():
    s = rollout.Sample(group=0, prompt_ids=[1], reference=None, seed_ids=[5, 6, 7],
                       seed_logp=np.array([-1.0, -2.0, -3.0], np.float32), cont_ids=[8],
                       cont_logp=np.zeros(1, np.float32), finish="stop",
                       versions=np.array([3, 3, 4, 5]),
                       seed_sampler_logp=np.array([-1.5, -2.0, -2.0], np.float32))
    m = version_metrics([s], 5)
    assert m["token_age/2"] == 2 and m["token_age/1"] == 1 and m["token_age/0"] == 1
    assert m["token_share/seed"] == 0.75
    assert m["logp_gap_age/2"] == pytest.approx(0.25) and m["logp_gap_age/1"] == pytest.approx(1.0)


def test_rollout_correction_masks_by_hand():
    resp = np.array([[1, 1, 1, 0], [1, 1, 0, 0]], np.float32)
    seed = np.array([[1, 0, 0, 0], [0, 0, 0, 0]], np.float32)
    blogp = np.array([[-1.0, 0, 0, 0], [0, 0, 0, 0]], np.float32)
    old = np.array([[0, -1.0, -2.0, 0], [-1.0, -1.0, 0, 0]], np.float32)
    sampler = np.array([[-2.0, -1.1, -1.0, 0], [-1.2, -1.3, 0, 0]], np.float32)
    lw = log_weights(resp, seed, blogp, old, sampler)
    np.testing.assert_allclose(lw, [[1.0, 0.1, -1.0, 0], [0.2, 0.3, 0, 0]], atol=1e-6)
    m, met = correction_mask(resp, lw, "token_mask", 2.0)  # log 2 = 0.693
    np.testing.assert_array_equal(m, [[0, 1, 0, 0], [1, 1, 0, 0]])
    assert met["rc_masked_token_frac"] == pytest.approx(2 / 5)
    m, _ = correction_mask(resp, lw, "seq_mask", 1.2)  # log 1.2 = 0.182; row means 0.033, 0.25
    np.testing.assert_array_equal(m, [[1, 1, 1, 0], [0, 0, 0, 0]])
    m, _ = correction_mask(resp, lw, "off", 2.0)
    np.testing.assert_array_equal(m, resp)
    with pytest.raises(ValueError, match="threshold"):
        correction_mask(resp, lw, "token_mask", 1.0)


@pytest.mark.parametrize("field,value,match", [
    ("stale.partial_tokens", -1, "partial_tokens"),
    ("stale.correction", "is_weights", "correction"),
    ("stale.correction_threshold", 0.5, "correction_threshold"),
])
def test_config_errors_name_the_field(field, value, match):
    c = tiny_config()
    sec, name = field.split(".")
    c[sec][name] = value
    with pytest.raises(ConfigValueError, match=match):
        TrainConfig.from_config(c)


def test_partial_rollouts_refuse_seeded_runs_and_a_lag_above_the_bound():
    c = tiny_config()
    c.stale.partial_tokens = 4
    c.stale.steps = 2  # max_staleness 1
    with pytest.raises(ConfigValueError, match="stale.max_staleness=1: must be >= stale.steps=2"):
        TrainConfig.from_config(c)
    c.stale.steps = 1
    TrainConfig.from_config(c)  # generated one step ahead, within the bound
    c.stale.steps = 0
    c.seeds.refresh_interval = 3
    TrainConfig.from_config(c)  # refresh cycles run through the pool (docs/async.md)


def test_partial_rollouts_refuse_a_branch_method_and_take_a_prefix_method():
    c = apply_restart(tiny_config(), "fr3e")
    TrainConfig.from_config(c)
    c.stale.partial_tokens = 4
    with pytest.raises(ConfigValueError, match="partial_tokens=4 with config.restart.method="
                                               "'fr3e': partial rollouts does not combine"):
        TrainConfig.from_config(c)
    c = apply_restart(tiny_config(), "questa")
    c.stale.partial_tokens = 4
    TrainConfig.from_config(c)  # its prefixes are carried tokens of the pool (rl/methods/prefix.py)


class SeededBatches:
    """Refresh cycles of T batches: batch j % T = 0 is on-policy (its fetch is the refresh, as
    ThinkingSeeds._refresh), batch j % T = t > 0 is seeded: prompt [100 j + k + 1], sample i's seed
    = t + i tokens 7, seed log-prob -0.5 each."""

    def __init__(self, t):
        self.t, self.fetched = t, []

    def __call__(self, j):
        self.fetched.append(j)
        prompts = [[100 * j + k + 1] for k in range(2)]
        refs = [None, None]
        if j % self.t == 0:
            return prompts, refs, None, True
        n = [j % self.t + i for k in range(2) for i in range(2)]
        return prompts, refs, ([[7] * m for m in n], [np.full(m, -0.5, np.float32) for m in n]), \
            False


def test_refresh_cycle_seeds_enter_the_pool_as_carried_tokens_of_pi_b():
    """T = 2, s = 1, B = G = 2, C = 3, every response 6 tokens long. Step 0 admits batches 0 and
    1 (B (k + 1 + s) groups): fetching batch 0 is the refresh (pi_b = version 0). Batch 1's
    responses start from their seeds and decode C tokens; at step 1 they are due and finish,
    and everything written before step 1 is the trained sample's seed."""
    pool = PartialRollouts(_cfg(b=2, g=2, chunk=3, s=1), STATS)
    src = SeededBatches(2)
    sampler = scripted_sampler([6] * 400)  # prompt p's responses end at position 6

    def take(n):
        raise AssertionError("refresh cycles admit through `batches`")

    s0, _ = pool.next_batch(sampler, take, 0, 0, 0, batches=src)
    assert src.fetched == [0, 1] and pool.refresh_version == 0
    assert [x.prompt_ids for x in s0[::2]] == [[1], [2]]  # batch 0, on-policy
    r = {g.gid: g for g in pool.pool}[2].responses[1]  # prompt 101, sample 1: a 2-token seed
    assert r.tokens[:2] == [7, 7] and np.isnan(r.sampler_logp[:2]).all()
    assert len(r.tokens) == 2 + 3 and list(r.versions) == [0] * 5
    # seed: pi_b's log-probs from the refresh; the chunk: the learner's under version 0
    np.testing.assert_allclose(r.learner_logp, [-0.5, -0.5, -0.3, -0.4, -0.5], rtol=1e-6)
    s1, i1 = pool.next_batch(sampler, take, 1, 1, 1, batches=src)
    assert src.fetched == [0, 1, 2] and pool.refresh_version == 1  # batch 2's refresh at step 1
    assert [x.prompt_ids for x in s1[::2]] == [[101], [102]]
    x = s1[1]
    assert x.seed_ids == [7, 7] + [10 * 101 + pos + 1 for pos in range(2, 5)]
    np.testing.assert_allclose(x.seed_logp, [-0.5, -0.5, -0.3, -0.4, -0.5], rtol=1e-6)
    assert np.isnan(x.seed_sampler_logp[:2]).all() and np.isfinite(x.seed_sampler_logp[2:]).all()
    assert x.cont_ids == [STOP] and list(x.versions) == [0] * 5 + [1]
    np.testing.assert_allclose(x.cont_logp, [-0.06 - 0.001], rtol=1e-6)  # sampler, version 1
    assert i1["token_age/1"] == sum(len(s.seed_ids) for s in s1)
    assert all(np.isfinite(v) for k, v in i1.items() if k.startswith("logp_gap_age/"))


def test_refresh_cycle_pool_state_with_pending_groups_continues_exactly():
    """groups_in_flight = 3 < B (s + 1) splits batches across steps: the rest of a fetched batch
    waits (pending) and is checkpointed with the refresh version."""
    lengths = [2, 12, 3, 9, 1, 12, 5, 4, 7, 12, 2, 6] * 50

    def fresh():
        return PartialRollouts(_cfg(b=2, chunk=3, s=2, in_flight=3), STATS), SeededBatches(3)

    def run(pool, src, steps, first=0):
        sampler = scripted_sampler(lengths)
        return [pool.next_batch(sampler, None, k, k, k, batches=src)
                for k in range(first, first + steps)]

    pool, src = fresh()
    ref = run(pool, src, 7)
    pool, src = fresh()
    run(pool, src, 3)
    assert pool.pending and pool.pool, "the test needs pending groups and responses in flight"
    tree, meta = pool.state()
    back, src2 = fresh()
    back.load(tree, meta)
    assert back.refresh_version == pool.refresh_version >= 0
    got = run(back, src2, 4, first=3)
    assert src2.fetched and src2.fetched[0] == src.fetched[-1] + 1  # nothing fetched twice
    _assert_same_batches(ref[3:], got)


def test_refresh_cycle_trains_batch_k_at_step_k_even_when_later_seeds_finish_first():
    """Before any group is due (step 0 < s), a later batch's short seeded responses finish first;
    with refresh cycles the step still trains its own batch (their seeds are of this step's
    version: trained now they would have no seed at all)."""
    lengths = [12, 12] + [1] * 98 + [3, 3]  # prompts 1, 2: to the cap; 101, 102: 3 tokens
    pool = PartialRollouts(_cfg(b=2, g=2, chunk=3, s=1), STATS)
    s0, info = pool.next_batch(scripted_sampler(lengths), None, 0, 0, 0,
                               batches=SeededBatches(2))
    assert [x.prompt_ids for x in s0[::2]] == [[1], [2]] and info["partial_calls"] == 2
    assert all(len(x.response_ids) == R for x in s0)
    done = [g for g in pool.pool if g.done]
    assert [g.gid for g in done] == [2, 3]  # finished, kept for step 1


def test_two_hosts_pools_decode_what_one_pool_decodes():
    """Each host's pool holds its share of every batch (host h: group h of each B = 2), with
    global request indices: the two hosts' batches, side by side, are the one pool's, token for
    token, over a refresh cycle with seeds and responses carried across steps."""
    lengths = [2, 12, 3, 9, 1, 12, 5, 4, 7, 12, 2, 6] * 50

    class Slice:
        def __init__(self, src, h):
            self.src, self.h = src, h

        def __call__(self, j):
            p, r, seeds, refreshed = self.src(j)
            g = 2
            if seeds is not None:
                seeds = tuple(x[self.h * g : (self.h + 1) * g] for x in seeds)
            return p[self.h : self.h + 1], r[self.h : self.h + 1], seeds, refreshed

    one = PartialRollouts(_cfg(b=2, chunk=3, s=2), STATS)
    two = [PartialRollouts(_cfg(b=2, chunk=3, s=2), STATS, host=h, hosts=2) for h in range(2)]
    src = [SeededBatches(3), Slice(SeededBatches(3), 0), Slice(SeededBatches(3), 1)]
    seen = []
    for k in range(6):
        a, ia = one.next_batch(scripted_sampler(lengths), None, k, k, k, batches=src[0])
        got = [p.next_batch(scripted_sampler(lengths), None, k, k, k, batches=s)
               for p, s in zip(two, src[1:])]
        b = got[0][0] + got[1][0]
        assert [x.prompt_ids for x in a] == [x.prompt_ids for x in b]
        for x, y in zip(a, b, strict=True):
            assert x.seed_ids == y.seed_ids and x.cont_ids == y.cont_ids
            np.testing.assert_array_equal(x.versions, y.versions)
            np.testing.assert_array_equal(x.seed_logp, y.seed_logp)
        merged = merge_hosts([i for _, i in got], [i["partial_tallies"] for _, i in got])
        for key in ("partial_decoded_tokens", "partial_groups_in_flight", "group_staleness_max",
                    "token_share/seed"):
            assert merged[key] == ia[key], key
        assert {k for k in ia if k.startswith("token_age/")} == \
            {k for k in merged if k.startswith("token_age/")}
        seen.append(ia["group_staleness_max"])
    assert one.next_gid == 2 * two[0].next_gid and max(seen) == 4  # seeds: T - 1 + s old
