"""Reward registry, batching, the never-raise contract and the reasoning_gym reward."""

import math
import time

import pytest
import reasoning_gym

from tseeds_jax import rewards
from tseeds_jax.rewards import extract
from tseeds_jax.rewards.registry import RewardResult


@rewards.register("_test_sleep", isolation="process", hard_timeout_s=4.0)  # incl. loading this file
def _sleep_reward(response, reference):
    time.sleep(float(response))
    return 1.0


@rewards.register("_test_inline", isolation="inline")
def _inline_reward(response, reference):
    return (
        {"nan": math.nan, "big": 1.7, "neg": -2, "raise": None, "bad": "x"}.get(response, 0.25)
        if response != "raise"
        else 1 / 0
    )


def _entry(name, seed=5):
    return reasoning_gym.create_dataset(name, size=1, seed=seed)[0]


def test_registry():
    assert {"math", "code", "reasoning_gym"} <= set(rewards.names())
    assert rewards.get("math").isolation == "process"
    with pytest.raises(ValueError, match="unknown reward 'nope'"):
        rewards.score("nope", "x", "y")
    with pytest.raises(ValueError, match="isolation"):
        rewards.register("x", isolation="gpu")
    with pytest.raises(ValueError, match="2 responses but 1 references"):
        rewards.score_batch("math", ["a", "b"], ["1"])


def test_inline_results_are_normalised():
    assert rewards.score_result("_test_inline", "nan", None).reason == "error"
    assert rewards.score("_test_inline", "big", None) == 1.0
    assert rewards.score("_test_inline", "neg", None) == 0.0
    assert rewards.score_result("_test_inline", "raise", None).reason == "error"
    assert rewards.score_result("_test_inline", "bad", None).reason == "error"
    assert rewards.score("_test_inline", "other", None) == 0.25


def test_hard_timeout_kills_worker_and_pool_recovers():
    t0 = time.monotonic()
    res = rewards.score_result("_test_sleep", "30", None)
    assert (res.score, res.reason) == (0.0, "timeout")
    assert time.monotonic() - t0 < 4.0 + 5.0  # deadline + worker start-up
    assert rewards.score("_test_sleep", "0", None) == 1.0
    assert rewards.score("math", "\\boxed{2}", "2") == 1.0


@pytest.mark.parametrize("dataset", ["chain_sum", "basic_arithmetic"])
def test_reasoning_gym_right_and_wrong(dataset):
    e = _entry(dataset)
    wrong = str(int(e["answer"]) + 1)
    assert rewards.score("reasoning_gym", f"think...\n<answer>{e['answer']}</answer>", e) == 1.0
    assert rewards.score("reasoning_gym", f"<answer>{wrong}</answer>", e) == 0.0
    assert rewards.score("reasoning_gym", f"so \\boxed{{{e['answer']}}}", e, extract="boxed") == 1.0
    assert rewards.score("reasoning_gym", f"steps\n# {e['answer']}", e, extract="marker", marker="#") == 1.0
    assert (
        rewards.score(
            "reasoning_gym", f"<answer>{wrong}</answer>\n# {e['answer']}", e, extract="marker", marker="#"
        )
        == 1.0
    )
    res = rewards.score_batch(
        "reasoning_gym", [f"<answer>{e['answer']}</answer>", "<answer>x</answer>"], [e, e], max_workers=2
    )
    assert [r.reason for r in res] == ["correct", "wrong"]


GARBAGE = [
    ("math", None, "1"),
    ("math", "\\boxed{1}", None),
    ("math", b"bytes", "1"),
    ("code", None, {"asserts": "assert True"}),
    ("code", "print(1)", None),
    ("code", "print(1)", []),
    ("code", "print(1)", {"stdin_stdout": "nope"}),
    ("code", "print(1)", {"stdin_stdout": [[1, 2]]}),
    ("code", "print(1)", {"asserts": 5}),
    ("code", "print(1)", {}),
    ("reasoning_gym", None, _entry("chain_sum")),
    ("reasoning_gym", "<answer>1</answer>", {}),
    ("reasoning_gym", "<answer>1</answer>", {"metadata": {"source_dataset": "no_such_dataset"}}),
    ("reasoning_gym", "<answer>1</answer>", "not a dict"),
]


