"""Small fixture files in each supported published format, with the normalised examples they
must produce written out by hand (not computed by the normalisers), plus a tiny text corpus for
training tokenizers. Used by the tests and the demo; reproducible:

  python -m tseeds_jax.data.fixtures OUT_DIR
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from tseeds_jax.data.formats import DAPO_PREFIX, DAPO_SUFFIX


def _dapo_prompt(problem: str) -> list[dict[str, str]]:
    return [{"content": DAPO_PREFIX + problem + DAPO_SUFFIX, "role": "user"}]


# name -> (file name, raw records, expected examples)
_SETS: dict[str, tuple[str, list[dict[str, Any]], list[dict[str, Any]]]] = {
    "dapo_math_17k": ("dapo-math-17k.parquet", [
        {"data_source": "math_dapo", "prompt": _dapo_prompt("Find $x$ if $2x = 14$."),
         "ability": "MATH",
         "reward_model": {"ground_truth": "7", "style": "rule-lighteval/MATH_v2"},
         "extra_info": {"index": "9a9b6eb4-a1cb-49d1-8c1e-62eaf2f74079"}},
        {"data_source": "math_dapo", "prompt": _dapo_prompt("Compute $3^4$."),
         "ability": "MATH",
         "reward_model": {"ground_truth": "81", "style": "rule-lighteval/MATH_v2"},
         "extra_info": {"index": "b4b7e1a5-0f3c-4f0e-9f1e-2d3c4b5a6978"}},
    ], [
        {"id": "9a9b6eb4-a1cb-49d1-8c1e-62eaf2f74079", "prompt": "Find $x$ if $2x = 14$.",
         "reference": "7", "source": "dapo_math_17k", "reward_name": "math",
         "meta": {"data_source": "math_dapo"}},
        {"id": "b4b7e1a5-0f3c-4f0e-9f1e-2d3c4b5a6978", "prompt": "Compute $3^4$.",
         "reference": "81", "source": "dapo_math_17k", "reward_name": "math",
         "meta": {"data_source": "math_dapo"}},
    ]),
    "openr1_math_46k": ("openr1-math-46k.parquet", [
        {"data_source": "openr1", "prompt": [
            {"role": "system", "content": "Think first, then answer."},
            {"role": "user", "content": "What is $\\frac{1}{2} + \\frac{1}{4}$?"}],
         "target": [{"role": "assistant", "content": "3/4"}], "ability": "math",
         "reward_model": {"ground_truth": "\\frac{3}{4}", "style": "rule"},
         "extra_info": {"index": 12, "split": "default"}},
    ], [
        {"id": "12", "prompt": "What is $\\frac{1}{2} + \\frac{1}{4}$?",
         "reference": "\\frac{3}{4}", "source": "openr1_math_46k", "reward_name": "math",
         "meta": {"data_source": "openr1", "system_prompt": "Think first, then answer."}},
    ]),
    "openr1_math": ("openr1-math-220k.parquet", [
        {"problem": "Let $a+b=5$ and $a-b=1$. Find $ab$.", "solution": "a=3, b=2, so $ab=6$.",
         "answer": "6", "problem_type": "Algebra", "question_type": "math-word-problem",
         "source": "olympiads", "uuid": "5e0d2a8e-7c1b-5a6f-9e3d-1b2c3d4e5f60",
         "is_reasoning_complete": [True, False], "generations": ["...", "..."],
         "correctness_math_verify": [True, False], "correctness_llama": None,
         "finish_reasons": None, "correctness_count": 1,
         "messages": [{"role": "user", "content": "Let $a+b=5$ and $a-b=1$. Find $ab$."}]},
    ], [
        {"id": "5e0d2a8e-7c1b-5a6f-9e3d-1b2c3d4e5f60",
         "prompt": "Let $a+b=5$ and $a-b=1$. Find $ab$.", "reference": "6",
         "source": "openr1_math", "reward_name": "math",
         "meta": {"problem_type": "Algebra", "question_type": "math-word-problem",
                  "source": "olympiads"}},
    ]),
    "math500": ("math500-test.jsonl", [
        {"problem": "Convert the point $(0,3)$ in rectangular coordinates to polar coordinates.",
         "solution": "We have $r = 3$ ... $\\boxed{\\left( 3, \\frac{\\pi}{2} \\right)}$",
         "answer": "\\left( 3, \\frac{\\pi}{2} \\right)", "subject": "Precalculus", "level": 2,
         "unique_id": "test/precalculus/807.json"},
        {"problem": "What is $1+2+\\cdots+10$?", "solution": "$\\boxed{55}$", "answer": "55",
         "subject": "Algebra", "level": 1, "unique_id": "test/algebra/1.json"},
    ], [
        {"id": "test/precalculus/807.json",
         "prompt": "Convert the point $(0,3)$ in rectangular coordinates to polar coordinates.",
         "reference": "\\left( 3, \\frac{\\pi}{2} \\right)", "source": "math500",
         "reward_name": "math", "meta": {"subject": "Precalculus", "level": 2}},
        {"id": "test/algebra/1.json", "prompt": "What is $1+2+\\cdots+10$?", "reference": "55",
         "source": "math500", "reward_name": "math", "meta": {"subject": "Algebra", "level": 1}},
    ]),
    # AIME 2024 as some mirrors spell it: capitalised fields, integer id.
    "aime24": ("aime-2024.jsonl", [
        {"ID": "2024-I-1", "Problem": "Every morning Aya goes for a $9$-kilometer-long walk.",
         "Solution": "...", "Answer": 204},
    ], [
        {"id": "2024-I-1", "prompt": "Every morning Aya goes for a $9$-kilometer-long walk.",
         "reference": "204", "source": "aime24", "reward_name": "math", "meta": {}},
    ]),
    # AIME 2025 as others spell it: question/answer, a year column.
    "aime25": ("aime-2025.parquet", [
        {"id": 0, "question": "Find the sum of all integer bases $b>9$ for which $17_b$ divides "
         "$97_b$.", "answer": "70", "year": 2025},
    ], [
        {"id": "0", "prompt": "Find the sum of all integer bases $b>9$ for which $17_b$ divides "
         "$97_b$.", "reference": "70", "source": "aime25", "reward_name": "math",
         "meta": {"year": 2025}},
    ]),
    "amc23": ("amc.jsonl", [
        {"id": 7, "problem": "How many positive divisors does $36$ have?", "answer": 9.0,
         "url": "https://artofproblemsolving.com/wiki/index.php/2023_AMC_12A_Problems/Problem_7"},
    ], [
        {"id": "7", "prompt": "How many positive divisors does $36$ have?", "reference": "9",
         "source": "amc23", "reward_name": "math",
         "meta": {"url": "https://artofproblemsolving.com/wiki/index.php/"
                         "2023_AMC_12A_Problems/Problem_7"}},
    ]),
    # Minerva: one record with an answer, one whose answer is only boxed in the solution.
    "minerva": ("minerva-math.jsonl", [
        {"question": "A star has parallax $0.1''$. What is its distance in parsecs?",
         "answer": "10", "type": "Introduction to Astronomy (8.282J Spring 2006)", "idx": 3},
        {"problem": "Compute $\\{2\\}$ squared.", "solution": "So it is $\\boxed{\\{4\\}}$."},
    ], [
        {"id": "3", "prompt": "A star has parallax $0.1''$. What is its distance in parsecs?",
         "reference": "10", "source": "minerva", "reward_name": "math",
         "meta": {"type": "Introduction to Astronomy (8.282J Spring 2006)"}},
        {"id": "minerva-2", "prompt": "Compute $\\{2\\}$ squared.", "reference": "\\{4\\}",
         "source": "minerva", "reward_name": "math", "meta": {"answer_from": "solution"}},
    ]),
    "olympiadbench": ("olympiadbench.jsonl", [
        {"id": 1606, "subfield": "Combinatorics", "context": None,
         "question": "Find all pairs $(x, y)$ of integers with $x+y=2$ and $xy=1$.",
         "solution": ["Both are 1."], "final_answer": ["$(1,1)$"], "is_multiple_answer": False,
         "unit": None, "answer_type": "Tuple", "error": None},
        {"id": 1607, "question": "Give $a$ and $b$.", "final_answer": ["$a=1$", "$b=2$"],
         "is_multiple_answer": True, "subfield": "Algebra"},
    ], [
        {"id": "1606", "prompt": "Find all pairs $(x, y)$ of integers with $x+y=2$ and $xy=1$.",
         "reference": "$(1,1)$", "source": "olympiadbench", "reward_name": "math",
         "meta": {"subfield": "Combinatorics", "answer_type": "Tuple"}},
        {"id": "1607", "prompt": "Give $a$ and $b$.", "reference": "$a=1$, $b=2$",
         "source": "olympiadbench", "reward_name": "math", "meta": {"subfield": "Algebra"}},
    ]),
    "code": ("code.jsonl", [
        # APPS / TACO: input_output as JSON text.
        {"problem_id": 11, "question": "Read n and print n*2.",
         "input_output": json.dumps({"inputs": ["3\n", "5\n"], "outputs": ["6\n", "10\n"]}),
         "difficulty": "introductory"},
        # CodeContests: public/private tests as {input: [...], output: [...]}.
        {"name": "sum", "description": "Print a+b.",
         "public_tests": {"input": ["1 2\n"], "output": ["3\n"]},
         "private_tests": {"input": ["2 2\n"], "output": ["4\n"]}},
        # rLLM / LiveCodeBench style: tests as a JSON list of {input, output, testtype}.
        {"problem": "Echo the line.", "tests": json.dumps(
            [{"input": "hi\n", "output": "hi\n", "testtype": "stdin"}])},
        # MBPP: asserts plus setup code.
        {"task_id": 2, "text": "Write add(a, b).", "test_list": ["assert add(1, 2) == 3"],
         "test_setup_code": "import math"},
        # Already in the project's own form.
        {"id": "own-1", "question": "Define f() returning 1 and print f().",
         "stdin_stdout": [["", "1\n"]], "asserts": "assert f() == 1"},
    ], [
        {"id": "11", "prompt": "Read n and print n*2.",
         "reference": {"stdin_stdout": [["3\n", "6\n"], ["5\n", "10\n"]]}, "source": "code",
         "reward_name": "code", "meta": {"difficulty": "introductory"}},
        {"id": "code-2", "prompt": "Print a+b.",
         "reference": {"stdin_stdout": [["1 2\n", "3\n"], ["2 2\n", "4\n"]]}, "source": "code",
         "reward_name": "code", "meta": {}},
        {"id": "code-3", "prompt": "Echo the line.", "reference": {"stdin_stdout": [["hi\n",
                                                                                      "hi\n"]]},
         "source": "code", "reward_name": "code", "meta": {}},
        {"id": "2", "prompt": "Write add(a, b).",
         "reference": {"asserts": "import math\nassert add(1, 2) == 3"}, "source": "code",
         "reward_name": "code", "meta": {}},
        {"id": "own-1", "prompt": "Define f() returning 1 and print f().",
         "reference": {"stdin_stdout": [["", "1\n"]], "asserts": "assert f() == 1"},
         "source": "code", "reward_name": "code", "meta": {}},
    ]),
}

FIXTURE_NAMES = tuple(_SETS)

TOKENIZER_CORPUS = (
    "Question: What is 12 + 7?\nAnswer: 19",
    "Please reason step by step, and put your final answer within \\boxed{}.",
    "The quick brown fox jumps over the lazy dog. Pack my box with five dozen liquor jugs!",
    "Let $a+b=5$ and $a-b=1$. Find $ab$. So $a=3$, $b=2$ and $\\boxed{6}$.",
    "def add(a, b):\n    return a + b\n\nprint(add(1, 2))",
    "0123456789 +-*/=()[]{}<>^_\\$%#@&|~`'\";:,.?!",
    "ABCDEFGHIJKLMNOPQRSTUVWXYZ abcdefghijklmnopqrstuvwxyz",
)


def _write(path: str, records: list[dict[str, Any]]) -> None:
    if path.endswith(".parquet"):
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(records), path)
    else:
        with open(path, "w", encoding="utf-8") as f:
            for r in records:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")


def write_fixtures(out_dir: str | os.PathLike, names=FIXTURE_NAMES) -> dict[str, dict[str, Any]]:
    """Write the fixture files; returns {dataset name: {"files": [path], "expected": [examples
    in file order]}} (dataset names are registry names)."""
    out_dir = os.fspath(out_dir)
    os.makedirs(out_dir, exist_ok=True)
    out = {}
    for name in names:
        file_name, records, expected = _SETS[name]
        path = os.path.join(out_dir, file_name)
        _write(path, records)
        out[name] = {"files": [path], "expected": json.loads(json.dumps(expected))}
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m tseeds_jax.data.fixtures OUT_DIR", file=sys.stderr)
        return 2
    for name, item in write_fixtures(argv[0]).items():
        print(name, item["files"][0])
    with open(os.path.join(argv[0], "tokenizer_corpus.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(TOKENIZER_CORPUS) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
