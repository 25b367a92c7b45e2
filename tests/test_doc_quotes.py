"""`results_render --check` catches an edit of any kind of number that prose below a rendered
table quotes from its record (issue 55: before, 7 of 13 such edits passed). Each case edits one
quote in a copy of the shipped README and asserts that the check names it; the unedited copy
passes, so every failure is the edit's."""

import os
import shutil

import pytest

from tseeds_jax import results_render

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# (kind, text as the README quotes it below a table, an edit of it); each text occurs once.
EDITS = [
    ("interval", "+6.3 ± 9.7 (p = 0.14) is", "+6.3 ± 9.8 (p = 0.14) is"),
    ("interval sign", "-17.1 ± 7.2 and", "+17.1 ± 7.2 and"),
    ("signed difference", "by +5.0 to +7.3 points", "by +5.0 to +7.4 points"),
    ("'+x' against an unsigned x", "by +5.0 to", "by +32.8 to"),  # 32.8 is a per-base mean
    ("p-value of an interval", "(+7.3 ± 7.9, p = 0.06)", "(+7.3 ± 7.9, p = 0.04)"),
    ("p below", "(-4.5 ± 2.9, p = 0.01)", "(-4.5 ± 2.9, p < 0.01)"),  # p < 0.01 elsewhere
    ("p of another cell", "(-4.5 ± 2.9, p = 0.01)", "(-4.5 ± 2.9, p = 0.02)"),
    ("SD pair", "-->9.2 / 1.5<", "-->9.9 / 1.6<"),  # 9.9 / 1.6: the split without base 0
    ("SD pair without base 1", "-->1.0 / 1.6<", "-->1.0 / 1.2<"),
    ("count", "-->5 of 5<", "-->4 of 5<"),  # 4 of 5 is another row's
    ("per-base value", "-->13.6<", "-->13.7<"),  # 13.7: `mixture` on base 2
    ("per-seed value", "-->21.9, 5.4<", "-->21.9, 5.6<"),
    ("detectable difference", "-->13.1<", "-->12.1<"),
    ("F statistic", "F(4, 5) = 3.6, p = 0.10<", "F(4, 5) = 4.6, p = 0.10<"),
    ("default task interval", "the ratio rule's +6.1 ± 11.1 (p = 0.20) holds",
     "the ratio rule's +6.1 ± 11.1 (p = 0.02) holds"),
    ("default task count", "-->3 of 5<", "-->2 of 5<"),
]


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("docs_copy")
    shutil.copytree(os.path.join(ROOT, "docs"), root / "docs")
    shutil.copy(os.path.join(ROOT, "README.md"), root / "README.md")
    assert results_render.check(str(root)) == []  # the shipped docs are in sync
    return root


@pytest.mark.parametrize("kind,old,new", EDITS, ids=[e[0] for e in EDITS])
def test_an_edited_quote_of_each_kind_fails_the_check(tree, kind, old, new):
    readme = (tree / "README.md").read_text()
    assert readme.count(old) == 1, (kind, old)
    (tree / "README.md").write_text(readme.replace(old, new))
    try:
        problems = [p for p in results_render.check(str(tree)) if p.startswith("README.md")]
    finally:
        (tree / "README.md").write_text(readme)
    # the unedited copy passes (the fixture), so any problem is the edit's
    assert problems, (kind, new)


def test_quotes_of_other_records_and_ratios_are_told_apart():
    """A multiplier ('1.44×') is not a quote; a decimal below a record without per-run values
    is not checked (targets, paper figures), one below a per-run record is."""
    got = results_render._quoted("theory 1.44× and 1.1–1.2× per step; SD 9.2 / 1.5, 4 of 5")
    assert got == [("ratio", "1.44×"), ("ratio", "1.1–1.2×"), ("pair", "9.2 / 1.5"),
                   ("count", "4 of 5")]
    assert results_render._holds("decimal", "21.9", "21.9, 5.4", {("", "21.9"), ("", "5.4")})
    assert not results_render._holds("decimal", "22.9", "21.9, 5.4", {("", "21.9"), ("", "5.4")})
    assert not results_render._holds("signed", "+5.0", "5.0", {("", "5.0")})
    assert results_render._holds("interval_p", "-4.5 ± 2.9, p = 0.01", "-4.5 ± 2.9 (p = 0.01;",
                                 set())
    assert not results_render._holds("interval_p", "-4.5 ± 2.9, p < 0.01",
                                     "-4.5 ± 2.9 (p = 0.01; +1 ± 2 (p < 0.01;", set())
    assert results_render._holds("p", "p = 0.02", "x (p=0.02; Holm: no)", set())