@pytest.mark.parametrize("name,response,reference", GARBAGE)
def test_garbage_never_raises(name, response, reference):
    res = rewards.score_result(name, response, reference)
    assert isinstance(res, RewardResult) and res.score == 0.0
    assert res.reason in {"invalid_input", "error", "no_answer"}, res


def test_bad_options_and_unpicklable_inputs_never_raise():
    assert rewards.score_result("code", "print(1)", {"asserts": "pass"}, mode="bogus").reason == "error"
    assert rewards.score_result("reasoning_gym", "x", _entry("chain_sum"), extract="bogus").reason == "error"
    assert rewards.score_result("math", "\\boxed{1}", "1", no_such_option=1).reason == "error"
    assert rewards.score_result("math", lambda: 0, "1").reason == "invalid_input"


def test_summarize_counts_reasons():
    rs = [RewardResult(1.0, "correct"), RewardResult(0.0, "timeout"), RewardResult(0.0, "timeout")]
    m = rewards.summarize(rs)
    assert m == {
        "reward/mean": pytest.approx(1 / 3),
        "reward/reason/correct": 1.0,
        "reward/reason/timeout": 2.0,
    }
    assert rewards.score_batch("math", [], []) == []


def test_extractors():
    assert extract.answer_tag("<answer>1</answer> x <answer> 2 </answer>") == "2"
    assert extract.extract_answer("a\n#### 5", "auto") == "5"
    assert extract.extract_answer("just 7", "auto") == "just 7"
    assert extract.code_block("x\n```python\nprint(1)\n```\n```py\nprint(2)\n```") == "print(2)\n"
    assert extract.code_block("print(3)") == "print(3)"
    with pytest.raises(ValueError, match="extract must be one of"):
        extract.extract_answer("x", "nope")


def _rewards_imports() -> dict[str, set[str]]:
    """module -> the tseeds_jax.rewards modules it imports, at module level or inside a function
    ("__init__" for the package itself)."""
    import ast
    from pathlib import Path

    pkg = Path(rewards.__file__).parent
    mods = {p.stem for p in pkg.glob("*.py")}
    graph = {}
    for p in pkg.glob("*.py"):
        deps = set()
        for n in ast.walk(ast.parse(p.read_text())):
            if isinstance(n, ast.ImportFrom) and n.module == "tseeds_jax.rewards":
                deps |= {a.name if a.name in mods else "__init__" for a in n.names}
            elif isinstance(n, ast.ImportFrom) and (n.module or "").startswith("tseeds_jax.rewards."):
                deps.add(n.module.split(".")[2])
            elif isinstance(n, ast.ImportFrom) and n.module == "tseeds_jax":
                deps |= {"__init__" for a in n.names if a.name == "rewards"}
            elif isinstance(n, ast.Import):
                deps |= {a.name.split(".")[2] if a.name.count(".") >= 2 else "__init__"
                         for a in n.names if a.name.startswith("tseeds_jax.rewards")}
        graph[p.stem] = deps
    return graph


def test_rewards_modules_import_no_cycle_and_not_the_package():
    graph = _rewards_imports()
    assert {"_pool", "registry", "sandbox", "health"} <= set(graph)
    importers_of_package = sorted(m for m, deps in graph.items() if "__init__" in deps and m != "__init__")
    assert importers_of_package == [], importers_of_package
    state: dict[str, int] = {}

    def visit(m, path):  # depth-first: meeting a module still on the path is a cycle
        state[m] = 1
        for d in sorted(graph.get(m, ())):
            assert state.get(d) != 1, f"import cycle: {' -> '.join(path + [m, d])}"
            if d not in state:
                visit(d, path + [m])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [])
