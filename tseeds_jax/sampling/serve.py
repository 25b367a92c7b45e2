"""`tseeds serve`: JetStream's orchestrator and gRPC server over `TSeedsEngine`, on 127.0.0.1.

    tseeds serve --run RUN_DIR[@STEP] --port 9000  # a training run (via export/serve_cli.py)
    tseeds serve --ckpt DIR --port 9000            # HF folder (config.json) or Orbax checkpoint
    tseeds serve --random-tiny --port 9000         # random default ModelConfig, for tests

Clients use JetStream's own stub (`jetstream.core.proto.jetstream_pb2_grpc.OrchestratorStub`).
`DecodeRequest(token_content=...)` gets token ids back. `DecodeRequest(text_content=...)` gets
text when the server has a tokenizer: a run's (`--run`: its prompt template too), or an HF
folder's tokenizer files (`--ckpt`, with `--template`, default raw); the prompt is rendered with
the template and encoded on the server (sampling/text.py).
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


def folder_tokenizer(ckpt: str):
    """The tokenizer saved beside a model folder (tokenizer.json or tokenizer.model), or None."""
    from tseeds_jax.data.tokenizer import load_tokenizer  # noqa: PLC0415

    path = Path(ckpt)
    if (path / "tokenizer.json").is_file() or (path / "tokenizer.model").is_file():
        return load_tokenizer(path)
    return None


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
    src.add_argument("--run", metavar="RUN_DIR[@STEP]",
                     help="a training run's checkpoint, with its tokenizer and prompt template")
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
    p.add_argument("--template", default=None,
                   help="prompt template of text requests (default: the run's; --ckpt: raw)")
    p.add_argument("--threads", type=int, default=16, help="gRPC worker threads")
    return p


def main(argv: list[str] | None = None, *, load_run_model=None) -> int:
    """load_run_model: RUN_DIR[@STEP] -> (model, tokenizer, template), for `--run`; given by
    `tseeds serve` (export/serve_cli.py: building a run's model is rl's, above sampling)."""
    args = _parser().parse_args(argv)
    if not 0 < args.port < 65536:
        raise SystemExit(f"--port {args.port}: must be in 1..65535")
    from tseeds_jax.sampling.engine import TSeedsEngine  # noqa: PLC0415 (imports jetstream)
    from tseeds_jax.sampling.text import TextTokenizer  # noqa: PLC0415

    tok, template = None, args.template or "raw"
    if args.run:
        if load_run_model is None:
            raise SystemExit("--run: serve a run with the `tseeds serve` command")
        model, tok, run_template = load_run_model(args.run)
        template = args.template or run_template
    else:
        model = load_model(args.ckpt, random_tiny=args.random_tiny,
                           model_config=args.model_config, dtype=args.dtype, seed=args.seed)
        tok = folder_tokenizer(args.ckpt) if args.ckpt else None
    text = None if tok is None else TextTokenizer(tok, template, args.stop_token)
    stops = args.stop_token or (sorted(text.stop_tokens) if text is not None else [])
    engine = TSeedsEngine(model, max_concurrent_decodes=args.slots,
                          max_prefill_length=args.max_prefill_length,
                          max_new_tokens=args.max_new_tokens,
                          strategy=make_strategy(args.temperature, args.top_k, args.top_p),
                          stop_tokens=stops, seed=args.seed, tokenizer=text)
    server = start_server(engine, args.port, threads=args.threads)
    print(f"tseeds serve: listening on {LOCALHOST}:{args.port}"
          + ("" if text is None else f" (text requests: template {template!r})"), flush=True)
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    done.wait()
    logging.info("tseeds serve: stopping")
    server.stop()
    return 0
