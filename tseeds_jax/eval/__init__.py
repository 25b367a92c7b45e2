"""Evaluation: unbiased pass@k / avg@k, sampled evaluation and relay inference, reports."""

from tseeds_jax.eval.passk import avg_at_k, default_ks, mean_pass_at_k, pass_at_k

__all__ = ["avg_at_k", "default_ks", "mean_pass_at_k", "pass_at_k"]
