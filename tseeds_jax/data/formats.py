"""Normalise raw records of the published dataset formats to the one example schema.

Example (a plain, JSON-able dict):
  id          str   unique within a dataset (the file's own id when it has one)
  prompt      str   the problem text only; templates (templates.py) add instructions/chat format
  reference   str (math: the ground-truth answer) | dict (code: {"stdin_stdout": [[in, out], ..],
              "asserts": "python source"}, keys present only when non-empty) | dict
              (reasoning_gym: the task entry)
  source      str   dataset name (registry name, or the record's `data_source`)
  reward_name str   "math" | "code" | "reasoning_gym"
  meta        dict  small JSON-able extras (level, subject, year, ...)

Formats: "verl" (DAPO-Math-17k, Openr1-Math-46k: chat-list `prompt`, `reward_model.ground_truth`,
`data_source`, `extra_info.index`), "math" (OpenR1-Math, MATH-500, AIME, AMC, Minerva,
OlympiadBench: problem/question + answer/final_answer, with aliases), "code" (question + unit
tests as stdin/stdout pairs and/or asserts, in the APPS/TACO, CodeContests, rLLM/LiveCodeBench,
open-r1 verifiable-coding and MBPP/HumanEval spellings).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tseeds_jax.data.errors import DataFormatError

Example = dict[str, Any]
EXAMPLE_KEYS = ("id", "prompt", "reference", "source", "reward_name", "meta")
REWARD_NAMES = ("math", "code", "reasoning_gym")

# DAPO-Math-17k wraps every problem in this instruction (its reward reads "Answer: ..."); the
# templates here ask for \boxed{} instead, so the default registry entry strips it.
DAPO_PREFIX = ("Solve the following math problem step by step. The last line of your response "
               "should be of the form Answer: $Answer (without quotes) where $Answer is the "
               "answer to the problem.\n\n")
DAPO_SUFFIX = '\n\nRemember to put your answer on its own line after "Answer:".'

_PROMPT_FIELDS = ("problem", "question", "prompt")
_ANSWER_FIELDS = ("answer", "final_answer", "expected_answer", "ground_truth", "gt")
_ID_FIELDS = ("unique_id", "id", "uuid", "problem_id", "task_id", "question_id", "idx", "index")
_MATH_META = ("subject", "level", "year", "type", "problem_type", "question_type", "url",
              "subfield", "difficulty", "unit", "answer_type", "source", "contest")


class _Loc:
    """Where a record came from; builds errors that name file, line and field."""

    def __init__(self, path: str, line: int):
        self.path, self.line = path, line

    def error(self, message: str, field: str | None = None) -> DataFormatError:
        return DataFormatError(message, path=self.path, line=self.line, field=field)


def _lookup(record: Mapping[str, Any], name: str) -> tuple[bool, Any]:
    """Dotted, case-insensitive field lookup: 'reward_model.ground_truth'."""
    value: Any = record
    for part in name.split("."):
        if not isinstance(value, Mapping):
            return False, None
        if part in value:
            value = value[part]
            continue
        lowered = {str(k).lower(): k for k in value}
        if part.lower() not in lowered:
            return False, None
        value = value[lowered[part.lower()]]
    return value is not None, value


def _field(record, names: Sequence[str], loc: _Loc, *, required: bool = True) -> Any:
    for name in names:
        found, value = _lookup(record, name)
        if found:
            return value
    if required:
        raise loc.error(f"missing required field (looked for {list(names)}; record has "
                        f"{sorted(map(str, record))})", field=names[0])
    return None


def _text(value: Any, loc: _Loc, field: str, *, allow_empty: bool = False) -> str:
    if isinstance(value, bool) or value is None:
        raise loc.error(f"expected text, got {value!r}", field=field)
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # AMC answers are stored as floats like 142.0
    if isinstance(value, (int, float)):
        value = str(value)
    if not isinstance(value, str):
        raise loc.error(f"expected text, got {type(value).__name__}", field=field)
    if not allow_empty and not value.strip():
        raise loc.error("empty text", field=field)
    return value


def _prompt_text(value: Any, loc: _Loc, field: str, meta: dict) -> str:
    """A prompt given as text or as a chat list; from a chat list, the user turns are the prompt
    and a system turn is kept in meta."""
    if isinstance(value, str):
        return _text(value, loc, field)
    if isinstance(value, Sequence) and value and all(isinstance(m, Mapping) for m in value):
        users = [m.get("content") for m in value if m.get("role") == "user"]
        systems = [m.get("content") for m in value if m.get("role") == "system"]
        if not users:
            raise loc.error("chat prompt has no user message", field=field)
        if systems:
            meta["system_prompt"] = "\n\n".join(map(str, systems))
        return _text("\n\n".join(map(str, users)), loc, field)
    raise loc.error(f"expected text or a chat list of {{role, content}}, got {value!r:.80}",
                    field=field)


def _answer_text(value: Any, loc: _Loc, field: str) -> str:
    if isinstance(value, (list, tuple)):  # OlympiadBench final_answer: ["$x$"] or several parts
        if not value:
            raise loc.error("empty answer list", field=field)
        return ", ".join(_text(v, loc, field) for v in value)
    return _text(value, loc, field)


def last_boxed(text: str) -> str | None:
    """Content of the last \\boxed{...} (or \\fbox{...}) in `text`, braces matched; None if none."""
    start = max(text.rfind("\\boxed{"), text.rfind("\\fbox{"))
    if start < 0:
        return None
    i = text.index("{", start)
    depth = 0
    for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[i + 1:j]
    return None


def _json_scalar(v: Any) -> bool:
    return v is None or isinstance(v, (str, int, float, bool))


def _make(loc: _Loc, ident: Any, prompt: str, reference: Any, source: str, reward_name: str,
          meta: dict) -> Example:
    ident = f"{source}-{loc.line}" if ident is None else _text(ident, loc, "id")
    return {"id": ident, "prompt": prompt, "reference": reference, "source": source,
            "reward_name": reward_name, "meta": meta}


def normalize_verl(record: Mapping[str, Any], loc: _Loc, source: str, *,
                   strip_dapo_instruction: bool = False) -> Example:
    meta: dict[str, Any] = {}
    prompt = _prompt_text(_field(record, ["prompt"], loc), loc, "prompt", meta)
    if strip_dapo_instruction and prompt.startswith(DAPO_PREFIX) and prompt.endswith(DAPO_SUFFIX):
        prompt = prompt[len(DAPO_PREFIX):len(prompt) - len(DAPO_SUFFIX)]
    answer = _answer_text(_field(record, ["reward_model.ground_truth"], loc), loc,
                          "reward_model.ground_truth")
    data_source = _field(record, ["data_source"], loc, required=False)
    if data_source is not None:
        meta["data_source"] = _text(data_source, loc, "data_source")
    ident = _field(record, ["extra_info.index", "extra_info.id", *_ID_FIELDS], loc,
                   required=False)
    return _make(loc, ident, prompt, answer, source, "math", meta)


def normalize_math(record: Mapping[str, Any], loc: _Loc, source: str, *,
                   answer_from_solution: bool = True) -> Example:
    meta = {k: record[k] for k in record if str(k).lower() in _MATH_META
            and _json_scalar(record[k]) and record[k] is not None}
    prompt = _prompt_text(_field(record, _PROMPT_FIELDS, loc), loc, "problem", meta)
    answer = _field(record, _ANSWER_FIELDS, loc, required=False)
    if answer is None:
        solution = _field(record, ["solution"], loc, required=False)
        boxed = last_boxed(solution) if answer_from_solution and isinstance(solution, str) else None
        if boxed is None:
            raise loc.error(f"missing required field (looked for {list(_ANSWER_FIELDS)}, or a "
                            f"\\boxed{{}} answer in 'solution'; record has "
                            f"{sorted(map(str, record))})", field="answer")
        answer, meta["answer_from"] = boxed, "solution"
    field = next((n for n in _ANSWER_FIELDS if _lookup(record, n)[0]), "answer")
    answer = _answer_text(answer, loc, field)
    return _make(loc, _field(record, _ID_FIELDS, loc, required=False), prompt, answer, source,
                 "math", meta)


def _maybe_json(value: Any, loc: _Loc, field: str) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError as e:
            raise loc.error(f"field holds malformed JSON text ({e.msg} at column {e.colno})",
                            field=field) from e
    return value


def _io_text(v: Any, loc: _Loc, field: str) -> str:
    if isinstance(v, list):  # some sets store stdin/stdout as a list of lines
        return "\n".join(map(str, v))
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return str(v)
    if not isinstance(v, str):
        raise loc.error(f"test input/output must be text, got {type(v).__name__}", field=field)
    return v


def _tests_from(value: Any, loc: _Loc, field: str) -> list[list[str]]:
    """stdin/stdout pairs from the spellings in use (see module docstring)."""
    value = _maybe_json(value, loc, field)
    if isinstance(value, Mapping):
        if "test_cases" in value:  # open-r1 verification_info
            return _tests_from(value["test_cases"], loc, field + ".test_cases")
        if value.get("fn_name"):
            raise loc.error("call-based tests (fn_name) are not supported; only stdin/stdout "
                            "pairs and asserts", field=field)
        ins = value.get("inputs", value.get("input"))
        outs = value.get("outputs", value.get("output"))
        if not isinstance(ins, list) or not isinstance(outs, list) or len(ins) != len(outs):
            raise loc.error("expected inputs/outputs lists of equal length", field=field)
        return [[_io_text(i, loc, field), _io_text(o, loc, field)] for i, o in zip(ins, outs)]
    if isinstance(value, list):
        pairs = []
        for k, case in enumerate(value):
            if isinstance(case, (list, tuple)) and len(case) == 2:
                pairs.append([_io_text(case[0], loc, field), _io_text(case[1], loc, field)])
                continue
            if not isinstance(case, Mapping) or "input" not in case or "output" not in case:
                raise loc.error(f"test {k}: expected {{input, output}} or [input, output]",
                                field=field)
            kind = case.get("testtype", case.get("type", "stdin"))
            if kind not in ("stdin", "stdin_stdout", "stdio"):
                raise loc.error(f"test {k}: test type {kind!r} is not supported; only "
                                "stdin/stdout pairs and asserts", field=field)
            pairs.append([_io_text(case["input"], loc, field), _io_text(case["output"], loc,
                                                                          field)])
        return pairs
    raise loc.error(f"cannot read unit tests from {type(value).__name__}", field=field)


_PAIR_FIELDS = ("stdin_stdout", "input_output", "tests", "test_cases", "verification_info",
                "public_tests", "private_tests", "generated_tests")


def normalize_code(record: Mapping[str, Any], loc: _Loc, source: str) -> Example:
    meta: dict[str, Any] = {}
    prompt = _prompt_text(_field(record, ("question", "problem", "prompt", "text",
                                          "description"), loc), loc, "question", meta)
    pairs: list[list[str]] = []
    for name in _PAIR_FIELDS:
        found, value = _lookup(record, name)
        if found:
            pairs += _tests_from(value, loc, name)
    asserts: list[str] = []
    found, value = _lookup(record, "asserts")
    if found:
        asserts.append(_text(value, loc, "asserts", allow_empty=True))
    found, value = _lookup(record, "test_list")  # MBPP
    if found:
        if not isinstance(value, list) or not all(isinstance(a, str) for a in value):
            raise loc.error("expected a list of assert statements", field="test_list")
        setup = [_field(record, [k], loc, required=False) for k in ("test_setup_code",
                                                                     "test_imports")]
        setup = [s if isinstance(s, str) else "\n".join(s) for s in setup if s]
        asserts.append("\n".join([*setup, *value]))
    found, value = _lookup(record, "test")  # HumanEval: def check(candidate) + entry_point
    humaneval: dict[str, str] = {}
    if found and isinstance(value, str):
        entry = _field(record, ["entry_point"], loc, required=False)
        if "def check(" in value and not entry and value.count("check(") < 2:
            raise loc.error("the test defines check(candidate) but nothing calls it and the record has "
                            "no 'entry_point' to call it with", field="entry_point")
        asserts.append(value + (f"\n\ncheck({entry})\n" if entry and "def check(" in value
                                else ""))
        if entry and "def check(" in value:
            # the grader gives the test its own copy of the prompt's helpers (HumanEval/38's
            # encode_cyclic): a program that redefines one changes only its own
            humaneval["entry_point"] = entry
            prompt = record.get("prompt")
            if isinstance(prompt, str) and prompt.strip():
                humaneval["helpers"] = prompt
    asserts = [a for a in asserts if a.strip()]
    if not pairs and not asserts:
        raise loc.error(f"no unit tests found (looked for {list(_PAIR_FIELDS)}, 'asserts', "
                        "'test_list', 'test')", field="tests")
    reference: dict[str, Any] = {}
    if pairs:
        reference["stdin_stdout"] = pairs
    if asserts:
        reference["asserts"] = "\n\n".join(asserts)
        reference.update(humaneval)
    for k in ("difficulty", "starter_code", "language", "url", "contest", "platform"):
        v = _field(record, [k], loc, required=False)
        if v is not None and _json_scalar(v):
            meta[k] = v
    return _make(loc, _field(record, _ID_FIELDS, loc, required=False), prompt, reference,
                 source, "code", meta)


FORMATS: dict[str, tuple[Callable[..., Example], str]] = {
    "verl": (normalize_verl, "math"),
    "math": (normalize_math, "math"),
    "code": (normalize_code, "code"),
}


def normalize(fmt: str, record: Mapping[str, Any], path: str, line: int, source: str,
              **options) -> Example:
    """Normalise one raw record of format `fmt`; DataFormatError names file, line and field."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown record format {fmt!r}; known: {sorted(FORMATS)}")
    return FORMATS[fmt][0](record, _Loc(path, line), source, **options)


def validate_example(example: Mapping[str, Any]) -> None:
    """Check the schema of one example (for sources built elsewhere, e.g. by another package)."""
    missing = [k for k in EXAMPLE_KEYS if k not in example]
    if missing:
        raise ValueError(f"example {example.get('id')!r} lacks keys {missing}")
    if not isinstance(example["prompt"], str) or not example["prompt"]:
        raise ValueError(f"example {example['id']!r}: prompt must be non-empty str")
    if example["reward_name"] not in REWARD_NAMES:
        raise ValueError(f"example {example['id']!r}: reward_name {example['reward_name']!r} "
                         f"not in {REWARD_NAMES}")
