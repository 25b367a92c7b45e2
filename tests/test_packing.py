"""Packed learner rows give the padded layout's numbers (issue 53): for every loss of the family
and every aggregation mode (`CASES`), the update's parameters and metrics, and the statistics passes
(log-probs, entropies, SIS top-K) of packed rows equal the padded rows' within float32 rounding.

The padded layout is the independent reference: it runs one sequence per row with validity
masks, the packed one several sequences per row with segment masks, restarted positions and a
gather back to [N, R], so any leak, position or gather error changes the numbers. Tolerances
(fixed; the two layouts sum the same terms in a different order): parameters and metrics
rtol 1e-5 / atol 1e-6, per-token statistics atol 2e-5.
"""

import jax
import numpy as np
import pytest
from flax import nnx

from tseeds_jax.model import ModelConfig, init_model
from tseeds_jax.rl import losses
from tseeds_jax.rl.config import LossConfig, OptimConfig
from tseeds_jax.rl.config.schema import LOSS_AGG_MODES
from tseeds_jax.rl.learn.batch import LearnerBatch
from tseeds_jax.rl.learn.layout import RowLayout, padded_rows
from tseeds_jax.rl.learn.learner import Learner
from tseeds_jax.rl.learn.row_pass import RowStats
from tseeds_jax.rl.run.hosts import Hosts

P, R, B, V = 6, 10, 8, 17
RTOL, ATOL, STATS_ATOL = 1e-5, 1e-6, 2e-5
OCFG = OptimConfig(lr=1e-2, warmup_steps=0, weight_decay=0.0, b1=0.9, b2=0.999, eps=1e-3,
                   grad_clip=1e9, mini_batches=1, epochs=1, micro_batch_size=4,
                   old_logp="recompute", train_layers="all")
PARAMS = {"m2po": {"tau": 0.5},
          "stare": {"entropy_target": 100.0, "top_p_ratio": 0.2, "pos_weight": 3.0,
                    "variant": "c2", "neg_weight": 0.2},
          "sis": {"base": "dapo", "top_k": 4}}


def _model():
    cfg = ModelConfig(model_type="qwen2", vocab_size=V, hidden_size=16, intermediate_size=32,
                      num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1)
    return nnx.split(init_model(cfg, seed=5))


def _pairs(rng, n=B):
    """(prompt, response) pairs of varied lengths (long-tailed responses, some empty or at the
    cap): short ones share a packed row."""
    lengths = [min(R, int(rng.geometric(0.25)) - 1) for _ in range(n - 2)] + [R, 0]
    return [(rng.integers(1, V, rng.integers(1, P + 1)).tolist(),
             rng.integers(1, V, r).tolist()) for r in lengths]


