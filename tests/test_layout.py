"""The learner's row layout (rl/learn/layout.py, issue 53): packed rows hold every sequence once
with restarted positions and a correct gather index; no sequence of a packed row sees another
(bit for bit, on every attention implementation that runs on CPU, and splash with segment ids
compiled for TPU); and the padded layout's column arithmetic lives in the layout module only."""

import os
import re
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from tseeds_jax.model import ModelConfig, attention, init_model
from tseeds_jax.rl.learn import layout as layout_lib
from tseeds_jax.rl.learn.layout import RowLayout, first_fit_decreasing, pack_rows, padded_rows
from tseeds_jax.rl.learn.learner import token_stats

ROOT = Path(__file__).resolve().parents[1]
P, R, V = 5, 9, 23


def _pairs(rng, n):
    return [(rng.integers(1, V, rng.integers(1, P + 1)).tolist(),
             rng.integers(1, V, rng.integers(0, R + 1)).tolist()) for _ in range(n)]


def test_pack_rows_holds_every_sequence_once_with_its_positions_and_targets():
    rng = np.random.default_rng(0)
    pairs = _pairs(rng, 12)
    tokens, attn = padded_rows(pairs, P, R)
    lay = RowLayout("packed", P, R, pad_id=0)
    rows = pack_rows(tokens, attn, lay, groups=3)
    length = P + R
    q = rows.tokens_BT.shape[0] // 3
    assert q in layout_lib.ROW_BUCKETS and q < 4  # 4 sequences per group, fewer rows
    flat_tok, flat_pos = rows.tokens_BT.reshape(3, -1), rows.positions_BT.reshape(3, -1)
    flat_seg = rows.segments_BT.reshape(3, -1)
    for i, (prompt, response) in enumerate(pairs):
        x = i // 4
        seq = prompt + response
        g = rows.gather_BR[i, : len(response)]
        # the state at g predicts the next token: the response, in order, in one segment
        assert flat_tok[x, g + 1].tolist() == response
        assert rows.targets_BR[i, : len(response)].tolist() == response
        start = int(g[0]) + 1 - len(prompt) if len(response) else None
        if start is not None:
            assert flat_tok[x, start : start + len(seq)].tolist() == seq
            assert flat_pos[x, start : start + len(seq)].tolist() == list(range(len(seq)))
            assert len(set(flat_seg[x, start : start + len(seq)].tolist())) == 1
            assert start % length + len(seq) <= length  # never across a row's end
    # every real token once: the packed rows hold exactly the padded rows' tokens
    assert (rows.segments_BT > 0).sum() == attn.sum()


