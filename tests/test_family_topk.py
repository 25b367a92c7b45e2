"""kernels/topk.py (SIS proposals) against a float64 numpy reference."""

import numpy as np
import pytest
from tseeds_jax.kernels.topk import gather_logprobs, topk_logprobs

from tests.topk_reference import topk_logprobs_naive


def _ref(h, w, k, ids=None, temperature=1.0):
    z = (h.astype(np.float64) @ w.astype(np.float64)) / temperature
    lse = np.log(np.sum(np.exp(z - z.max(1, keepdims=True)), 1, keepdims=True)) + z.max(1, keepdims=True)
    lp = z - lse
    order = np.argsort(-lp, axis=1, kind="stable")[:, :k]
    got = None if ids is None else np.take_along_axis(lp, ids, axis=1)
    return order, np.take_along_axis(lp, order, axis=1), got


@pytest.mark.parametrize("n,v,k,bn,bv", [(13, 37, 5, 4, 8), (8, 64, 10, 8, 64), (5, 20, 3, 16, 7)])
def test_topk_and_gather_match_float64_reference(n, v, k, bn, bv):
    rng = np.random.default_rng(n * v)
    h = rng.normal(size=(n, 6)).astype(np.float32)
    w = rng.normal(size=(6, v)).astype(np.float32)
    ids = rng.integers(0, v, (n, 4)).astype(np.int32)
    got_ids, got_lp, got_g = topk_logprobs(h, w, k, gather_ids_NK=ids, temperature=0.7,
                                           block_n=bn, block_v=bv)
    want_ids, want_lp, want_g = _ref(h, w, k, ids, temperature=0.7)
    np.testing.assert_array_equal(np.asarray(got_ids), want_ids)
    np.testing.assert_allclose(np.asarray(got_lp), want_lp, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(got_g), want_g, rtol=1e-5, atol=1e-5)
    only = gather_logprobs(h, w, ids, temperature=0.7, block_n=bn, block_v=bv)
    np.testing.assert_allclose(np.asarray(only), want_g, rtol=1e-5, atol=1e-5)
    n_ids, n_lp = topk_logprobs_naive(h, w, k, temperature=0.7)
    np.testing.assert_array_equal(np.asarray(n_ids), want_ids)


def test_ties_pick_lower_ids_and_bad_ids_are_nan():
    h = np.ones((2, 1), np.float32)
    w = np.zeros((1, 9), np.float32)  # all logits equal
    ids, lp, g = topk_logprobs(h, w, 3, gather_ids_NK=np.array([[0, 9], [-1, 4]], np.int32),
                               block_v=4)
    np.testing.assert_array_equal(np.asarray(ids), [[0, 1, 2], [0, 1, 2]])
    np.testing.assert_allclose(np.asarray(lp), -np.log(9.0), rtol=1e-6)
    g = np.asarray(g)
    assert np.isnan(g[0, 1]) and np.isnan(g[1, 0]) and np.isfinite(g[0, 0])


def test_bad_arguments_name_the_argument():
    h = np.zeros((2, 3), np.float32)
    with pytest.raises(ValueError, match="k must be"):
        topk_logprobs(h, np.zeros((3, 4), np.float32), 5)
    with pytest.raises(ValueError, match="unembed_DV has D=2"):
        topk_logprobs(h, np.zeros((2, 4), np.float32), 1)
    with pytest.raises(ValueError, match="ids_NK"):
        gather_logprobs(h, np.zeros((3, 4), np.float32), np.zeros((3, 1), np.int32))
