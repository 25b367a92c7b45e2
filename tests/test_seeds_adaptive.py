"""Adaptive selectors inside the trainer: both loss variants (success_target with state+action,
mixture_spread with state), the seed metrics, and an exact resume with the selector's state
(per-prompt estimates, calibration) in the checkpoint."""

import jax
import numpy as np

from tests.trainer_utils import tiny_trainer

ADAPTIVE = {"seeds.truncation": "success_target", "seeds.target": 0.5}
SCALARS = ("loss", "reward", "grad_norm", "seed_length", "zero_adv_group_frac",
           "seeds/cut_ratio_mean", "seeds/predicted_success", "seeds/realised_success",
           "seeds/gamma", "seeds/gamma_calibrated", "seeds/fallback_frac")


def _same_params(a, b):
    return all(np.array_equal(np.asarray(x), np.asarray(y)) for x, y in
               zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b), strict=True))


def _tracker_equal(a, b):
    return (a.p == b.p and a.weight == b.weight and np.array_equal(a.sse_K, b.sse_K)
            and a.gamma == b.gamma)


def test_adaptive_seeds_in_both_loss_variants(tmp_path):
    from tseeds_jax.rl import losses

    for variant, rule in (("state+action", "success_target"), ("state", "mixture_spread")):
        tr = tiny_trainer(tmp_path / variant.replace("+", "_"),
                          **{**ADAPTIVE, "seeds.truncation": rule, "seeds.refresh_interval": 3,
                             "seeds.variant": variant})
        batches, real = [], tr.learner.update

        def spy(state, batch, _real=real, _seen=batches, **kw):
            _seen.append(batch)
            return _real(state, batch, **kw)

        tr.learner.update = spy
        hist = tr.run(steps=3)
        assert "zero_adv_group_frac/onpolicy" in hist[0]
        for m, batch in zip(hist[1:], batches[1:], strict=True):
            assert "zero_adv_group_frac/seeded" in m and len(m["calib/n"]) == 5
            # calibration counts the informative predictions (strictly between 0 and 1) only
            assert sum(m["calib/n"]) == 8 * m["seeds/informative_frac"]
            if m["seeds/informative_frac"] > 0:
                assert 0 < m["seeds/predicted_success"] < 1
            seed_BR = np.asarray(batch.seed_mask_BR) * np.asarray(batch.resp_mask_BR)
            assert seed_BR.sum() == m["seed_length"] * 8  # the chosen seeds reach the learner
            loss_BR = np.asarray(losses.seed_loss_mask(np.asarray(batch.resp_mask_BR), seed_BR,
                                                       tr.learner.variant))
            if variant == "state":  # context only: no seed token in the policy loss
                assert (loss_BR * seed_BR).sum() == 0
            else:
                assert (loss_BR * seed_BR).sum() == seed_BR.sum()
        with_seeds = [m for m in hist[1:] if m["seed_length"] > 0]
        assert with_seeds, "the parity reward leaves mixed groups: some seeds are non-empty"
        if variant == "state+action":
            for m in with_seeds:  # seed tokens keep pi_b's log-probs: ratios moved off 1
                assert abs(float(m["ratio_mean/seed"]) - 1.0) > 1e-6
        assert len(tr.source.seed_cache().tracker.p) == 6  # 3 batches x 2 prompts, each seen once


def test_adaptive_resume_is_bitwise_including_the_selector_state(tmp_path):
    over = {**ADAPTIVE, "seeds.refresh_interval": 3, "steps": 7}
    full = tiny_trainer(tmp_path / "full", checkpoints=True, **over)
    h_full = full.run()
    part = tiny_trainer(tmp_path / "part", checkpoints=True, **over)
    part.run(steps=4)  # mid-cycle; the refresh at step 6 depends on the state carried over
    resumed = tiny_trainer(tmp_path / "part", checkpoints=True, **over)
    assert resumed.restore() and resumed.step == 4
    assert _tracker_equal(resumed.source.seed_cache().tracker, part.source.seed_cache().tracker)
    h_rest = resumed.run()
    for a, b in zip(h_full[4:], h_rest, strict=True):
        for k in SCALARS:
            if k in a or k in b:
                np.testing.assert_array_equal(a[k], b[k], err_msg=k)
        assert a.get("calib/n") == b.get("calib/n")
    assert _tracker_equal(full.source.seed_cache().tracker, resumed.source.seed_cache().tracker)
    assert full.source.seed_cache().tracker.weight > 0  # the calibration did see continuations
    assert _same_params(full.state.params, resumed.state.params)
