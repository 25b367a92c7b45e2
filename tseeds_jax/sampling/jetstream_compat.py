"""The one place that imports google-jetstream 0.2.2 (archived) and patches its stale imports.

JetStream 0.2.2 imports modules we neither need nor install, and calls a removed JAX function:
  * `seqio` (pulls TensorFlow) in `engine.token_utils`, only for its SentencePiece vocabulary;
  * `tiktoken` in `third_party.llama3`, only for the Llama 3 text tokenizer;
  * `shortuuid` in `core.metrics.prometheus`, only for a metrics label;
  * `jax.tree_map` (removed from JAX) in `core.orchestrator.delete_pytree`.
We serve token ids only (client-side tokenization), so each missing module gets a stub whose
classes raise if anyone tries to use them; a module that *is* installed is used as is.
`delete_pytree` is replaced inside the orchestrator module (not by re-adding `jax.tree_map`
to JAX, which would leak into every other library). The orchestrator also reconfigures the
root logger at DEBUG level on import; that is undone here.

Use: `from tseeds_jax.sampling.jetstream_compat import engine_api, orchestrator, ...`.
"""

from __future__ import annotations

import importlib.util
import logging
import sys
import types
import uuid

import jax

STUBBED: list[str] = []  # names of the modules this shim stubbed (for tests and logs)


def _unavailable(what: str):
    class Unavailable:
        def __init__(self, *args, **kwargs):
            raise RuntimeError(f"{what} is not installed; tseeds serves token ids only "
                               "(client-side tokenization)")

    Unavailable.__name__ = what.rsplit(".", 1)[-1]
    return Unavailable


def _stub(name: str, **attrs) -> None:
    """Registers a stub module `name` unless the real package is importable."""
    top = name.split(".")[0]
    if name in sys.modules:
        return
    if top not in STUBBED and importlib.util.find_spec(top) is not None:
        return
    module = types.ModuleType(name)
    module.__dict__.update(attrs)
    module.__tseeds_stub__ = True
    sys.modules[name] = module
    parent, _, child = name.rpartition(".")
    if parent:
        setattr(sys.modules[parent], child, module)
    STUBBED.append(name)


def _install_stubs() -> None:
    _stub("seqio")
    _stub("seqio.vocabularies", Vocabulary=_unavailable("seqio.vocabularies.Vocabulary"),
          SentencePieceVocabulary=_unavailable("seqio.vocabularies.SentencePieceVocabulary"))
    _stub("tiktoken", Encoding=_unavailable("tiktoken.Encoding"))

    def load_tiktoken_bpe(*args, **kwargs):
        raise RuntimeError("tiktoken is not installed; tseeds serves token ids only")

    _stub("tiktoken.load", load_tiktoken_bpe=load_tiktoken_bpe)
    _stub("shortuuid", uuid=lambda: uuid.uuid4().hex[:22])


def _delete_pytree(tree) -> None:
    """jax.tree.map version of orchestrator.delete_pytree (frees a prefill after insert)."""
    for leaf in jax.tree.leaves(tree):
        if isinstance(leaf, jax.Array) and not leaf.is_deleted():
            leaf.delete()


def _import():
    _install_stubs()
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    from jetstream.core import orchestrator, server_lib  # noqa: PLC0415
    from jetstream.core.proto import jetstream_pb2, jetstream_pb2_grpc  # noqa: PLC0415
    from jetstream.engine import engine_api, token_utils, tokenizer_api, tokenizer_pb2  # noqa

    root.setLevel(level)
    for h in list(root.handlers):
        if h not in handlers:
            root.removeHandler(h)
    orchestrator.delete_pytree = _delete_pytree
    return (orchestrator, server_lib, jetstream_pb2, jetstream_pb2_grpc, engine_api, token_utils,
            tokenizer_api, tokenizer_pb2)


(orchestrator, server_lib, jetstream_pb2, jetstream_pb2_grpc, engine_api, token_utils,
 tokenizer_api, tokenizer_pb2) = _import()

__all__ = ["STUBBED", "engine_api", "jetstream_pb2", "jetstream_pb2_grpc", "orchestrator",
           "server_lib", "token_utils", "tokenizer_api", "tokenizer_pb2"]
