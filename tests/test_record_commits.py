"""Records name commits of the repository: a changed tree is a flag beside the hash, a series
record keeps each run's commit, and every commit the shipped records name exists (or the record
says in `commit_note` why it does not)."""

import json
import os
import shutil
import subprocess

import pytest

from tseeds_jax import results_record
from tseeds_jax.demo.bases_record import BasesRecord

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _git(repo, *args):
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                          check=True).stdout.strip()


@pytest.fixture
def repo(tmp_path):
    if shutil.which("git") is None:
        pytest.skip("no git")
    r = tmp_path / "repo"
    r.mkdir()
    _git(r, "init", "-q")
    _git(r, "config", "user.email", "t@t")
    _git(r, "config", "user.name", "t")
    (r / "a.txt").write_text("1\n")
    _git(r, "add", "a.txt")
    _git(r, "commit", "-q", "-m", "one")
    return r


def test_a_changed_tree_is_a_flag_beside_a_real_commit(repo):
    head = _git(repo, "rev-parse", "--short", "HEAD")
    assert results_record.git_state(str(repo)) == (head, False)
    (repo / "a.txt").write_text("2\n")
    assert results_record.git_state(str(repo)) == (head, True)
    assert results_record.git_commit(str(repo)) == head  # never "HASH+dirty"
    assert results_record.run_commit(str(repo)) == f"{head} + uncommitted changes"
    _git(repo, "cat-file", "-e", results_record.git_commit(str(repo)))  # a commit of the repo


def test_make_writes_dirty_beside_the_commit_and_validate_refuses_made_up_names(monkeypatch):
    monkeypatch.setattr(results_record, "git_state", lambda path=None: ("abc1234", True))
    rec = results_record.make("x", "w", "measured", "cmd", backend="cpu")
    assert rec["commit"] == "abc1234" and rec["dirty"] is True
    with pytest.raises(results_record.RecordError, match=r"field 'commit' = 'abc1234\+dirty'"):
        results_record.validate({**rec, "commit": "abc1234+dirty"}, "x.json")
    # a legacy name is accepted only with a note that says what it is
    results_record.validate({**rec, "commit": "abc1234+dirty", "commit_note": "legacy"}, "x")
    results_record.validate({**rec, "commit": "abc1234 (after) vs 5d82e06 (before)"}, "x")


def test_series_record_keeps_each_runs_commit(tmp_path, monkeypatch):
    commits = iter(["1111111", "2222222 + uncommitted changes"])
    monkeypatch.setattr(results_record, "run_commit", lambda path=None: next(commits))
    path = tmp_path / "demo_x_bases.json"
    rec = BasesRecord.open(str(path), name_what="w", command="c", settings={"a": 1},
                           methods=["dapo"], bases=1, commit="1111111", resume=False)
    rec.add_base(0, 0.1, 0.2)
    rec.add_run("dapo", 0, 0, 0.5, None, 1.0)
    rec.add_run("dapo", 0, 1, 0.25, None, 1.0)
    got = json.loads(path.read_text())
    assert got["values"]["dapo_commit"]["value"] == [["1111111", "2222222 + uncommitted changes"]]
    assert "values.<method>_commit" in got["commit_note"]
    # a record from before per-run commits resumes with None for its runs' unknown commits
    del got["values"]["dapo_commit"]
    path.write_text(json.dumps(got))
    again = BasesRecord.open(str(path), name_what="w", command="c", settings={"a": 1},
                             methods=["dapo"], bases=1, commit="3333333", resume=True)
    assert again.rec["values"]["dapo_commit"]["value"] == [[None, None]]


def test_every_commit_the_records_name_is_in_the_repository_or_noted():
    if shutil.which("git") is None or not os.path.isdir(os.path.join(ROOT, ".git")) and \
            not os.path.isfile(os.path.join(ROOT, ".git")):
        pytest.skip("not a git checkout")
    missing = []
    for name, rec in results_record.load_all(os.path.join(ROOT, "docs", "results")).items():
        if not rec.get("commit") or rec.get("commit_note"):
            continue
        for h in results_record.COMMIT_HASH.findall(rec["commit"]):
            ok = subprocess.run(["git", "-C", ROOT, "cat-file", "-e", f"{h}^{{commit}}"],
                                capture_output=True).returncode == 0
            if not ok:
                missing.append(f"{name}: {h}")
    assert not missing, missing
