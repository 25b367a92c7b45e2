"""Every shell command shown in README.md and docs/*.md is run or checked here (issue 17).

A fenced block whose info string is bash, sh, shell or console is a *shell block*. The line right
above its opening fence may hold a marker that says what this test does with it:

  (none)                          run it, in a scratch copy of the repository (nothing is written
                                  into the checkout); see "How blocks run" below
  <!-- doc-test: manual -->       cannot or should not run here (gcloud against a real project, a
                                  real HF folder, a long training run): the config files it names
                                  must exist and its `--config.a.b=v` overrides must parse against
                                  the config (and pass the config's own validation); its
                                  `tpu_scripts/*.sh` commands whose --env files are the doc's
                                  `file` blocks must pass a `--dry-run`
  <!-- doc-test: output -->       shows output, not commands: not run
  <!-- doc-test: file NAME -->    the content of file NAME (e.g. an env file): written as NAME into
                                  the scratch copy before the document's blocks run; the configs it
                                  names must exist
  <!-- doc-test: ci -->           the README's two set-up commands: they are CI's own command
                                  (.ci/run), so this test does not re-install; it checks that the
                                  test command is .ci/run's verbatim and that the main job installs
                                  the runtime set only (tests/test_wheel_install.py runs that
                                  install in a scratch venv)

How blocks run: bash/sh/shell blocks run as one `bash -e -o pipefail` script, with `tseeds` and
`python` of this interpreter first on PATH and no emulated-device XLA flags (a user's shell).
`tseeds train` commands run with `--config.steps=2` (replacing the block's step count). console
blocks: each `$ COMMAND` line runs and its stdout must equal the lines shown under it, up to the
scratch directory (shown as /path/to) and UTC timestamps like 20261130T035127Z. A block that does
not finish within BLOCK_TIMEOUT_S fails: mark it manual.

An unmarked block that cannot run fails, so a new block is either run or explicitly marked.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.xla_env import child_xla_flags

ROOT = Path(__file__).resolve().parents[1]
SHELL_INFOS = frozenset({"bash", "sh", "shell", "console"})
MARKERS = frozenset({"manual", "output", "file", "ci"})
BLOCK_TIMEOUT_S = 300
TRAIN_STEPS = 2

_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
_MARKER = re.compile(r"^\s*<!--\s*doc-test:\s*(?P<kind>\S+)(?:\s+(?P<arg>\S+))?\s*-->\s*$")
_STAMP = re.compile(r"\b\d{8}T\d{6}Z\b")
_CONFIG_PATH = re.compile(r"(?<![\w/.-])(configs/[\w.-]+\.py)(?::[\w-]+)?")


@dataclass(frozen=True)
class Block:
    doc: str  # path relative to the repository root
    line: int  # 1-based line of the opening fence
    info: str  # first word of the info string, lower case
    text: str  # content, with the fence's indentation removed
    marker: str | None = None
    marker_arg: str | None = None

    @property
    def id(self) -> str:
        return f"{self.doc}:{self.line}"

    @property
    def is_shell(self) -> bool:
        return self.info in SHELL_INFOS


class DocError(ValueError):
    pass


def parse_blocks(text: str, doc: str) -> list[Block]:
    """Fenced blocks of a markdown text (CommonMark fences, indented ones included) with their
    doc-test markers. Raises DocError for an unclosed fence, an unknown marker or a marker that is
    not directly above an opening fence."""
    lines = text.splitlines()
    blocks: list[Block] = []
    markers_used: set[int] = set()
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m or (m.group("fence")[0] == "`" and "`" in m.group("info")):
            i += 1
            continue
        indent, fence = len(m.group("indent")), m.group("fence")
        info = (m.group("info").split() or [""])[0].lower()
        j = i + 1
        while j < len(lines):
            c = _FENCE.match(lines[j])
            if (c and c.group("fence")[0] == fence[0] and len(c.group("fence")) >= len(fence)
                    and not c.group("info").strip()):
                break
            j += 1
        if j == len(lines):
            raise DocError(f"{doc}:{i + 1}: fence {fence!r} is never closed")
        body = "\n".join(ln[indent:] if ln[:indent].strip() == "" else ln.lstrip()
                         for ln in lines[i + 1 : j])
        kind = arg = None
        if i > 0 and (mk := _MARKER.match(lines[i - 1])):
            kind, arg = mk.group("kind"), mk.group("arg")
            markers_used.add(i - 1)
        blocks.append(Block(doc, i + 1, info, body, kind, arg))
        i = j + 1
    for n, line in enumerate(lines):
        mk = _MARKER.match(line)
        if mk and n not in markers_used:
            raise DocError(f"{doc}:{n + 1}: doc-test marker is not on the line right above a fence")
    for b in blocks:
        if b.marker is None:
            continue
        if b.marker not in MARKERS:
            raise DocError(f"{b.id}: unknown doc-test marker {b.marker!r} (known: {sorted(MARKERS)})")
        if (b.marker == "file") != (b.marker_arg is not None):
            raise DocError(f"{b.id}: `doc-test: file NAME` takes exactly one name; "
                           f"{b.marker!r} takes none")
        if not b.is_shell:
            raise DocError(f"{b.id}: doc-test marker on a {b.info or 'plain'!r} block "
                           "(markers are for bash/sh/shell/console blocks)")
    return blocks


def doc_paths() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def all_blocks() -> list[Block]:
    out = []
    for path in doc_paths():
        out += parse_blocks(path.read_text(), str(path.relative_to(ROOT)))
    return out


def _safe_blocks() -> list[Block]:
    # Collection must not crash on a malformed doc: test_docs_parse reports it.
    try:
        return [b for b in all_blocks() if b.is_shell]
    except DocError:
        return []


SHELL_BLOCKS = _safe_blocks()


# ---- shell text helpers -------------------------------------------------------------------------
def logical_lines(text: str) -> list[str]:
    """Lines with backslash continuations joined; blank lines and whole-line comments dropped."""
    out, cur = [], ""
    for line in text.splitlines():
        if line.rstrip().endswith("\\"):
            cur += line.rstrip()[:-1] + " "
            continue
        cur += line
        if cur.strip() and not cur.lstrip().startswith("#"):
            out.append(cur.strip())
        cur = ""
    if cur.strip():
        out.append(cur.strip())
    return out


def commands(line: str) -> list[list[str]]:
    """Simple commands of one logical line as token lists (split at && || ; |, comments dropped)."""
    lex = shlex.shlex(line, posix=True, punctuation_chars=";&|")
    lex.whitespace_split = True
    out, cur = [], []
    for tok in lex:
        if tok and set(tok) <= set(";&|"):
            if cur:
                out.append(cur)
            cur = []
        else:
            cur.append(tok)
    if cur:
        out.append(cur)
    return out


def _strip_env(tokens: list[str]) -> tuple[dict[str, str], list[str]]:
    env = {}
    while tokens and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", tokens[0]):
        k, v = tokens[0].split("=", 1)
        env[k] = v
        tokens = tokens[1:]
    return env, tokens


def with_train_steps(script: str, steps: int = TRAIN_STEPS) -> str:
    """`tseeds train` commands of a script with their step count set to `steps`."""
    out = []
    for line in logical_lines(script):
        if re.search(r"(^|[;&|]\s*)(\w+=\S*\s+)*tseeds\s+train\b", line):
            line, n = re.subn(r"--config\.steps[= ]\S+", f"--config.steps={steps}", line)
            if not n:
                line = re.sub(r"(tseeds\s+train\b[^;&|]*)", rf"\1 --config.steps={steps}", line,
                              count=1)
        out.append(line)
    return "\n".join(out) + "\n"


def console_steps(text: str) -> list[tuple[str, list[str]]]:
    """[(command, expected stdout lines)] of a console block (`$ ` prompts)."""
    steps: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        elif steps:
            steps[-1][1].append(line)
        elif line.strip():
            raise DocError(f"console block text before the first `$ ` prompt: {line!r}")
    return steps


# ---- the scratch copy ---------------------------------------------------------------------------
_IGNORE = shutil.ignore_patterns(".git", "runs", "dist", "build", "out", ".venv", "__pycache__",
                                 "*.egg-info", ".pytest_cache", "*.pyc")


def _user_env() -> dict[str, str]:
    env = dict(os.environ)
    env["XLA_FLAGS"] = child_xla_flags()  # conftest's 8 emulated devices are the tests', not a user's
    env["JAX_PLATFORMS"] = "cpu"
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def _scratch_copy(tmp_path: Path, doc: str) -> Path:
    """A copy of the repository (no runs, builds or VCS data) holding `doc`'s `file` blocks."""
    d = tmp_path / "repo"
    shutil.copytree(ROOT, d, ignore=_IGNORE)
    for b in SHELL_BLOCKS:
        if b.doc == doc and b.marker == "file":
            (d / b.marker_arg).parent.mkdir(parents=True, exist_ok=True)
            (d / b.marker_arg).write_text(b.text + "\n")
    return d