def _batch(rng, name):
    pairs = _pairs(rng)
    tokens, attn = padded_rows(pairs, P, R)
    resp = np.zeros((B, R), np.float32)
    seed = np.zeros((B, R), np.float32)
    for i, (_, r) in enumerate(pairs):
        resp[i, : len(r)] = 1
        seed[i, : len(r) // 3] = 1  # a seed prefix: seed and continuation metrics both live
    if name == "luffy":
        seed[0] = resp[0]  # an off-policy trace: the whole response is the "seed"
    zeros = np.zeros((B, R), np.float32)
    return LearnerBatch(tokens_BT=tokens, attn_mask_BT=attn, resp_mask_BR=resp,
                        seed_mask_BR=seed, behavior_logp_BR=rng.normal(-2.4, 0.5, (B, R))
                        .astype(np.float32), sampler_logp_BR=zeros,
                        old_logp_BR=rng.normal(-2.5, 0.7, (B, R)).astype(np.float32),
                        ref_logp_BR=rng.normal(-2.6, 0.5, (B, R)).astype(np.float32),
                        advantages_B=rng.normal(0, 1, (B,)).astype(np.float32))


def _learner(name, agg, kind, params, graphdef):
    lcfg = LossConfig(name=name, agg_mode=agg, kl_coef=0.05, params=PARAMS.get(name, {}))
    return Learner(graphdef, params, lcfg, OCFG, variant="state+action",
                   old_logp_mode="recompute", kernel_impl="chunked",
                   layout=RowLayout(kind, P, R, 0))


def _add_topk(learner, params, batch, rng):
    ids, lp = learner.topk(params, batch.tokens_BT, batch.attn_mask_BT, R)
    return batch.replace(topk_ids_BRK=ids, topk_logp_BRK=lp + rng.normal(0, 0.3, lp.shape)
                         .astype(np.float32), topk_valid_BR=batch.resp_mask_BR.copy())


def _update(name, agg, kind, batch):
    graphdef, params = _model()
    learner = _learner(name, agg, kind, params, graphdef)
    st, m = learner.update(learner.init_state(params), batch, rng=jax.random.PRNGKey(3))
    return [np.asarray(x) for x in jax.tree_util.tree_leaves(st.params)], jax.device_get(m)


# Every loss of the registry (token-mean), and every aggregation mode on the token-level
# losses (a loss reads the mode through `losses.agg_denominators` alone, so the cross product
# would compile 40 updates for the same check).
CASES = ([(name, "token-mean") for name in sorted(losses.names())]
         + [(name, agg) for name in ("dapo", "grpo") for agg in LOSS_AGG_MODES
            if agg != "token-mean"])


@pytest.mark.parametrize("name,agg", CASES)
def test_packed_update_equals_padded(name, agg):
    rng = np.random.default_rng(11)
    batch = _batch(rng, name)
    if losses.get(name).needs.topk_proposal:
        graphdef, params = _model()
        batch = _add_topk(_learner(name, agg, "padded", params, graphdef), params, batch, rng)
    graphdef, params = _model()
    packed_rows = _learner(name, agg, "packed", params, graphdef).pack_batch(batch).tokens_BT
    assert packed_rows.shape[0] < B  # several sequences share a row: a real packing
    want_p, want_m = _update(name, agg, "padded", batch)
    got_p, got_m = _update(name, agg, "packed", batch)
    for a, b in zip(got_p, want_p, strict=True):
        np.testing.assert_allclose(a, b, rtol=RTOL, atol=ATOL)
    assert set(got_m) == set(want_m)
    for key in want_m:
        np.testing.assert_allclose(np.asarray(got_m[key]), np.asarray(want_m[key]), rtol=RTOL,
                                   atol=ATOL, err_msg=key)
    assert float(want_m["grad_norm"]) > 0  # the update moved something: parameters compared


def _row_stats(kind, micro):
    graphdef, params = _model()
    learner = _learner("sis", "token-mean", kind, params, graphdef)
    return RowStats(learner, hosts=Hosts(0, 1), micro_batch_size=micro, prompt_width=P,
                    response_width=R, pad_id=0), params


@pytest.mark.parametrize("micro", [0, 3])
def test_packed_statistics_passes_equal_padded(micro):
    pairs = _pairs(np.random.default_rng(4), n=7)
    padded, params = _row_stats("padded", micro)
    packed, _ = _row_stats("packed", micro)
    tokens, attn = padded.rows(pairs)
    resp = np.zeros((len(pairs), R), bool)
    for i, (_, r) in enumerate(pairs):
        resp[i, : len(r)] = True
    for want, got in zip(padded.logp_entropy(params, tokens, attn, R),
                         packed.logp_entropy(params, tokens, attn, R), strict=True):
        assert got.shape == want.shape == (len(pairs), R)
        np.testing.assert_allclose(got[resp], want[resp], rtol=0, atol=STATS_ATOL)
    (ids_w, lp_w), (ids_g, lp_g) = (s.topk(params, tokens, attn, R) for s in (padded, packed))
    np.testing.assert_allclose(lp_g[resp], lp_w[resp], rtol=0, atol=STATS_ATOL)
    # ids agree wherever the top-K log-probs are not tied within rounding
    gap = np.abs(np.diff(lp_w, axis=-1)).min(-1) > 1e-4
    np.testing.assert_array_equal(ids_g[resp & gap], ids_w[resp & gap])


def test_packed_refuses_what_it_cannot_serve():
    from tseeds_jax.model import attention
    from tseeds_jax.rl.config import ConfigValueError, TrainConfig, tiny_config

    cd = tiny_config()
    assert TrainConfig.from_config(cd).learner.layout == "padded"  # the default
    cd.learner.layout = "packed"
    cd.optim.grad_reduce = "update"
    with pytest.raises(ConfigValueError, match="config.optim.grad_reduce='update'.*packed"):
        TrainConfig.from_config(cd)
    cd.optim.grad_reduce = "micro_batch"
    cd.model.attention_impl = "cudnn"
    with pytest.raises(ConfigValueError, match="config.model.attention_impl='cudnn'.*segment"):
        TrainConfig.from_config(cd)
    cd.model.attention_impl = "auto"
    cd.learner.packed_row_len = 8
    with pytest.raises(ConfigValueError, match="config.learner.packed_row_len=8"):
        TrainConfig.from_config(cd)
    cd.learner.packed_row_len = 0
    cd.learner.layout = "tight"
    with pytest.raises(ConfigValueError, match="config.learner.layout='tight'"):
        TrainConfig.from_config(cd)
    cd.learner.layout = "packed"
    cfg = TrainConfig.from_config(cd)
    from tseeds_jax.rl.config import compat

    with pytest.raises(ConfigValueError, match="learner.layout='packed'.*several hosts"):
        compat.check(cfg, hosts=2)
    q = np.zeros((1, 4, 2, 8), np.float32)
    with pytest.raises(ValueError, match="attention_impl='cudnn'.*learner.layout"):
        attention.causal_attention(q, q, q, impl="cudnn",
                                   segment_ids_BT=np.ones((1, 4), np.int32))
