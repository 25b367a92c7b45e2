"""Each published format round-trips from a fixture through the tfds builder (array_record, read
with tfds.data_source) and the loader; bad input gives errors naming file, line and field."""

import json

import pytest

from tseeds_jax.data import (
    DataFormatError,
    ExampleLoader,
    UnknownDatasetError,
    get_spec,
    make_source,
    validate_example,
)
from tseeds_jax.data.fixtures import FIXTURE_NAMES, write_fixtures
from tseeds_jax.data.tfds_builder import build_dataset, load_source


@pytest.fixture(scope="module")
def fixtures(tmp_path_factory):
    return write_fixtures(tmp_path_factory.mktemp("fixtures"))


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("tfds")


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_format_round_trip_through_builder_and_loader(name, fixtures, data_dir):
    item = fixtures[name]
    report = build_dataset(name, item["files"], data_dir)
    assert report["rebuilt"] and report["splits"]["train"]["examples"] == len(item["expected"])
    source = load_source(name, data_dir)
    # Stored in file order.
    assert [source[i] for i in range(len(source))] == item["expected"]
    for ex in item["expected"]:
        validate_example(ex)
        assert ex["reward_name"] == get_spec(name).reward_name
    # Through the loader: one shuffled epoch yields every example once.
    loader = ExampleLoader(source, batch_size=1, seed=3, num_epochs=1)
    got = [ex for batch in loader for ex in batch]
    key = lambda ex: json.dumps(ex, sort_keys=True)  # noqa: E731
    assert sorted(map(key, got)) == sorted(map(key, item["expected"]))
    # Built once: a second build with the same files is reused.
    assert build_dataset(name, item["files"], data_dir)["rebuilt"] is False


def test_rebuild_when_source_changes_and_splits(tmp_path, fixtures):
    path = tmp_path / "m.jsonl"
    path.write_text('{"problem": "p1", "answer": "1"}\n')
    build_dataset("aime", path, tmp_path / "d")
    path.write_text('{"problem": "p1", "answer": "1"}\n{"problem": "p2", "answer": "2"}\n')
    assert build_dataset("aime", path, tmp_path / "d")["rebuilt"] is True
    assert len(load_source("aime", tmp_path / "d")) == 2
    report = build_dataset("math500", {"train": fixtures["amc23"]["files"],
                                       "test": fixtures["math500"]["files"]}, tmp_path / "d")
    assert report["splits"]["test"]["examples"] == 2
    assert load_source("math500", tmp_path / "d", "test")[1]["id"] == "test/algebra/1.json"
    with pytest.raises(ValueError, match="no split 'validation'"):
        load_source("math500", tmp_path / "d", "validation")
    with pytest.raises(ValueError, match="not built"):
        load_source("minerva", tmp_path / "d")


def test_make_source_builds_then_loads(tmp_path, fixtures):
    src = make_source("olympiadbench", data_dir=tmp_path, files=fixtures["olympiadbench"]["files"])
    assert src[1]["reference"] == "$a=1$, $b=2$"
    assert len(make_source("olympiadbench", data_dir=tmp_path)) == 2


def _error(tmp_path, name, text, suffix=".jsonl", **kw):
    path = tmp_path / f"bad{suffix}"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(DataFormatError) as info:
        build_dataset(name, path, tmp_path / "d", **kw)
    return str(path), info.value


def test_malformed_jsonl_line(tmp_path):
    path, err = _error(tmp_path, "math500", '{"problem": "a", "answer": "1"}\n{"problem": \n')
    assert (err.path, err.line) == (path, 2)
    assert f"{path}:2" in str(err) and "malformed JSON" in str(err)


def test_missing_field_names_file_line_field(tmp_path):
    path, err = _error(tmp_path, "amc", '{"problem": "a", "answer": "1"}\n\n{"problem": "b"}\n')
    assert (err.path, err.line, err.field) == (path, 3, "answer")
    assert f"{path}:3 field 'answer'" in str(err)
    path, err = _error(tmp_path, "dapo_math_17k",
                       '{"prompt": [{"role": "user", "content": "q"}], "reward_model": {}}\n')
    assert err.field == "reward_model.ground_truth" and err.line == 1
    path, err = _error(tmp_path, "code", '{"question": "q", "tests": "[]"}\n')
    assert err.field == "tests" and "no unit tests" in str(err)
    path, err = _error(tmp_path, "code", '{"question": "q", "input_output": '
                                         '"{\\"fn_name\\": \\"f\\", \\"inputs\\": [], '
                                         '\\"outputs\\": []}"}\n')
    assert err.field == "input_output" and "call-based" in str(err)
    path, err = _error(tmp_path, "math500", '{"problem": "", "answer": "1"}\n')
    assert err.field == "problem" and "empty" in str(err)


def test_empty_file_and_missing_file(tmp_path):
    path, err = _error(tmp_path, "math500", "")
    assert err.path == path and err.line is None and "empty file" in str(err)
    path, err = _error(tmp_path, "math500", "", suffix=".parquet")
    assert err.path == path
    with pytest.raises(DataFormatError, match="file not found"):
        build_dataset("math500", tmp_path / "nope.jsonl", tmp_path / "d")
    path, err = _error(tmp_path, "math500", "x", suffix=".csv")
    assert err.path == path and "unsupported file type" in str(err)


def test_unknown_dataset_name(tmp_path):
    with pytest.raises(UnknownDatasetError, match="unknown dataset name 'gsm9k'.*math500"):
        build_dataset("gsm9k", tmp_path / "x.jsonl", tmp_path / "d")
    with pytest.raises(UnknownDatasetError, match="unknown dataset name"):
        make_source("gsm9k", data_dir=tmp_path)
    with pytest.raises(UnknownDatasetError, match="unknown reasoning-gym task 'nope'"):
        get_spec("rg:nope")


def test_skip_invalid_and_dedupe(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text('{"problem": "a", "answer": "1"}\n{"problem": "b"}\n'
                    '{"problem": "a", "answer": "1"}\n{"problem": "c", "answer": "3"}\n')
    report = build_dataset("aime", path, tmp_path / "d", skip_invalid=True, dedupe=True)
    split = report["splits"]["train"]
    assert (split["examples"], split["invalid"], split["duplicates"]) == (2, 1, 1)
    assert f"{path}:2 field 'answer'" in split["invalid_records"][0]
    assert [ex["prompt"] for ex in load_source("aime", tmp_path / "d").__getitems__([0, 1])] == [
        "a", "c"]
    path.write_text('{"problem": "b"}\n')
    with pytest.raises(DataFormatError, match="no valid examples"):
        build_dataset("aime", path, tmp_path / "d", skip_invalid=True)
