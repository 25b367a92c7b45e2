"""`sampling.generate(..., interruptible=...)`: when the last required request ends, the
interruptible ones stop with the tokens written so far, a prefix of what they write uninterrupted
(the i-th token of a request uses fold_in(request key, i), whatever the slot or the call)."""

import numpy as np

from tseeds_jax.model import ModelConfig, init_model
from tseeds_jax.sampling import generate

CFG = ModelConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                  num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=128)


def test_interruptible_requests_stop_with_a_prefix_when_required_ones_end():
    model = init_model(CFG, seed=0)
    rng = np.random.default_rng(0)
    prompts = [rng.integers(1, 64, size=4).tolist() for _ in range(6)]
    budgets = [3, 5, 40, 40, 40, 40]  # two short required requests, four long interruptible
    seeds = list(range(100, 106))
    full = generate(model, prompts, max_new_tokens=budgets, seed=seeds, num_slots=4)
    opt = [False, False, True, True, True, True]
    cut = generate(model, prompts, max_new_tokens=budgets, seed=seeds, num_slots=4,
                   interruptible=opt)
    for i in (0, 1):  # required: unchanged
        assert cut[i].tokens == full[i].tokens and cut[i].finish_reason == full[i].finish_reason
    longest_required = max(len(full[0].tokens), len(full[1].tokens))
    stopped = 0
    for i in range(2, 6):
        n = len(cut[i].tokens)
        assert cut[i].tokens == full[i].tokens[:n]
        np.testing.assert_allclose(cut[i].logprobs, full[i].logprobs[:n], rtol=1e-5, atol=1e-5)
        # started with the required ones (4 slots: requests 2, 3) or after one of them ended
        assert n <= longest_required
        if n < len(full[i].tokens):
            assert cut[i].finish_reason == "length"
            stopped += 1
    assert stopped >= 2  # the long ones were interrupted
    # with no interruptible request marked, the call is the ordinary one
    same = generate(model, prompts, max_new_tokens=budgets, seed=seeds, num_slots=4,
                    interruptible=[False] * 6)
    assert [r.tokens for r in same] == [r.tokens for r in full]
