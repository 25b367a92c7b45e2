"""Logits parity with HF transformers (torch CPU) through `from_pretrained` of an HF folder.

Tiny random models of each supported family are built locally, their norm weights and biases
randomised, saved with HF's own `save_pretrained`, loaded with ours and compared in float32.
"""

import jax.numpy as jnp
import numpy as np
import pytest
import torch

from tseeds_jax.hf import from_pretrained
from tseeds_jax.hf.testing import hf_reference_model

TOL = 1e-4  # float32 logits max-abs difference (acceptance bound)

BASE = dict(vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
LLAMA3_ROPE = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 16}

CASES = {
    "qwen2_tied": dict(BASE, model_type="qwen2", tie_word_embeddings=True),
    "qwen2_untied": dict(BASE, model_type="qwen2", tie_word_embeddings=False, rope_theta=1e6),
    "qwen3": dict(BASE, model_type="qwen3", head_dim=24, tie_word_embeddings=False),
    "llama3_rope_scaling": dict(BASE, model_type="llama", rope_theta=500000.0,
                                rope_scaling=LLAMA3_ROPE, tie_word_embeddings=False),
    "llama_bias": dict(BASE, model_type="llama", attention_bias=True, mlp_bias=True,
                       tie_word_embeddings=True),
}


@pytest.fixture(scope="module", params=sorted(CASES))
def pair(request, tmp_path_factory):
    hf_model = hf_reference_model(CASES[request.param], seed=len(request.param))
    path = tmp_path_factory.mktemp(request.param)
    hf_model.save_pretrained(path)
    return hf_model, from_pretrained(path, dtype="float32")


def _tokens(vocab, shape, seed=0):
    return np.random.default_rng(seed).integers(0, vocab, shape)


def test_logits_match_hf(pair):
    hf_model, model = pair
    tokens = _tokens(model.cfg.vocab_size, (3, 13))
    with torch.no_grad():
        ref = hf_model(torch.tensor(tokens)).logits.numpy()
    out = np.asarray(model(jnp.asarray(tokens, jnp.int32)))
    assert out.shape == ref.shape
    assert np.abs(out - ref).max() <= TOL


def test_logits_match_hf_left_padding(pair):
    hf_model, model = pair
    tokens = _tokens(model.cfg.vocab_size, (3, 13), seed=1)
    mask = np.ones_like(tokens)
    mask[1, :4] = 0
    mask[2, :9] = 0
    positions = np.maximum(np.cumsum(mask, -1) - 1, 0)
    with torch.no_grad():
        ref = hf_model(torch.tensor(tokens), attention_mask=torch.tensor(mask),
                       position_ids=torch.tensor(positions)).logits.numpy()
    out = np.asarray(model(jnp.asarray(tokens, jnp.int32), jnp.asarray(positions),
                           jnp.asarray(mask)))
    real = mask.astype(bool)
    assert np.abs(out[real] - ref[real]).max() <= TOL
    # Our default positions for a left-padded batch are the same running count.
    out_default = np.asarray(model(jnp.asarray(tokens, jnp.int32), attn_mask_BT=jnp.asarray(mask)))
    assert np.abs(out_default[real] - ref[real]).max() <= TOL


def test_randomised_norms_and_biases_matter(pair):
    """Guards the fixture itself: the HF defaults (ones/zeros) would hide mapping bugs."""
    hf_model, _ = pair
    for name, p in hf_model.named_parameters():
        if "norm" in name:
            assert not torch.all(p == 1), name
        if name.endswith("bias"):
            assert not torch.all(p == 0), name