def _run(script: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-e", "-o", "pipefail", "-c", script], cwd=cwd, env=_user_env(),
                          capture_output=True, text=True, timeout=BLOCK_TIMEOUT_S, check=False)


def _normalise(text: str, workdir: Path) -> list[str]:
    text = text.replace(str(workdir), "/path/to")
    return [_STAMP.sub("<UTC>", ln.rstrip()) for ln in text.strip("\n").splitlines()]


# ---- tests: the parser ---------------------------------------------------------------------------
def test_docs_parse_and_hold_shell_blocks():
    blocks = all_blocks()  # raises DocError on a malformed fence or marker
    shell = [b for b in blocks if b.is_shell]
    assert len(shell) == len(SHELL_BLOCKS)
    assert any(b.doc == "README.md" and b.marker == "ci" for b in shell)
    # Every shell block is run (unmarked) or handled by a marker's test: nothing falls through.
    handled = {b.id for b in SHELL_BLOCKS if b.marker is None or b.marker in MARKERS}
    assert handled == {b.id for b in shell}


def test_parser_fences_markers_and_errors():
    md = "\n".join([
        "text with an inline ```` ```python ```` span",
        "<!-- doc-test: manual -->",
        "```bash",
        "tseeds plan --config configs/tiny_dapo.py",
        "```",
        "1. a list item:",
        "   ```sh",
        "   echo indented \\",
        "       continued",
        "   ```",
        "```",
        "plain block, ignored",
        "```",
    ])
    blocks = parse_blocks(md, "x.md")
    assert [(b.line, b.info, b.marker) for b in blocks] == [(3, "bash", "manual"), (7, "sh", None),
                                                            (11, "", None)]
    assert blocks[1].text == "echo indented \\\n    continued"
    assert logical_lines(blocks[1].text) == ["echo indented      continued"]
    with pytest.raises(DocError, match="never closed"):
        parse_blocks("```bash\necho\n", "x.md")
    with pytest.raises(DocError, match="unknown doc-test marker 'skip'"):
        parse_blocks("<!-- doc-test: skip -->\n```bash\necho\n```\n", "x.md")
    with pytest.raises(DocError, match="not on the line right above"):
        parse_blocks("<!-- doc-test: manual -->\n\n```bash\necho\n```\n", "x.md")
    with pytest.raises(DocError, match="takes exactly one name"):
        parse_blocks("<!-- doc-test: file -->\n```bash\nA=1\n```\n", "x.md")


