"""HF transformers checkpoints <-> tseeds_jax models and Orbax model checkpoints.

    model = from_pretrained("path/to/hf_folder", dtype="float32")   # model(tokens_BT) -> logits
    save_pretrained(model, "out_folder")                            # transformers loads it

Conversion streams tensor by tensor (safetensors `safe_open`, bounded output shards); every
output folder is written next to its destination and renamed when complete.
"""

from tseeds_jax.hf.convert import (
                                   from_pretrained,
                                   load_config,
                                   model_from_params,
                                   params_of,
                                   read_params,
                                   save_pretrained,
                                   write_params,
)
from tseeds_jax.hf.errors import ConversionError, MissingFileError
from tseeds_jax.hf.files import TOKENIZER_FILES, copy_tokenizer_files
from tseeds_jax.hf.orbax_io import hf_to_orbax, load_checkpoint_model, orbax_to_hf, save_checkpoint_model

__all__ = [
    "ConversionError", "MissingFileError", "TOKENIZER_FILES", "copy_tokenizer_files",
    "from_pretrained", "hf_to_orbax", "load_checkpoint_model", "load_config", "model_from_params",
    "orbax_to_hf", "params_of", "read_params", "save_checkpoint_model", "save_pretrained",
    "write_params",
]
