"""`tseeds serve`: JetStream's orchestrator and gRPC server over `TSeedsEngine`, on 127.0.0.1.

    tseeds serve --ckpt DIR --port 9000            # HF folder (config.json) or Orbax checkpoint
    tseeds serve --random-tiny --port 9000         # random default ModelConfig, for tests

Clients use JetStream's own stub (`jetstream.core.proto.jetstream_pb2_grpc.OrchestratorStub`)
with `DecodeRequest(token_content=...)`; responses carry token ids.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import signal
import threading
from pathlib import Path

import grpc

from tseeds_jax.model import ModelConfig, init_model
from tseeds_jax.sampling.strategies import make_strategy

LOCALHOST = "127.0.0.1"


def load_model(ckpt: str | None, *, random_tiny: bool = False, model_config: str | None = None,
               dtype: str = "float32", seed: int = 0):
    """A Transformer from an HF folder / Orbax checkpoint, or a random one for tests."""
    if ckpt:
        from tseeds_jax import hf  # noqa: PLC0415 (heavy; only when serving a checkpoint)

        path = Path(ckpt)
        if not path.exists():
            raise FileNotFoundError(f"--ckpt {ckpt}: no such file or directory")
        if (path / "config.json").exists():
            return hf.from_pretrained(path, dtype=dtype)
        return hf.load_checkpoint_model(path, dtype=dtype)
    cfg = ModelConfig()
    if model_config:
        overrides = json.loads(model_config)
        if not isinstance(overrides, dict):
            raise ValueError(f"--model-config {model_config!r}: expected a JSON object")
        cfg = dataclasses.replace(cfg, **overrides)
    elif not random_tiny:
        raise ValueError("give --ckpt DIR, --random-tiny or --model-config JSON")
    return init_model(cfg, seed=seed)


def start_server(engine, port: int, *, threads: int = 16):
    """Starts JetStream's Driver (interleaved: one engine prefills and decodes) and gRPC server
    bound to 127.0.0.1:port; returns the `server_lib.JetStreamServer` (call `.stop()`)."""
    from tseeds_jax.sampling.jetstream_compat import orchestrator, server_lib  # noqa: PLC0415

    params = engine.load_params()
    driver = orchestrator.Driver(prefill_engines=[engine], generate_engines=[engine],
                                 prefill_params=[params], generate_params=[params],
                                 interleaved_mode=True)
    # server_lib binds f"{_HOST}:{port}" with _HOST "[::]" (all interfaces); we serve locally.
    server_lib._HOST = LOCALHOST
    server = server_lib.JetStreamServer(driver, threads, port, grpc.insecure_server_credentials())
    server.start()
    return server


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tseeds serve", description=__doc__.split("\n")[0])
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--ckpt", help="HF folder (config.json + safetensors) or Orbax checkpoint")
    src.add_argument("--random-tiny", action="store_true", help="random default tiny model")
    src.add_argument("--model-config", help="random model: JSON of ModelConfig overrides")
    p.add_argument("--port", type=int, required=True, help="gRPC port on 127.0.0.1")
    p.add_argument("--dtype", default="float32", help="parameter dtype (float32, bfloat16)")
    p.add_argument("--seed", type=int, default=0, help="random-model init and sampling seed")
    p.add_argument("--slots", type=int, default=8, help="concurrent decode slots")
    p.add_argument("--max-prefill-length", type=int, default=256, help="power of two >= 16")
    p.add_argument("--max-new-tokens", type=int, default=256, help="per-request cap")
    p.add_argument("--temperature", type=float, default=0.0, help="0: greedy")
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--stop-token", type=int, action="append", default=[],
                   help="stop token id (repeatable)")
    p.add_argument("--threads", type=int, default=16, help="gRPC worker threads")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if not 0 < args.port < 65536:
        raise SystemExit(f"--port {args.port}: must be in 1..65535")
    from tseeds_jax.sampling.engine import TSeedsEngine  # noqa: PLC0415 (imports jetstream)

    model = load_model(args.ckpt, random_tiny=args.random_tiny, model_config=args.model_config,
                       dtype=args.dtype, seed=args.seed)
    engine = TSeedsEngine(model, max_concurrent_decodes=args.slots,
                          max_prefill_length=args.max_prefill_length,
                          max_new_tokens=args.max_new_tokens,
                          strategy=make_strategy(args.temperature, args.top_k, args.top_p),
                          stop_tokens=args.stop_token, seed=args.seed)
    server = start_server(engine, args.port, threads=args.threads)
    print(f"tseeds serve: listening on {LOCALHOST}:{args.port}", flush=True)
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    done.wait()
    logging.info("tseeds serve: stopping")
    server.stop()
    return 0
