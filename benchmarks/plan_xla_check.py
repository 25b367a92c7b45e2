"""The planner against XLA:CPU (docs/scale.md, "How well it agrees with XLA"): the learner's
jitted update and the sharded sampler's decode call compiled from shapes only on this machine
(`tests/xla_measure.py`, XLA:CPU with its memory-minimising scheduler), XLA's footprint
(argument + output - alias + temp) beside the planner's estimate for the same shapes. Writes the
result records docs/results/plan_xla_cpu_learner.json and plan_xla_cpu_sampler.json (kind
"measured": XLA's memory analysis, counted on this machine; nothing runs, so the load does not
change the figures). tests/test_plan_xla.py asserts the same ratios within 20% on a subset.

    python benchmarks/plan_xla_check.py             # ~3-5 min on 2 shared cores
    python benchmarks/plan_xla_check.py --no-write  # print only
"""

from __future__ import annotations

import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
MIB = 1 << 20

# Learner cases: (label, xla_measure case). Defaults: float32, V 8192, D 256, F 768, H 4, K 2,
# P 32, R 224, B 8, tied embeddings. Two micro-batches unless the label says otherwise.
LEARNER_CASES = [
    ("L 2, micro 4", dict(num_hidden_layers=2, micro_batch_size=4)),
    ("L 2, micro 4, remat", dict(num_hidden_layers=2, micro_batch_size=4, remat=True)),
    ("L 4, F 1536, micro 4", dict(num_hidden_layers=4, intermediate_size=1536, micro_batch_size=4)),
    ("L 4, F 1536, micro 4, remat", dict(num_hidden_layers=4, intermediate_size=1536,
                                          micro_batch_size=4, remat=True)),
    ("L 4, R 480, B 4, micro 2", dict(num_hidden_layers=4, response_len=480, batch=4,
                                      micro_batch_size=2)),
    ("L 4, R 480, B 4, micro 2, remat", dict(num_hidden_layers=4, response_len=480, batch=4,
                                             micro_batch_size=2, remat=True)),
    ("D 512, H 8, F 1536, L 4, micro 4, remat", dict(hidden_size=512, num_attention_heads=8,
                                                      intermediate_size=1536, num_hidden_layers=4,
                                                      micro_batch_size=4, remat=True)),
    ("L 6, B 16, R 96, micro 8", dict(num_hidden_layers=6, batch=16, response_len=96,
                                      micro_batch_size=8)),
    ("L 6, B 16, R 96, micro 8, remat", dict(num_hidden_layers=6, batch=16, response_len=96,
                                             micro_batch_size=8, remat=True)),
    ("L 4, bfloat16 compute, untied, micro 4, remat", dict(num_hidden_layers=4, dtype="bfloat16",
                                                            tie_word_embeddings=False,
                                                            micro_batch_size=4, remat=True)),
    ("L 4, one micro-batch", dict(num_hidden_layers=4)),
]
# Sampler cases: (label, case); defaults float32, V 8192, D 256, F 768, H 4, K 2, L 2, 64 slots,
# P 32, R 224; 8 emulated CPU devices.
SAMPLER_CASES = [
    ("1/8/1", dict(kind="sampler", mesh=[1, 8, 1])),
    ("2/2/2", dict(kind="sampler", mesh=[2, 2, 2])),
    ("1/2/4, H 8, K 4", dict(kind="sampler", mesh=[1, 2, 4], num_attention_heads=8,
                             num_key_value_heads=4)),
    ("1/4/2, L 4", dict(kind="sampler", mesh=[1, 4, 2], num_hidden_layers=4)),
    ("1/8/1, 128 slots, F 1536", dict(kind="sampler", mesh=[1, 8, 1], slots=128,
                                      intermediate_size=1536)),
    ("2/4/1, R 480, L 4", dict(kind="sampler", mesh=[2, 4, 1], response_len=480,
                               num_hidden_layers=4)),
]


def _key(label: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in label).strip("_").replace("__", "_")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--no-write", action="store_true", help="print only")
    a = p.parse_args(argv)
    from tests import xla_measure
    from tseeds_jax import results_record
    from tseeds_jax.scale import plan

    records = []
    for kind, cases, devices, digits in (("learner", LEARNER_CASES, 1, 1),
                                         ("sampler", SAMPLER_CASES, 8, 2)):
        measured = xla_measure.measure_in_subprocess([c for _, c in cases], devices=devices,
                                                     timeout=1800)
        rows, values = [], {}
        for (label, case), m in zip(cases, measured, strict=True):
            est = (plan.estimate(xla_measure.workload_for_case(case)).learner_step_bytes
                   if kind == "learner" else
                   plan.sampler_decode_bytes(xla_measure.sampler_workload_for_case(case)))
            ratio = round(est / m["footprint"], 2)
            rows.append([label, f"{m['footprint'] / MIB:.{digits}f}", f"{est / MIB:.{digits}f}",
                         f"{ratio:.2f}"])
            values[_key(label)] = {"value": ratio, "unit": "plan / XLA footprint"}
            print(kind, " | ".join(rows[-1]), flush=True)
        first = "case" if kind == "learner" else "case (mesh data/fsdp/tensor)"
        what = ("the learner's jitted update (Learner._update) compiled for XLA:CPU from shapes, one "
                "device: footprint = argument + output - alias + temp, beside the planner's "
                "resident + learner-step estimate (MiB)" if kind == "learner" else
                "the sharded sampler's decode call (core.run_chunk) compiled for XLA:CPU from "
                "shapes on 8 emulated devices: per-device footprint beside "
                "plan.sampler_decode_bytes (MiB)")
        records.append(results_record.make(
            f"plan_xla_cpu_{kind}", what, "measured", "python benchmarks/plan_xla_check.py",
            backend="cpu (XLA:CPU memory analysis, --xla_cpu_enable_concurrency_optimized_"
                    "scheduler=false; compiled, not run)",
            values=values, table={"columns": [first, "XLA footprint", "plan", "plan / XLA"],
                                  "rows": rows}))
    if not a.no_write:
        for rec in records:
            print(results_record.write(os.path.join(ROOT, "docs", "results",
                                                    f"{rec['name']}.json"), rec))
    return 0


if __name__ == "__main__":
    sys.exit(main())
