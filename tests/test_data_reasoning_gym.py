"""reasoning-gym tasks: deterministic per seed, JSON-safe references that the task's own verifier
scores (1 for the correct answer), usable by the loader like file datasets."""

import json

import pytest

from tseeds_jax.data import ExampleLoader, UnknownDatasetError, make_source, validate_example
from tseeds_jax.data.reasoning_gym_tasks import ReasoningGymSource, score_answer, to_json_safe

TASKS = {"chain_sum": {"min_terms": 2, "max_terms": 3}, "basic_arithmetic": {},
         "countdown": {"min_numbers": 3, "max_numbers": 4}}


@pytest.mark.parametrize("task", list(TASKS))
def test_deterministic_per_seed_and_verifier_scores_correct_answer(task):
    a = ReasoningGymSource(task, seed=11, size=4, config=TASKS[task])
    b = make_source(f"rg:{task}", seed=11, size=4, config=TASKS[task])
    c = ReasoningGymSource(task, seed=12, size=4, config=TASKS[task])
    examples = [a[i] for i in range(4)]
    assert examples == [b[i] for i in range(4)]
    assert [ex["prompt"] for ex in examples] != [c[i]["prompt"] for i in range(4)]
    for ex in examples:
        validate_example(ex)
        assert ex["reward_name"] == "reasoning_gym" and ex["source"] == f"rg:{task}"
        entry = json.loads(json.dumps(ex["reference"]))  # as stored / sent to reward workers
        assert entry == ex["reference"]
        assert score_answer(entry["answer"], entry) == 1.0
        assert a.score_answer(entry["answer"], entry) == 1.0
        assert score_answer("definitely wrong", entry) < 1.0


def test_loader_over_reasoning_gym_resumes():
    src = ReasoningGymSource("chain_sum", seed=0, size=9)
    loader = ExampleLoader(src, batch_size=3, seed=4)
    first = [e["id"] for e in next(loader)]
    assert first == [e["id"] for e in next(ExampleLoader(src, batch_size=3, seed=4))]
    state = loader.get_state()
    again = ExampleLoader(src, batch_size=3, seed=4)
    again.set_state(state)
    assert [e["id"] for e in next(again)] == [e["id"] for e in next(loader)]


def test_errors():
    with pytest.raises(UnknownDatasetError, match="unknown reasoning-gym task 'not_a_task'"):
        ReasoningGymSource("not_a_task")
    with pytest.raises(ValueError, match="bad config"):
        ReasoningGymSource("chain_sum", size=2, config={"no_such_field": 1})
    with pytest.raises(ValueError, match="inside config"):
        ReasoningGymSource("chain_sum", config={"seed": 1})
    with pytest.raises(IndexError):
        ReasoningGymSource("chain_sum", size=2)[2]
    with pytest.raises(TypeError, match=r"entry\.x\[1\]: set"):
        to_json_safe({"x": [1, {2}]})
    assert to_json_safe({"a": (1, 2.5)}) == {"a": [1, 2.5]}