def test_first_fit_decreasing_respects_capacity_and_places_everything():
    rng = np.random.default_rng(1)
    lengths = rng.integers(0, 20, 50).tolist()
    bins = first_fit_decreasing(lengths, 20)
    placed = sorted(i for b in bins for i in b)
    assert placed == [i for i, n in enumerate(lengths) if n > 0]
    assert all(sum(lengths[i] for i in b) <= 20 for b in bins)
    # first fit decreasing is within 11/9 OPT + 1 of the lower bound sum / capacity
    assert len(bins) <= 11 / 9 * -(-sum(lengths) // 20) + 1
    with pytest.raises(ValueError, match="exceeds the packed row length 20"):
        first_fit_decreasing([21], 20)


def test_packing_refuses_an_empty_prompt():
    tokens, attn = padded_rows([([], [3, 4])], P, R)
    with pytest.raises(ValueError, match="empty prompt"):
        pack_rows(tokens, attn, RowLayout("packed", P, R), groups=1)


def _model(impl):
    cfg = ModelConfig(model_type="qwen2", vocab_size=V, hidden_size=16, intermediate_size=32,
                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                      attention_impl=impl)
    return nnx.split(init_model(cfg, seed=1))


def _packed_logp(graphdef, params, pairs, impl_rows=1):
    tokens, attn = padded_rows(pairs, P, R)
    rows = pack_rows(tokens, attn, RowLayout("packed", P, R), groups=1,
                     rows_per_group=impl_rows)
    logp, ent = jax.jit(lambda p, r: token_stats(graphdef, p, r.tokens_BT, r.segments_BT, R,
                                                 "chunked", packed=r))(params, rows)
    return np.asarray(logp), np.asarray(ent), rows


@pytest.mark.parametrize("impl", ["xla", "chunked", "splash"])
def test_no_leak_between_packed_sequences(impl, monkeypatch):
    """Changing one packed sequence's tokens leaves every other sequence's log-probs and
    entropies bit for bit unchanged (and changes its own: the check can fail)."""
    if impl == "chunked":  # several query chunks per row, so chunk boundaries are crossed
        monkeypatch.setattr(attention, "CHUNK", 4)
    rng = np.random.default_rng(2)
    pairs = [(rng.integers(1, V, 3).tolist(), rng.integers(1, V, 4).tolist()) for _ in range(2)]
    graphdef, params = _model(impl)
    logp, ent, rows = _packed_logp(graphdef, params, pairs)
    assert rows.tokens_BT.shape[0] == 1 and rows.segments_BT.max() == 2  # both in one row
    for j in range(2):
        changed = [list(p) for p in pairs]
        changed[j] = ([(t % (V - 1)) + 1 for t in pairs[j][0]], pairs[j][1])  # new prompt
        logp2, ent2, _ = _packed_logp(graphdef, params, changed)
        other = 1 - j
        # (positions past a response are masked everywhere; their gather index is arbitrary)
        np.testing.assert_array_equal(logp2[other, :4], logp[other, :4])
        np.testing.assert_array_equal(ent2[other, :4], ent[other, :4])
        assert not np.array_equal(logp2[j, :4], logp[j, :4])
    # and the packed numbers are the padded ones (one sequence per row, validity masks)
    tokens, attn = padded_rows(pairs, P, R)
    want = np.asarray(token_stats(graphdef, params, tokens, attn, R, "chunked")[0])
    np.testing.assert_allclose(logp[:, :4], want[:, :4], rtol=0, atol=2e-5)


@pytest.mark.slow  # one TPU compile (libtpu, compile-only devices)
def test_splash_with_segment_ids_compiles_for_tpu():
    from jax.experimental import topologies
    from jax.sharding import SingleDeviceSharding
    from tseeds_jax.kernels import compile_target

    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    dev = topologies.get_topology_desc(platform="tpu", topology_name="v5p:2x2x1").devices[0]
    sh = SingleDeviceSharding(dev)
    b, t, h, kh, e = 2, 512, 4, 2, 128
    s = lambda shape, dt: jax.ShapeDtypeStruct(shape, dt, sharding=sh)
    # float32: the suite's "highest" matmul precision is refused by Mosaic for bfloat16 operands
    args = (s((b, t, h, e), jnp.float32), s((b, t, kh, e), jnp.float32),
            s((b, t, kh, e), jnp.float32), s((b, t), jnp.int32))

    def loss(q, k, v, seg):
        out = attention.attention_splash(q, k, v, interpret=False, segment_ids_BT=seg)
        return jnp.sum(out.astype(jnp.float32))

    with compile_target("tpu", "v5p"):
        hlo = jax.jit(jax.grad(loss, argnums=(0, 1, 2))).lower(*args).compile().as_text()
    # the Mosaic kernels (forward, dq, dkv) are in the program, and no [T, T] score buffer
    assert hlo.count("tpu_custom_call") >= 3, hlo.count("tpu_custom_call")
    assert not re.search(rf"(?:f32|bf16)\[[0-9,]*\b{t},{t}\]", hlo)


# Padded-row column arithmetic: response columns from P + R, the shift h[:, p-1:t-1], the last R
# columns, prompts written at p - len(prompt), positions from a running count of the mask.
_PADDING_ARITHMETIC = [
    re.compile(r"\[:, *p *- *1 *: *t *- *1\]"),
    re.compile(r"\[:, *-(?:r|response_width|self\.r)\b *:"),
    re.compile(r"\[:, *p *:\]"),
    re.compile(r"\[\w+, *(?:p|prompt_width) *- *len\("),
    re.compile(r"(?:t|width) *- *response_width\b"),
    re.compile(r"cumsum\((?:mask|attn\w*)"),
]
# The model's own default positions for left-padded rows (HF parity and the sampler call it
# without a layout) are the one use outside the layout module.
_ALLOWED = {"tseeds_jax/rl/learn/layout.py": None,
            "tseeds_jax/model/transformer.py": {"cumsum(mask"}}


def test_padding_arithmetic_only_in_the_layout_module():
    found = []
    for path in sorted((ROOT / "tseeds_jax").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        allowed = _ALLOWED.get(rel, set())
        if allowed is None:
            continue
        for i, line in enumerate(path.read_text().splitlines(), 1):
            for pat in _PADDING_ARITHMETIC:
                m = pat.search(line)
                if m and not any(a in m.group(0) for a in allowed):
                    found.append(f"{rel}:{i}: {line.strip()}")
    assert not found, "padded-row arithmetic outside rl/learn/layout.py:\n" + "\n".join(found)
    # the patterns match what the layout module itself does (the check can fail)
    text = (ROOT / "tseeds_jax/rl/learn/layout.py").read_text()
    assert sum(bool(p.search(text)) for p in _PADDING_ARITHMETIC) >= 3
