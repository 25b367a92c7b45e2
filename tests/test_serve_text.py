"""`tseeds serve` with a tokenizer: a JetStream text request (`text_content`), sent through
JetStream's own gRPC stub, is rendered with the run's template, encoded with its tokenizer and
answered with text; the text is the tokenizer's decode of the tokens the offline driver samples
for the same prompt ids (greedy), and token-id requests on the same server still get ids."""

import socket

import grpc

from tseeds_jax.data.templates import encode_prompt
from tseeds_jax.data.tokenizer_train import train_sentencepiece
from tseeds_jax.model import ModelConfig, init_model
from tseeds_jax.sampling import generate
from tseeds_jax.sampling.engine import TSeedsEngine
from tseeds_jax.sampling.jetstream_compat import jetstream_pb2, jetstream_pb2_grpc
from tseeds_jax.sampling.serve import start_server
from tseeds_jax.sampling.text import TextTokenizer


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stream(stub, request, timeout=60):
    text, ids = [], []
    for response in stub.Decode(request, timeout=timeout):
        for sample in response.stream_content.samples:
            text.append(sample.text)
            ids.extend(sample.token_ids)
    return "".join("".join(t) for t in text), ids


def test_text_request_gets_text_back(tmp_path):
    tok = train_sentencepiece(["Question: 12 + 7 = ?", "Answer: 19 and some words here"] * 20,
                              vocab_size=64, model_type="char", out=str(tmp_path / "t.model"))
    model = init_model(ModelConfig(vocab_size=tok.vocab_size, hidden_size=32,
                                   intermediate_size=64, num_hidden_layers=1,
                                   num_attention_heads=2, num_key_value_heads=1), seed=1)
    text_tok = TextTokenizer(tok, "plain")
    engine = TSeedsEngine(model, max_concurrent_decodes=2, max_prefill_length=32,
                          max_new_tokens=12, stop_tokens=sorted(text_tok.stop_tokens),
                          tokenizer=text_tok)
    prompt = "12 + 7 = ?"
    ids = encode_prompt(tok, "plain", prompt)
    port = _free_port()
    server = start_server(engine, port, threads=4)
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = jetstream_pb2_grpc.OrchestratorStub(channel)
            got_text, _ = _stream(stub, jetstream_pb2.DecodeRequest(
                text_content=jetstream_pb2.DecodeRequest.TextContent(text=prompt),
                max_tokens=10))
            _, got_ids = _stream(stub, jetstream_pb2.DecodeRequest(
                token_content=jetstream_pb2.DecodeRequest.TokenContent(token_ids=ids),
                max_tokens=10))
    finally:
        server.stop()
    ref = generate(model, [ids], max_new_tokens=10, temperature=0,
                   stop_tokens=sorted(text_tok.stop_tokens))[0].tokens
    ref = [t for t in ref if t not in text_tok.stop_tokens]
    assert got_ids == ref and len(ref) > 3
    assert got_text == tok.decode(ref, skip_special_tokens=True) and got_text.strip()
