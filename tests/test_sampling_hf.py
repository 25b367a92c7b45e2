"""Greedy generation and sampler log-probs against HF transformers `generate` (torch CPU, float32).

Random tiny Qwen2 (q/k/v bias, untied head) and Llama (tied embeddings) models are built from a
config on the HF side; their weights are copied into our model with a test-local loader.
"""

import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers

from tseeds_jax.model import ModelConfig, init_model
from tseeds_jax.sampling import generate


def _hf_model(kind: str):
    common = dict(vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                  rms_norm_eps=1e-6)
    torch.manual_seed(0)
    if kind == "qwen2":
        cfg = transformers.Qwen2Config(**common, tie_word_embeddings=False)
        model = transformers.Qwen2ForCausalLM(cfg)
    else:
        cfg = transformers.LlamaConfig(**common, tie_word_embeddings=True, rope_theta=50000.0)
        model = transformers.LlamaForCausalLM(cfg)
    # Larger random weights than the 0.02 init (peaked next-token distributions, no near-ties),
    # and non-trivial biases/norm scales so that every mapped tensor matters.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            else:
                p.copy_(0.15 * torch.randn_like(p))
    return model.eval()


def _load_into_ours(hf_model):
    """Test-local HF -> ours weight copy (the mapping of the model's docstring)."""
    cfg = ModelConfig.from_hf_dict(hf_model.config.to_dict())
    ours = init_model(cfg, seed=1)
    sd = {k: v.detach().numpy().astype(np.float32) for k, v in hf_model.state_dict().items()}
    h, k, e = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_size
    d = cfg.hidden_size

    def put(param, array):
        assert param.value.shape == array.shape, (param.value.shape, array.shape)
        param.value = jnp.asarray(array)

    put(ours.embed, sd["model.embed_tokens.weight"])
    for i, layer in enumerate(ours.layers):
        pre = f"model.layers.{i}."
        put(layer.attn.q, sd[pre + "self_attn.q_proj.weight"].T.reshape(d, h, e))
        put(layer.attn.k, sd[pre + "self_attn.k_proj.weight"].T.reshape(d, k, e))
        put(layer.attn.v, sd[pre + "self_attn.v_proj.weight"].T.reshape(d, k, e))
        put(layer.attn.o, sd[pre + "self_attn.o_proj.weight"].T.reshape(h, e, d))
        if cfg.use_qkv_bias:
            put(layer.attn.q_bias, sd[pre + "self_attn.q_proj.bias"].reshape(h, e))
            put(layer.attn.k_bias, sd[pre + "self_attn.k_proj.bias"].reshape(k, e))
            put(layer.attn.v_bias, sd[pre + "self_attn.v_proj.bias"].reshape(k, e))
        put(layer.attn_norm.scale, sd[pre + "input_layernorm.weight"])
        put(layer.mlp_norm.scale, sd[pre + "post_attention_layernorm.weight"])
        put(layer.mlp.gate, sd[pre + "mlp.gate_proj.weight"].T)
        put(layer.mlp.up, sd[pre + "mlp.up_proj.weight"].T)
        put(layer.mlp.down, sd[pre + "mlp.down_proj.weight"].T)
    put(ours.final_norm.scale, sd["model.norm.weight"])
    if not cfg.tie_word_embeddings:
        put(ours.lm_head, sd["lm_head.weight"].T)
    return ours


def _hf_greedy(hf_model, prompt, n):
    out = hf_model.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt),
                                                                              dtype=torch.long),
                            max_new_tokens=n, min_new_tokens=n, do_sample=False,
                            output_logits=True, return_dict_in_generate=True, pad_token_id=0)
    tokens = out.sequences[0, len(prompt):].tolist()
    logp = [torch.log_softmax(lg[0].double(), -1)[t].item() for lg, t in zip(out.logits, tokens)]
    return tokens, logp


@pytest.mark.parametrize("kind", ["qwen2", "llama"])
def test_greedy_matches_hf_generate(kind):
    hf = _hf_model(kind)
    ours = _load_into_ours(hf)
    rng = np.random.default_rng(0)
    prompts = [rng.integers(0, 256, size=n).tolist() for n in (1, 5, 12, 9)]
    n_new = 12
    results = generate(ours, prompts, max_new_tokens=n_new, temperature=0.0, num_slots=2)
    for prompt, res in zip(prompts, results):
        tokens, logp = _hf_greedy(hf, prompt, n_new)
        assert res.finish_reason == "length"
        assert res.tokens == tokens
        np.testing.assert_allclose(res.logprobs, logp, rtol=0, atol=1e-4)
