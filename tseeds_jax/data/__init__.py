"""Tokenizers, prompt templates, datasets (tfds array_record builders, reasoning-gym) and the
deterministic, shardable, resumable example loader.

Light modules are imported here; `tfds_builder` (imports tensorflow_datasets) and
`reasoning_gym_tasks` (imports reasoning_gym) load on first use.
"""

from tseeds_jax.data.errors import DataFormatError, OverlongPromptError, UnknownDatasetError
from tseeds_jax.data.formats import EXAMPLE_KEYS, REWARD_NAMES, validate_example
from tseeds_jax.data.loader import ExampleLoader, filter_prompt_lengths
from tseeds_jax.data.registry import DatasetSpec, get_spec, list_datasets, register_dataset
from tseeds_jax.data.sources import make_source
from tseeds_jax.data.templates import (
    TEMPLATES,
    PromptTemplate,
    encode_prompt,
    get_template,
    prompt_token_counter,
    render_chat,
    stop_token_ids,
    template_special_tokens,
)
from tseeds_jax.data.tokenizer import (
    HFTokenizer,
    SentencePieceTokenizer,
    Tokenizer,
    load_tokenizer,
)
from tseeds_jax.data.tokenizer_train import train_hf_bpe, train_sentencepiece

__all__ = [
    "DataFormatError", "OverlongPromptError", "UnknownDatasetError", "EXAMPLE_KEYS",
    "REWARD_NAMES", "validate_example", "ExampleLoader", "filter_prompt_lengths", "DatasetSpec",
    "get_spec", "list_datasets", "register_dataset", "make_source", "TEMPLATES",
    "PromptTemplate", "encode_prompt", "get_template", "prompt_token_counter", "render_chat",
    "stop_token_ids", "template_special_tokens", "HFTokenizer", "SentencePieceTokenizer",
    "Tokenizer", "load_tokenizer", "train_hf_bpe", "train_sentencepiece",
]
