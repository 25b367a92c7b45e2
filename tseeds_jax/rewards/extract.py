"""Answer extraction from model responses: boxed answers, final-answer phrases, tags, code blocks.

All functions take the response text and return the extracted string, or None when nothing matches.
"""

from __future__ import annotations

import re
import textwrap

_BOX_RE = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")
_FINAL_RES = [
    re.compile(r"final answer\s*(?:is|:)?\s*[:=]?\s*(.+)", re.IGNORECASE),
    re.compile(r"^\s*#{4}\s*(.+)$", re.MULTILINE),  # GSM8K style "#### 42"
    re.compile(r"\banswer\s*(?:is|:)\s*(.+)", re.IGNORECASE),
]
_ANSWER_TAG_RE = re.compile(r"<answer>\s*(.*?)\s*</answer>", re.DOTALL | re.IGNORECASE)
_CODE_RE = re.compile(r"```[ \t]*(?:python3?|py)[ \t]*\r?\n(.*?)```", re.DOTALL | re.IGNORECASE)


def _braced(text: str, start: int) -> str | None:
    """Contents of the balanced {...} group opening at text[start] (which must be '{')."""
    depth = 0
    for i in range(start, len(text)):
        c = text[i]
        if c == "\\":
            continue  # "\{" and "\}" are escaped braces, not group delimiters
        if c == "{" and (i == 0 or text[i - 1] != "\\"):
            depth += 1
        elif c == "}" and (i == 0 or text[i - 1] != "\\"):
            depth -= 1
            if depth == 0:
                return text[start + 1 : i]
    return None


def last_boxed(text: str) -> str | None:
    """Content of the last complete `\\boxed{...}` (or `\\fbox{...}`, `\\boxed 5`); nested braces ok."""
    if not isinstance(text, str):
        return None
    for m in reversed(list(_BOX_RE.finditer(text))):
        j = m.end()
        while j < len(text) and text[j] == " ":
            j += 1
        if j < len(text) and text[j] == "{":
            inner = _braced(text, j)
            if inner is not None:
                return inner.strip()
        elif j > m.end():  # "\boxed 5": the token after the space
            tok = re.match(r"[^\s$]+", text[j:])
            if tok:
                return tok.group(0)
    return None


def _clean(ans: str) -> str:
    prev = None
    while prev != ans:  # e.g. "$\\frac{7}{2}$." -> "\\frac{7}{2}"
        prev = ans
        ans = re.sub(r"[.\s]+$", "", ans.strip()).strip("$")  # sentence period, math delimiters
    return ans


def final_answer(text: str) -> str | None:
    """The answer of the last "final answer is X" / "#### X" / "answer: X" phrase (its line)."""
    if not isinstance(text, str):
        return None
    for rx in _FINAL_RES:
        matches = list(rx.finditer(text))
        if matches:
            ans = _clean(matches[-1].group(1).splitlines()[0])
            if ans:
                return ans
    return None


def math_answer(text: str) -> tuple[str | None, str]:
    """(answer, how): the last boxed answer, else the final-answer phrase; how is 'boxed'/'phrase'/'none'."""
    boxed = last_boxed(text)
    if boxed:
        return boxed, "boxed"
    phrase = final_answer(text)
    if phrase:
        return phrase, "phrase"
    return None, "none"


def answer_tag(text: str) -> str | None:
    """Content of the last <answer>...</answer> pair."""
    if not isinstance(text, str):
        return None
    matches = _ANSWER_TAG_RE.findall(text)
    return matches[-1] if matches else None


def after_marker(text: str, marker: str) -> str | None:
    """Text after the last occurrence of `marker` (stripped, first line)."""
    if not isinstance(text, str) or not marker or marker not in text:
        return None
    rest = text.rsplit(marker, 1)[1].strip()
    return _clean(rest.splitlines()[0]) if rest else None


EXTRACTORS = ("auto", "answer_tag", "boxed", "marker", "phrase", "raw")


def extract_answer(text: str, method: str = "auto", marker: str = "####") -> str | None:
    """Answer by `method`: 'answer_tag', 'boxed', 'marker' (text after `marker`), 'phrase'
    (final-answer phrase), 'raw' (whole stripped text), or 'auto' = the first that matches of
    answer_tag, boxed, marker, phrase, raw."""
    if method not in EXTRACTORS:
        raise ValueError(f"extract must be one of {EXTRACTORS}, got {method!r}")
    if not isinstance(text, str):
        return None
    table = {
        "answer_tag": lambda: answer_tag(text),
        "boxed": lambda: last_boxed(text),
        "marker": lambda: after_marker(text, marker),
        "phrase": lambda: final_answer(text),
        "raw": lambda: text.strip() or None,
    }
    order = ["answer_tag", "boxed", "marker", "phrase", "raw"] if method == "auto" else [method]
    for m in order:
        ans = table[m]()
        if ans is not None:
            return ans
    return None


_STDIN_RE = re.compile(r"\binput\s*\(|\bstdin\b|\bopen\s*\(\s*0\b|\bfileinput\b")


def _defines(block: str) -> set[str] | None:
    """Top-level names a block defines (functions, classes, assignments, imports); None if it
    does not parse."""
    import ast

    try:
        tree = ast.parse(block)
    except (SyntaxError, ValueError):
        return None
    out: set[str] = set()
    for s in tree.body:
        if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(s.name)
        elif isinstance(s, (ast.Assign, ast.AnnAssign)):
            targets = s.targets if isinstance(s, ast.Assign) else [s.target]
            out |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(s, (ast.Import, ast.ImportFrom)):
            out |= {(a.asname or a.name).split(".")[0] for a in s.names}
    return out


def code_block(text: str, names: set[str] | frozenset[str] = frozenset(), stdin: bool = False) -> str:
    """The program in a response: of its ```python fenced blocks (also ```py / ```python3), the last
    one that defines one of `names` (the functions the tests call), else (`stdin`: a program
    reading its input) the last one that reads stdin, else the last one that parses, else the last
    one; the whole text when there is no such block. A trailing usage example is not the program."""
    # a block indented as a whole (inside a markdown list item) is its dedented text
    blocks = [textwrap.dedent(b) for b in _CODE_RE.findall(text)]
    if not blocks:
        return text
    defined = [_defines(b) for b in blocks]
    for b, d in zip(reversed(blocks), reversed(defined)):
        if names and d and d & set(names):
            return b
    if stdin:
        for b, d in zip(reversed(blocks), reversed(defined)):
            if d is not None and _STDIN_RE.search(b):
                return b
    return next((b for b, d in zip(reversed(blocks), reversed(defined)) if d is not None), blocks[-1])
