"""`tseeds export`: a training run's checkpoint out as the folders the ecosystem loads.

    hf      config.json, model(-0000i-of-0000n).safetensors (+ index past --max-shard-size),
            generation_config.json and the run's tokenizer in HF's format; a LoRA run's
            adapters are merged in (W + scale * A @ B)
    merged  the same, for a LoRA run only (says so explicitly)
    peft    a LoRA run's adapters as a PEFT folder whose base_model_name_or_path is the run's
            base (its `hf:` folder; --base-model for any other), plus the tokenizer

The model is the one `tseeds eval` evaluates (rl/run/loaded.py: the recorded base, checked, plus
the checkpoint). The folder appears complete or not at all. A `gs://` run folder is read
through etils.epath; a `gs://` OUT is written locally first and then copied.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from tseeds_jax.hf.convert import DEFAULT_MAX_SHARD_SIZE, save_pretrained
from tseeds_jax.hf.errors import ConversionError
from tseeds_jax.hf.files import copy_tokenizer_files
from tseeds_jax.hf.peft import save_peft

FORMATS = ("hf", "merged", "peft")


def parse_run(spec: str) -> tuple[str, int | None]:
    """'DIR' or 'DIR@STEP'."""
    if "@" in spec:
        path, _, step = spec.rpartition("@")
        if step.isdigit():
            return path, int(step)
        raise ValueError(f"{spec!r}: expected RUN_DIR or RUN_DIR@STEP with an integer step")
    return spec, None


def chat_template(template: str, tok) -> str:
    """A Jinja chat template that renders a conversation's last user message the way the run
    formatted its prompts (data/templates.py), so `apply_chat_template` gives the run's input."""
    from tseeds_jax.data.templates import get_template

    t = get_template(template)
    marker = "\x00PROMPT\x00"
    before, _, after = t.render(marker).partition(marker)
    bos = tok.bos_id is not None if t.add_bos is None else t.add_bos
    lit = lambda s: "{{ " + json.dumps(s) + " }}" if s else ""  # noqa: E731 (JSON = Jinja literal)
    return ((lit(tok.id_to_token(tok.bos_id)) if bos else "") + lit(before)
            + "{{ messages[-1]['content'] }}" + lit(after))


def generation_config(run) -> dict:
    from tseeds_jax.data.templates import stop_token_ids

    tok, r = run.tokenizer, run.cfg.rollout
    stops = list(stop_token_ids(tok, run.cfg.data.template))
    out = {"eos_token_id": stops if len(stops) > 1 else stops[0], "pad_token_id": tok.pad_id,
           "do_sample": r.temperature > 0, "temperature": r.temperature, "top_p": r.top_p,
           "max_new_tokens": r.max_response_len}
    if r.top_k:
        out["top_k"] = r.top_k
    if tok.bos_id is not None:
        out["bos_token_id"] = tok.bos_id
    return out


def _probe_prompts(run, count: int = 16) -> list[str]:
    """The first prompts of the run's source, rendered: the converted tokenizer must encode
    them as the run did."""
    from tseeds_jax.data.templates import get_template
    from tseeds_jax.rl.builders import build_source

    t = get_template(run.cfg.data.template)
    source = build_source(run.cfg)
    return [t.render(source[i]["prompt"]) for i in range(min(count, len(source)))]


def _write_tokenizer(run, folder: Path) -> None:
    from tseeds_jax.data.tokenizer import HFTokenizer
    from tseeds_jax.data.tokenizer_export import export_tokenizer

    export_tokenizer(run.tokenizer, folder, probe_texts=_probe_prompts(run))
    if not isinstance(run.tokenizer, HFTokenizer):  # converted: carries the run's template
        file = folder / "tokenizer_config.json"
        config = json.loads(file.read_text())
        config["chat_template"] = chat_template(run.cfg.data.template, run.tokenizer)
        file.write_text(json.dumps(config, indent=2) + "\n")
    if not (folder / "generation_config.json").exists():
        (folder / "generation_config.json").write_text(
            json.dumps(generation_config(run), indent=2) + "\n")


def _upload(src: Path, dst: str) -> None:
    """Copies the local folder `src` to `dst` (gs://...) file by file through etils.epath."""
    from etils import epath

    root = epath.Path(dst)
    for path in sorted(src.rglob("*")):
        if path.is_file():
            target = root / str(path.relative_to(src))
            target.parent.mkdir(parents=True, exist_ok=True)  # no-op on object stores
            target.write_bytes(path.read_bytes())


def export_run(spec: str, out: str, *, fmt: str = "hf", dtype: str | None = None,
               max_shard_size: int | str = DEFAULT_MAX_SHARD_SIZE,
               base_model: str | None = None, overwrite: bool = False) -> str:
    """Writes the checkpoint `spec` (RUN_DIR or RUN_DIR@STEP) as `fmt` into `out`."""
    from tseeds_jax.rl.run.loaded import open_run

    if fmt not in FORMATS:
        raise ValueError(f"--format {fmt!r}: expected one of {FORMATS}")
    run_dir, step = parse_run(spec)
    run = open_run(run_dir, step)
    if fmt in ("merged", "peft") and not run.is_lora:
        raise ConversionError(f"{run.where}: --format {fmt} needs a LoRA run (config.lora.rank "
                              "> 0); this run trains every parameter: use --format hf")
    remote = "://" in str(out)
    local = tempfile.mkdtemp(prefix="tseeds-export-") + "/out" if remote else out
    # The tokenizer first: a run whose tokenizer has no HF form stops before any weight is
    # written, and the model folder is renamed into place with its tokenizer files.
    tok_dir = Path(tempfile.mkdtemp(prefix="tseeds-tokenizer-"))
    try:
        _write_tokenizer(run, tok_dir)
        if fmt == "peft":
            base = base_model or run.base_ref()
            if base is None:
                raise ConversionError(
                    f"{run.where}: the run's base is {run.base_source.get('kind', 'random')!r}, "
                    "not an HF folder PEFT can load; export the full model with --format "
                    "merged, or write the base as an HF folder (tseeds convert orbax-to-hf "
                    "RUN_DIR/base_model BASE_DIR) and pass --base-model BASE_DIR")
            save_peft(run.model, local, base_model_name_or_path=base, dtype=dtype,
                      overwrite=overwrite)
            copy_tokenizer_files(tok_dir, local)
        else:
            save_pretrained(run.merged(), local, dtype=dtype, max_shard_size=max_shard_size,
                            tokenizer_from=tok_dir, overwrite=overwrite)
    finally:
        shutil.rmtree(tok_dir, ignore_errors=True)
    if remote:
        _upload(Path(local), str(out))
        shutil.rmtree(os.path.dirname(local), ignore_errors=True)
    return str(out)
