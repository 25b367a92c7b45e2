"""Unbiased pass@k against the combinatorial definition in float64 (Chen et al. 2021)."""

import math

import numpy as np
import pytest

from tseeds_jax.eval import avg_at_k, default_ks, mean_pass_at_k, pass_at_k


def _reference(n, c, k):
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def test_matches_combinatorial_form_on_random_cases():
    rng = np.random.default_rng(0)
    for _ in range(500):
        n = int(rng.integers(1, 200))
        c = int(rng.integers(0, n + 1))
        k = int(rng.integers(1, n + 1))
        assert pass_at_k(n, c, k) == pytest.approx(_reference(n, c, k), rel=1e-12, abs=1e-12)


def test_all_subsets_contain_a_correct_sample_when_n_minus_c_below_k():
    assert pass_at_k(10, 8, 3) == 1.0
    assert pass_at_k(4, 4, 1) == 1.0
    assert pass_at_k(5, 1, 5) == 1.0
    assert pass_at_k(5, 0, 5) == 0.0


def test_pass_at_1_is_the_fraction_correct():
    assert pass_at_k(16, 5, 1) == pytest.approx(5 / 16, rel=1e-15)


@pytest.mark.parametrize("args", [(4, 1, 5), (4, 1, 0), (0, 0, 1), (4, 5, 1), (4, -1, 1),
                                  (4.0, 1, 1), (4, 1, True)])
def test_bad_arguments_raise(args):
    with pytest.raises(ValueError):
        pass_at_k(*args)


def test_averages_and_default_ks():
    assert default_ks(16) == [1, 2, 4, 8, 16]
    assert default_ks(12) == [1, 2, 4, 8, 12]
    assert avg_at_k([0, 2, 4], 4) == pytest.approx(0.5)
    assert mean_pass_at_k([0, 4], 4, 2) == pytest.approx(0.5)
