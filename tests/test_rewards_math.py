"""Math reward: a table of answer pairs with mathematically right expectations, scored through the
public API (reward worker processes), from worker threads, and with the inline scorer off the main
thread (math-verify timeouts disabled there)."""

import concurrent.futures

import pytest

from tseeds_jax import rewards
from tseeds_jax.rewards import extract
from tseeds_jax.rewards.math_reward import math_score

B = "\\boxed"
MATH_TABLE = [
    # fractions and decimals
    (B + "{\\frac{1}{2}}", "0.5", 1.0),
    (B + "{0.5}", "\\frac{1}{2}", 1.0),
    (B + "{\\dfrac{3}{4}}", "0.75", 1.0),
    (B + "{\\frac{2}{4}}", "\\frac{1}{2}", 1.0),
    (B + "{3.50}", "\\frac{7}{2}", 1.0),
    (B + "{\\frac{1}{3}}", "0.5", 0.0),
    (B + "{0.3333}", "\\frac{1}{3}", 0.0),
    (B + "{\\frac{1}{\\frac{1}{2}}}", "2", 1.0),
    # roots and other LaTeX forms
    (B + "{\\sqrt{8}}", "2\\sqrt{2}", 1.0),
    (B + "{\\frac{\\sqrt{2}}{2}}", "\\frac{1}{\\sqrt{2}}", 1.0),
    (B + "{\\sqrt{3}}", "\\sqrt{2}", 0.0),
    (B + "{\\frac{\\pi}{2}}", "\\frac{\\pi}{2}", 1.0),
    (B + "{2^{10}}", "1024", 1.0),
    (B + "{x^2+2x+1}", "(x+1)^2", 1.0),
    # percentages
    (B + "{50\\%}", "0.5", 1.0),
    (B + "{25\\%}", "\\frac{1}{4}", 1.0),
    (B + "{30\\%}", "0.5", 0.0),
    # units
    (B + "{5 \\text{ cm}}", "5", 1.0),
    (B + "{7\\text{ cm}}", "5", 0.0),
    ("So the side is 12 cm. The final answer is 12 cm.", "12", 1.0),
    # intervals, sets, tuples
    (B + "{(1, 2]}", "(1,2]", 1.0),
    (B + "{[1,2]}", "(1,2]", 0.0),
    (B + "{[0, \\infty)}", "[0,\\infty)", 1.0),
    (B + "{(-\\infty, 3)}", "(-\\infty,3)", 1.0),
    (B + "{\\{3,2,1\\}}", "\\{1,2,3\\}", 1.0),
    (B + "{\\{1,2\\}}", "\\{1,2,3\\}", 0.0),
    (B + "{(1, 2)}", "(1,2)", 1.0),
    (B + "{(2,1)}", "(1,2)", 0.0),
    # negative numbers
    (B + "{-3}", "-3", 1.0),
    (B + "{3}", "-3", 0.0),
    (B + "{-\\frac{1}{2}}", "-0.5", 1.0),
    (B + "{\\frac{-1}{4}}", "-0.25", 1.0),
    (B + "{0.5}", "-0.5", 0.0),
    # plain integers, separators, equations
    (B + "{1,000}", "1000", 1.0),
    (B + "{2}", "3", 0.0),
    (B + "{x = 2}", "2", 1.0),
    # extraction: last box wins, fallbacks, nothing to extract
    ("first " + B + "{3}, corrected: " + B + "{4}", "4", 1.0),
    ("first " + B + "{4}, corrected: " + B + "{3}", "4", 0.0),
    ("Therefore, the answer is $\\frac{7}{2}$.", "3.5", 1.0),
    ("#### 18", "18", 1.0),
    ("No boxed answer here, just reasoning about 42", "42", 0.0),
    ("", "42", 0.0),
]

# Genuine math-verify 0.9.0 limitation: in "e^{i\pi}" the "i" is parsed as a free symbol, not the
# imaginary unit, so Euler's identity is not recognised. The expected value stays mathematically right.
LIMITATIONS = [(B + "{e^{i\\pi}}", "-1", 1.0)]


def test_table_is_big_and_balanced():
    assert len(MATH_TABLE) >= 30
    assert 10 <= sum(e == 0.0 for *_, e in MATH_TABLE) <= len(MATH_TABLE) - 10


def test_math_table_batch():
    results = rewards.score_batch(
        "math", [r for r, _, _ in MATH_TABLE], [g for _, g, _ in MATH_TABLE], max_workers=2
    )
    got = [(r, g, res.score, res.reason) for (r, g, _), res in zip(MATH_TABLE, results)]
    bad = [(g_, e) for g_, (_, _, e) in zip(got, MATH_TABLE) if g_[2] != e]
    assert not bad, bad
    metrics = rewards.summarize(results)
    assert metrics["reward/reason/no_answer"] == 2.0
    assert metrics["reward/mean"] == pytest.approx(sum(e for *_, e in MATH_TABLE) / len(MATH_TABLE))


def test_math_table_from_worker_threads():
    with concurrent.futures.ThreadPoolExecutor(4) as ex:
        public = list(ex.map(lambda t: rewards.score("math", t[0], t[1]), MATH_TABLE))
        inline = list(ex.map(lambda t: math_score(t[0], t[1]).score, MATH_TABLE))
    assert public == [e for *_, e in MATH_TABLE]
    assert inline == [e for *_, e in MATH_TABLE]


@pytest.mark.xfail(strict=True, reason="math-verify 0.9.0 parses the i of e^{i\\pi} as a symbol")
@pytest.mark.parametrize("response,reference,expected", LIMITATIONS)
def test_math_known_library_limitations(response, reference, expected):
    assert math_score(response, reference).score == expected


@pytest.mark.parametrize(
    "text,expected",
    [
        ("\\boxed{\\frac{a}{b^{2}}}", "\\frac{a}{b^{2}}"),
        ("a \\boxed{1} b \\boxed{\\{1,2\\}} c", "\\{1,2\\}"),
        ("\\boxed 5 apples", "5"),
        ("\\fbox{7}", "7"),
        ("\\boxed{unclosed", None),
        ("final \\boxed{2} then broken \\boxed{3", "2"),
        ("nothing", None),
    ],
)
def test_last_boxed(text, expected):
    assert extract.last_boxed(text) == expected


def test_final_answer_patterns():
    assert extract.final_answer("blah\nThe final answer is: $-4$.\n") == "-4"
    assert extract.final_answer("work\n#### 1,234\n") == "1,234"
    assert extract.final_answer("Answer: 7 apples") == "7 apples"
    assert extract.final_answer("no phrase") is None
    assert extract.math_answer("x \\boxed{1} The final answer is 2")[0] == "1"  # boxed before phrases


@pytest.mark.parametrize(
    "response,reference,reason",
    [
        (None, "1", "invalid_input"),
        (3, "1", "invalid_input"),
        ("\\boxed{1}", None, "invalid_input"),
        ("\\boxed{1}", {"a": 1}, "invalid_input"),
        ("\\boxed{1}", "", "invalid_input"),
        ("\\boxed{1}", "\\boxed{}", "bad_reference"),
    ],
)
def test_math_garbage_is_zero_with_reason(response, reference, reason):
    res = rewards.score_result("math", response, reference)
    assert (res.score, res.reason) == (0.0, reason)
