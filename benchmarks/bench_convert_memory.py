"""Peak host memory of `tseeds convert` in both directions, against the size of the weights.

    python benchmarks/bench_convert_memory.py [--mb 300] [--workdir /tmp/bench_convert]

Builds a random HF-format Qwen2 folder of at least `--mb` MB of float32 weights (written tensor
by tensor by the streaming safetensors writer, no torch), then runs in fresh subprocesses:
  * a bare `import jax, tseeds_jax` (+ one device) and an import of the conversion stack
    (`tseeds_jax.hf`: flax, orbax, safetensors) -- the baselines;
  * `tseeds convert hf-to-orbax` and `tseeds convert orbax-to-hf`.
Each child reports its own peak RSS (VmHWM from /proc/self/status); the parent also samples the
child's RSS with psutil every 5 ms as a cross-check. Rewrites the `convert` section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import docsection  # benchmarks/ is on sys.path when run as a script
import psutil

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "benchmarks.md"
BEGIN, END = "<!-- BEGIN convert -->", "<!-- END convert -->"

# VmHWM (peak RSS of this address space) rather than ru_maxrss: Linux carries the forking
# parent's high-water mark into ru_maxrss across exec, which would report the parent's size.
CHILD = """
{body}
print("HWM_KB", [l.split()[1] for l in open("/proc/self/status") if l.startswith("VmHWM")][0])
"""


def run_child(body: str) -> dict:
    """Runs `body` in a fresh Python; returns peak RSS (VmHWM, psutil-sampled, their max), MiB."""
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env.pop("XLA_FLAGS", None)
    t0 = time.time()
    proc = subprocess.Popen([sys.executable, "-c", CHILD.format(body=body)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    ps, sampled = psutil.Process(proc.pid), 0
    while proc.poll() is None:
        try:
            sampled = max(sampled, ps.memory_info().rss)
        except psutil.Error:
            pass
        time.sleep(0.005)
    out, err = proc.communicate()
    if proc.returncode:
        raise RuntimeError(f"child failed ({proc.returncode}):\n{err[-3000:]}")
    kb = int(re.search(r"HWM_KB (\d+)", out).group(1))
    return {"hwm_mb": kb / 1024, "sampled_mb": sampled / 2**20,
            "peak_mb": max(kb / 1024, sampled / 2**20), "seconds": time.time() - t0}


def build_folder(path: Path, min_mb: float):
    from tseeds_jax.hf.testing import write_random_hf_folder
    from tseeds_jax.model.config import ModelConfig

    layers = 1
    while True:
        cfg = ModelConfig(model_type="qwen2", vocab_size=16384, hidden_size=1024,
                          intermediate_size=4096, num_hidden_layers=layers,
                          num_attention_heads=16, num_key_value_heads=4,
                          tie_word_embeddings=False)
        if cfg.num_params * 4 / 1e6 >= min_mb:
            break
        layers += 1
    if path.exists():
        shutil.rmtree(path)
    nbytes = write_random_hf_folder(cfg, path, dtype="float32", seed=0, max_shard_size="100MB")
    return cfg, nbytes


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mb", type=float, default=300.0, help="minimum weight size in MB (1e6 B)")
    p.add_argument("--workdir", default="/tmp/bench_convert")
    p.add_argument("--no-doc", action="store_true", help="print only; do not rewrite the doc")
    args = p.parse_args(argv)

    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    hf, ckpt, back = work / "hf", work / "ckpt", work / "hf_back"
    cfg, nbytes = build_folder(hf, args.mb)
    weights_mb = nbytes / 2**20
    for d in (ckpt, back):
        shutil.rmtree(d, ignore_errors=True)

    rows = {
        "bare `import jax, tseeds_jax` + device": run_child(
            "import jax, tseeds_jax; jax.devices()"),
        "import conversion stack (`tseeds_jax.hf`)": run_child(
            "import jax, tseeds_jax.hf, tseeds_jax.hf.cli; jax.devices()"),
        "`tseeds convert hf-to-orbax`": run_child(
            f"from tseeds_jax.hf.cli import main; assert main(['hf-to-orbax', {str(hf)!r}, "
            f"{str(ckpt)!r}]) == 0"),
        "`tseeds convert orbax-to-hf`": run_child(
            f"from tseeds_jax.hf.cli import main; assert main(['orbax-to-hf', {str(ckpt)!r}, "
            f"{str(back)!r}, '--max-shard-size', '100MB']) == 0"),
    }
    base = rows["import conversion stack (`tseeds_jax.hf`)"]["peak_mb"]
    bare = rows["bare `import jax, tseeds_jax` + device"]["peak_mb"]
    result = {"weights_mb": weights_mb, "config": {"layers": cfg.num_hidden_layers,
                                                   "params": cfg.num_params}, "rows": rows}
    print(json.dumps(result, indent=2))

    lines = [
        BEGIN,
        "## Conversion memory (`benchmarks/bench_convert_memory.py`)",
        "",
        f"Command: `python benchmarks/bench_convert_memory.py --mb {args.mb:g}` — "
        f"{datetime.date.today().isoformat()}, CPU only (JAX_PLATFORMS=cpu), "
        f"{os.cpu_count()} host cores shared with other jobs.",
        "",
        f"Model: random Qwen2, vocab 16384, width 1024, MLP 4096, {cfg.num_hidden_layers} layers, "
        f"untied, {cfg.num_params / 1e6:.1f} M params = **{weights_mb:.0f} MiB of float32 "
        "weights** in 100 MB safetensors shards. Each row is a fresh process; peak RSS is its "
        "VmHWM (psutil sampling every 5 ms as a cross-check; `ru_maxrss` is not used because "
        "Linux carries the parent's high-water mark into it across exec).",
        "",
    ]
    cols = ["process", "VmHWM (MiB)", "psutil max (MiB)", "peak − stack import (MiB)",
            "(peak − import) / weights", "peak / weights", "wall (s)"]
    table = []
    for name, r in rows.items():
        extra = r["peak_mb"] - base
        if "convert" not in name:
            table.append([name, f"{r['hwm_mb']:.0f}", f"{r['sampled_mb']:.0f}", "—", "—", "—",
                          f"{r['seconds']:.1f}"])
            continue
        table.append([name, f"{r['hwm_mb']:.0f}", f"{r['sampled_mb']:.0f}", f"{extra:.0f}",
                      f"{extra / weights_mb:.2f}", f"{r['peak_mb'] / weights_mb:.2f}",
                      f"{r['seconds']:.1f}"])
    conv = [r for n, r in rows.items() if "convert" in n]
    worst = max(r["peak_mb"] for r in conv)
    rec = _record(args, weights_mb, cfg, cols, table, worst, base, bare)
    fig = lambda key: docsection.fig(rec, key)  # noqa: E731
    lines += [
        docsection.table_block(rec),
        "",
        f"Reading: the conversions' memory on top of the imported stack is at most "
        f"{fig('extra_over_import_max')}× the weights (bound: 2×); counting everything, "
        f"including ~{fig('bare_import_mib')} MiB for a bare `import jax, tseeds_jax` and "
        f"~{fig('conversion_stack_mib')} MiB for the conversion stack, the peak is "
        f"{fig('peak_over_weights_max')}× the weights. "
        "hf-to-orbax reads tensor by tensor with `safe_open` into host-CPU jax arrays (the "
        "parameters held once), which Orbax writes uncompressed without another copy; "
        "orbax-to-hf restores them once and streams the safetensors out one tensor at a time. "
        "The rest above 1× is allocator/tensorstore working memory.",
        END,
    ]
    if not args.no_doc:
        from tseeds_jax import results_record

        results_record.write(str(DOC.parent / "results" / f"{rec['name']}.json"), rec)
        write_section(DOC, "\n".join(lines))
    return 0


def _record(args, weights_mb, cfg, cols, table, worst, base, bare):
    """The run as a result record (kind "measured"): the table and the reading's four figures."""
    from tseeds_jax import results_record

    return results_record.make(
        "convert_memory", "peak resident memory of tseeds convert (hf-to-orbax, orbax-to-hf) on a "
        f"{cfg.num_params / 1e6:.1f} M-parameter ({weights_mb:.0f} MiB float32) random Qwen2, each "
        "a fresh process (CPU)", "measured",
        f"python benchmarks/bench_convert_memory.py --mb {args.mb:g}", backend="cpu (JAX_PLATFORMS=cpu)",
        values={"extra_over_import_max": {"value": round((worst - base) / weights_mb, 2),
                                          "unit": "x the weights"},
                "peak_over_weights_max": {"value": round(worst / weights_mb, 2),
                                          "unit": "x the weights"},
                "bare_import_mib": {"value": round(bare), "unit": "MiB"},
                "conversion_stack_mib": {"value": round(base), "unit": "MiB"}},
        table={"columns": cols, "rows": table})


def write_section(doc: Path, section: str) -> None:
    text = doc.read_text() if doc.exists() else "# Benchmarks\n"
    if BEGIN in text and END in text:
        start, end = text.index(BEGIN), text.index(END) + len(END)
        text = text[:start] + section + text[end:]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    doc.parent.mkdir(parents=True, exist_ok=True)
    doc.write_text(text)


if __name__ == "__main__":
    sys.exit(main())
