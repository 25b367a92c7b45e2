"""`tseeds serve`: JetStream's orchestrator + gRPC server over our engine, queried with
JetStream's own generated client stub; tokens equal the offline driver's (greedy)."""

import os
import socket
import subprocess
import sys

import grpc
import pytest

from tests.xla_env import child_xla_flags
from tseeds_jax.sampling import generate
from tseeds_jax.sampling.engine import TSeedsEngine
from tseeds_jax.sampling.jetstream_compat import jetstream_pb2, jetstream_pb2_grpc
from tseeds_jax.sampling.serve import load_model, start_server


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _decode(stub, tokens, max_tokens, timeout=60):
    request = jetstream_pb2.DecodeRequest(
        token_content=jetstream_pb2.DecodeRequest.TokenContent(token_ids=tokens),
        max_tokens=max_tokens)
    out = []
    for response in stub.Decode(request, timeout=timeout):
        for sample in response.stream_content.samples:
            out.extend(sample.token_ids)
    return out


def test_grpc_decode_equals_offline_driver():
    model = load_model(None, random_tiny=True, seed=0)
    engine = TSeedsEngine(model, max_concurrent_decodes=4, max_prefill_length=32,
                          max_new_tokens=16)
    port = _free_port()
    server = start_server(engine, port, threads=8)
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = jetstream_pb2_grpc.OrchestratorStub(channel)
            assert stub.HealthCheck(jetstream_pb2.HealthCheckRequest(), timeout=30).is_live
            prompts = [[5, 6, 7, 8], [200, 3], [17] * 20]
            got = [_decode(stub, p, 9) for p in prompts]
            bad = _decode(stub, [1, 99999], 5)  # out of vocabulary: empty stream, server lives
            after = _decode(stub, prompts[0], 9)
    finally:
        server.stop()
    ref = generate(model, prompts, max_new_tokens=9, temperature=0, num_slots=4)
    assert got == [r.tokens for r in ref]
    assert bad == [] and after == got[0]


@pytest.mark.slow
def test_serve_cli_subprocess(tmp_path):
    port = _free_port()
    log = open(tmp_path / "serve.log", "w")  # a file, not a pipe: a full pipe would block it
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS=child_xla_flags())
    proc = subprocess.Popen([sys.executable, "-m", "tseeds_jax.cli", "serve", "--random-tiny",
                             "--port", str(port), "--slots", "2", "--max-prefill-length", "16",
                             "--max-new-tokens", "8"], env=env, stdout=log,
                            stderr=subprocess.STDOUT)
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            grpc.channel_ready_future(channel).result(timeout=120)
            stub = jetstream_pb2_grpc.OrchestratorStub(channel)
            got = _decode(stub, [5, 6, 7, 8], 6, timeout=120)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
    model = load_model(None, random_tiny=True, seed=0)
    assert got == generate(model, [[5, 6, 7, 8]], max_new_tokens=6, temperature=0)[0].tokens