def test_train_commands_get_two_steps():
    s = with_train_steps("tseeds train --config c.py --config.steps=100 --config.run_dir=r\n"
                         "A=1 tseeds train --config c.py\n"
                         "tseeds plan --config c.py --config.steps=9")
    assert s.splitlines() == ["tseeds train --config c.py --config.steps=2 --config.run_dir=r",
                              "A=1 tseeds train --config c.py --config.steps=2",
                              "tseeds plan --config c.py --config.steps=9"]


# ---- tests: the blocks ---------------------------------------------------------------------------
def _run_block(block: Block, cwd: Path) -> None:
    if block.info != "console":
        proc = _run(with_train_steps(block.text), cwd)
        assert proc.returncode == 0, (f"{block.id} failed (rc {proc.returncode}); fix the doc or "
                                      f"mark the block\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
        return
    steps = console_steps(block.text)
    assert steps, f"{block.id}: console block without a `$ ` command (mark it output)"
    for command, shown in steps:
        proc = _run(with_train_steps(command), cwd)
        assert proc.returncode == 0, f"{block.id}: `{command}` failed\n{proc.stderr[-3000:]}"
        got, want = _normalise(proc.stdout, cwd), _normalise("\n".join(shown), cwd)
        assert got == want, (f"{block.id}: `{command}` prints something else than the doc shows:\n"
                             + "\n".join(got))


def _config_of(tokens: list[str]) -> str | None:
    for k, tok in enumerate(tokens):
        if tok == "--config" and k + 1 < len(tokens):
            return tokens[k + 1]
        if tok.startswith("--config="):
            return tok.split("=", 1)[1]
    return None


def _check_overrides(config: str, overrides: list[str], where: str) -> None:
    from tseeds_jax.rl import train_cli
    from tseeds_jax.rl.config import TrainConfig

    path, _, variant = config.partition(":")
    full = str(ROOT / path) + (f":{variant}" if variant else "")
    try:
        fv = train_cli._parse(["--config", full, *overrides])
    except SystemExit as e:
        raise AssertionError(f"{where}: overrides {overrides} do not parse against {config} "
                             f"(exit {e.code}; the message is in the captured stderr)") from None
    try:
        TrainConfig.from_config(fv.config)
    except (ValueError, TypeError) as e:
        raise AssertionError(f"{where}: {config} with {overrides} is not a valid config: {e}") from e


def _doc_config(doc: str) -> str | None:
    """CONFIG= of the doc's `file` blocks (the env file the scripts read)."""
    found = None
    for b in SHELL_BLOCKS:
        if b.doc == doc and b.marker == "file":
            for line in logical_lines(b.text):
                if line.startswith("CONFIG="):
                    found = line.split("=", 1)[1].strip()
    return found


def _dry_run(tokens: list[str]) -> list[str]:
    """A tpu_scripts command with --dry-run added before its `--` (config overrides)."""
    k = tokens.index("--") if "--" in tokens else len(tokens)
    return [*tokens[:k], "--dry-run", *tokens[k:]]


def _check_manual_block(block: Block, cwd: Path | None) -> None:
    """Configs named exist, overrides parse; with `cwd`, tpu_scripts commands pass a dry run."""
    for path in _CONFIG_PATH.findall(block.text):
        assert (ROOT / path).is_file(), f"{block.id}: names {path}, which does not exist"
    block_config = None
    for line in logical_lines(block.text):
        try:
            cmds = commands(line)
        except ValueError as e:  # unbalanced quotes
            raise AssertionError(f"{block.id}: cannot split {line!r}: {e}") from e
        for tokens in cmds:
            env, tokens = _strip_env(tokens)
            block_config = env.get("CONFIG", block_config)
            overrides = [t for t in tokens if t.startswith("--config.")]
            if overrides:
                config = _config_of(tokens) or block_config or _doc_config(block.doc)
                assert config, (f"{block.id}: `{' '.join(tokens)}` has config overrides but no "
                                "config file (give --config FILE, or CONFIG= in the env file)")
                _check_overrides(config, overrides, f"{block.id}: `{' '.join(tokens[:2])} ...`")
            if cwd is not None and tokens and re.fullmatch(r"tpu_scripts/\w+\.sh", tokens[0]):
                if any(re.search(r"<[A-Za-z ]+>", t) for t in tokens):
                    continue  # a placeholder such as `<the same overrides>`
                envs = [tokens[k + 1] for k, t in enumerate(tokens[:-1]) if t == "--env"]
                if not all((cwd / e).is_file() for e in envs):
                    continue  # its env file is not one of the doc's `file` blocks
                proc = _run(shlex.join(_dry_run(tokens)) + " >/dev/null", cwd)
                assert proc.returncode == 0, (f"{block.id}: `{' '.join(tokens)}` fails its dry "
                                              f"run:\n{proc.stderr[-3000:]}")


DOCS_WITH_BLOCKS = sorted({b.doc for b in SHELL_BLOCKS if b.marker != "ci"})


@pytest.mark.slow
@pytest.mark.parametrize("doc", DOCS_WITH_BLOCKS)
def test_doc_blocks_run_in_order(doc, tmp_path):
    """The doc's shell blocks in order, in one scratch copy, as a reader would follow them."""
    cwd = _scratch_copy(tmp_path, doc)
    for block in (b for b in SHELL_BLOCKS if b.doc == doc):
        if block.marker is None:
            _run_block(block, cwd)
        elif block.marker in ("manual", "file"):
            _check_manual_block(block, cwd)


def ci_commands() -> tuple[str, str]:
    """(main-job command, test command) of the README's `ci` block."""
    (block,) = [b for b in SHELL_BLOCKS if b.marker == "ci"]
    lines = logical_lines(block.text)
    assert len(lines) == 2, f"{block.id}: the set-up block holds exactly two commands, got {lines}"
    return lines[0], lines[1]


def test_readme_setup_commands_are_ci_and_a_lean_main_job():
    (ci,) = [b for b in SHELL_BLOCKS if b.marker == "ci"]
    assert ci.doc == "README.md"
    main_job, test_cmd = ci_commands()
    ci_lines = [ln.strip() for ln in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert test_cmd in ci_lines, ".ci/run must run the README's test command verbatim"
    main_parts, test_parts = main_job.split(" && "), test_cmd.split(" && ")
    assert main_parts[-1].split()[:2] == ["tseeds", "demo"], main_job
    assert test_parts[-1].startswith("python -m pytest"), test_cmd
    # Same set-up, except that the tests add the test set.
    assert "requirements-test.txt" not in main_job
    assert "-r requirements-test.txt" in test_parts[0]
    assert test_parts[0].replace(" -r requirements-test.txt", "") == main_parts[0]
    assert main_parts[1:-1] == test_parts[1:-1]
    assert "pip install --no-deps -e ." in main_parts


def test_manual_check_catches_the_old_tpu_md_errors():
    """The two errors docs/tpu.md once had: a config file that does not exist, an unknown field."""
    bad = Block("x.md", 1, "bash", "tpu_scripts/launch.sh --env pod.env -- "
                "--config.seeds.refresh_every=8", "manual")
    with pytest.raises(AssertionError, match="do not parse"):
        _check_overrides("configs/qwen25_math_7b_dapo17k.py", ["--config.seeds.refresh_every=8"],
                         bad.id)
    _check_overrides("configs/qwen25_math_7b_dapo17k.py", ["--config.seeds.refresh_interval=8"],
                     bad.id)
    missing = Block("x.md", 1, "bash", "CONFIG=configs/paper_qwen25_math_1p5b.py", "file", "pod.env")
    with pytest.raises(AssertionError, match="does not exist"):
        _check_manual_block(missing, None)
