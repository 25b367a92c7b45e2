"""HF transformers checkpoints <-> tseeds_jax models and Orbax model checkpoints.

    model = from_pretrained("path/to/hf_folder", dtype="float32")   # model(tokens_BT) -> logits
    save_pretrained(model, "out_folder")                            # transformers loads it
    save_peft(lora_model, "adapter_folder")                         # PEFT loads it (hf/peft.py)

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
from tseeds_jax.hf.peft import load_peft, read_peft, save_peft, write_peft
from tseeds_jax.hf.peft_orbax import (
                                      load_adapter_checkpoint,
                                      merge_into_hf,
                                      orbax_to_peft,
                                      peft_to_orbax,
                                      save_adapter_checkpoint,
)

__all__ = [
    "ConversionError", "MissingFileError", "TOKENIZER_FILES", "copy_tokenizer_files",
    "from_pretrained", "hf_to_orbax", "load_adapter_checkpoint", "load_checkpoint_model",
    "load_config", "load_peft", "merge_into_hf", "model_from_params", "orbax_to_hf",
    "orbax_to_peft", "params_of", "peft_to_orbax", "read_params", "read_peft",
    "save_adapter_checkpoint", "save_checkpoint_model", "save_peft", "save_pretrained",
    "write_params", "write_peft",
]
