"""The math task's grader: final answers, the exact-number fast path, math-verify, time bounds.

The tables are worked examples (each pair's reason in a comment); the
properties cover any text. Tests that need math-verify (`mathrl[math]`,
which CI installs) skip without it, and say so.
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Callable
from fractions import Fraction
from importlib import resources
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import strategies
from conftest import examples, needs_extra
from mathrl.tasks.math import grading
from mathrl.tasks.math.answers import (
    MAX_ANSWER_CHARS,
    boxed_answer,
    exact_number,
    final_answer,
    numbers_decide,
    wrong_answer,
)
from mathrl.tasks.math.grading import Grader, gradable, math_verify_equal, verdict

needs_math_verify = needs_extra("math_verify", "math")
BOMB = "9^{9^{9^{9}}}"
"""A power SymPy computes in C, where no alarm can stop it: only a kill ends it."""


def equivalence_rows() -> list[dict[str, str]]:
    text = resources.files("mathrl.tasks.math").joinpath("data", "equivalence.jsonl")
    return [json.loads(line) for line in text.read_text("utf-8").splitlines()]


# -- final answers --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "answer"),
    [
        ("She has 3*4=<<3*4=12>>12.\n#### 1,234", "1,234"),  # GSM8K: after the last ####
        ("#### 5\nthen\n#### 7.", "7"),  # the last mark; a full stop after it is no answer
        ("so $\\boxed{\\frac{1}{\\sqrt{2}}}$.", "\\frac{1}{\\sqrt{2}}"),  # nested braces kept
        ("\\boxed{1} then \\boxed{2}", "2"),  # MATH: the last box
        ("\\boxed{\\{1, 2\\}}", "\\{1, 2\\}"),  # \{ and \} are literal braces
        ("\\boxed{3}\n#### 4", "3"),  # a box comes before ####
        ("  72.  ", "72"),  # one line: a bare answer; a full stop ends the sentence
        ("\\boxed{3.5.}", "3.5"),
        ("x = \\frac{1}{2}", "x = \\frac{1}{2}"),
        ("First line\nsecond line", None),  # several lines, no box, no ####: none
        ("\\boxed{}", None),  # an empty box
        ("\\boxed{3} and \\boxed{4", None),  # the last box never closes
        ("", None),
        ("#### ", None),
        ("7" * (MAX_ANSWER_CHARS + 1), None),  # longer than any dataset's answer
        (f"\\boxed{{{'{' * 5000}1{'}' * 5000}}}", None),  # deep nesting, too long to grade
    ],
)
def test_final_answer_worked_examples(text: str, answer: str | None) -> None:
    assert final_answer(text) == answer


def test_only_a_box_is_the_asked_form() -> None:
    assert boxed_answer("The final answer is \\boxed{72}.") == "72"
    assert boxed_answer("#### 72") is None
    assert boxed_answer("72") is None


@given(strategies.answer_texts)
def test_finding_an_answer_never_raises_and_keeps_it_short(text: str) -> None:
    answer = final_answer(text)
    assert answer is None or 0 < len(answer) <= MAX_ANSWER_CHARS
    assert answer is None or answer == answer.strip()


# -- the fast path ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("72", Fraction(72)),
        ("-72", Fraction(-72)),
        ("1,234,567", Fraction(1234567)),  # thousands commas
        ("1{,}234", Fraction(1234)),  # LaTeX's comma in a number
        ("1\\,234", Fraction(1234)),  # LaTeX's thin space
        ("0.75", Fraction(3, 4)),
        (".5", Fraction(1, 2)),
        ("72.", None),  # math-verify reads no number there either: the answer finder drops it
        ("3/4", Fraction(3, 4)),
        ("-\\frac{3}{4}", Fraction(-3, 4)),
        ("\\dfrac{-6}{8}", Fraction(-3, 4)),
        ("$72$", Fraction(72)),
        ("\\$1,000", Fraction(1000)),
        ("1,23", None),  # not thousands: a list, say
        ("1/0", None),  # no value
        ("\\frac{1}{0}", None),
        ("\uff17\uff12", None),  # full-width digits look like 72 and are not
        ("50\\%", None),  # a percentage is math-verify's
        ("3\\sqrt{2}", None),
        ("1e3", None),
        ("", None),
        ("-", None),
    ],
)
def test_exact_number_worked_examples(text: str, value: Fraction | None) -> None:
    number = exact_number(text)
    assert (number.value if number else None) == value


@pytest.mark.parametrize(
    ("gold", "candidate", "decided"),
    [
        ("72", "72.0", True),  # 72 = 72.0
        ("3/4", "0.75", True),  # 3/4 = 0.75
        ("1,234", "1234", True),
        ("\\frac{1}{2}", "$0.5$", True),
        ("72", "73", False),  # integers that differ
        ("1/3", "1/4", False),  # fractions that differ, exactly
        ("0.5", "0.6", False),  # 0.1 apart: far beyond the tolerances
        ("1/3", "0.333333", None),  # 3.3e-7 apart: math-verify rounds to six places
        ("0.1234564", "0.1234561", None),
        ("72", "x = 72", None),  # not a plain number: math-verify's
    ],
)
def test_the_fast_path_decides_plain_numbers_only(
    gold: str, candidate: str, decided: bool | None
) -> None:
    assert numbers_decide(gold, candidate) is decided


def test_a_wrong_answer_is_wrong() -> None:
    assert wrong_answer("72") == "73"
    assert wrong_answer("1,234") == "1235"
    assert wrong_answer("3/4") == "7/4"  # 3/4 + 1
    assert wrong_answer("\\sqrt{2}") == "\\sqrt{2}+1"


# -- the grader ---------------------------------------------------------------------------------

EXACT_TABLE = [
    ("72", "72", True),
    ("1,234", "1234", True),  # commas
    ("3/4", "0.75", True),
    ("72", "\\$72", True),
    ("72", "73", False),
    ("\\sqrt{2}", "\\sqrt{2}", True),  # the same text
    ("\\sqrt{2}", " \\sqrt{2} ", True),  # whitespace aside
    ("\\sqrt{8}", "2\\sqrt{2}", False),  # equal, but only math-verify can tell
    ("72", "\uff17\uff12", False),  # full-width digits
    ("72", "72}", False),  # an unpaired brace would close the box it is graded in
    ("\\pi", "\\pi\x00", False),  # control characters
]
"""(gold, candidate, equivalent) for a grader without math-verify."""


@pytest.mark.parametrize(("gold", "candidate", "equal"), EXACT_TABLE)
def test_the_exact_grader_worked_examples(gold: str, candidate: str, equal: bool) -> None:
    assert Grader(math_verify=False).equivalent(gold, candidate) is equal


VERIFY_TABLE = [
    ("\\frac{\\sqrt{3}}{2}", "\\frac{1}{2}\\sqrt{3}", True),  # the same number, reordered
    ("2\\sqrt{2}", "\\sqrt{8}", True),
    ("\\frac{\\pi}{2}", "\\pi/2", True),
    ("(1, 2]", "(1,2]", True),  # an interval, spaced otherwise
    ("\\{1, 2, 3\\}", "\\{3, 2, 1\\}", True),  # a set's order is no matter
    ("5 \\text{ cm}", "5", True),  # units
    ("2", "x = 2", True),  # an equation's value
    ("\\frac{1}{2}", "50\\%", True),  # a percentage
    ("\\frac{1}{3}", "0.333333", True),  # a decimal to six places
    ("x^2 + 2x + 1", "(x + 1)^2", True),
    ("\\frac{\\sqrt{3}}{2}", "\\frac{\\sqrt{2}}{2}", False),
    ("(1, 2]", "[1, 2]", False),  # an endpoint in or out
    ("\\{1, 2\\}", "\\{1, 2, 3\\}", False),
    ("9\\pi", "6\\pi", False),
    ("x + 1", "x - 1", False),
    ("\\frac{1}{3}", "0.33", False),  # two places are not enough
]
"""(gold, candidate, equivalent): pairs only a real equivalence check decides."""


VERIFY_FAST = (0, 7, 11, 15)
"""The rows graded in the fast suite (a reordering, a percentage, an interval's endpoint, a
decimal too short); the others in the slow suite: each is math-verify in a process of its own."""


@needs_math_verify
@pytest.mark.parametrize(
    ("gold", "candidate", "equal"),
    [
        pytest.param(*row, marks=[] if i in VERIFY_FAST else [pytest.mark.slow])
        for i, row in enumerate(VERIFY_TABLE)
    ],
)
def test_the_grader_worked_examples(gold: str, candidate: str, equal: bool) -> None:
    assert Grader().equivalent(gold, candidate) is equal


@needs_math_verify
@pytest.mark.slow  # 96 math-verify gradings, each in a process of its own: about 20 s
@pytest.mark.parametrize("row", equivalence_rows(), ids=lambda row: row["equivalent"])
def test_every_equivalence_fixture_grades_its_other_spelling_equal_and_its_near_miss_not(
    row: dict[str, str],
) -> None:
    gold = final_answer(row["solution"])
    assert gold is not None
    assert Grader().equivalent(gold, gold)
    assert Grader().equivalent(gold, row["equivalent"])
    assert not Grader().equivalent(gold, row["different"])


@given(st.text(max_size=60), strategies.answer_texts)
def test_grading_without_math_verify_never_raises(gold: str, candidate: str) -> None:
    assert Grader(math_verify=False).equivalent(gold, candidate) in (True, False)


@needs_math_verify
@settings(max_examples=examples(8, 25))  # each may fork a grading
@given(strategies.latex_texts, strategies.answer_texts)
def test_grading_never_raises(gold: str, candidate: str) -> None:
    assert Grader(timeout=2.0).equivalent(gold, candidate) in (True, False)


@given(strategies.answer_texts)
def test_an_answer_a_grader_may_see_equals_itself(answer: str) -> None:
    # The same text is the same answer: decided before math-verify, so no fork.
    assert Grader().equivalent(answer, answer) is gradable(answer)


@needs_math_verify
@settings(max_examples=examples(25, 100))  # 3,000 agreed when this was written
@given(st.data(), strategies.plain_values, strategies.plain_values)
def test_the_fast_path_agrees_with_math_verify_where_both_decide(
    data: st.DataObject, a: Fraction, b: Fraction
) -> None:
    value = data.draw(st.sampled_from([b, a, a + Fraction(1, 10**7)]))  # far, equal or near
    gold, candidate = data.draw(strategies.spellings(a)), data.draw(strategies.spellings(value))
    decided = numbers_decide(gold, candidate)
    if decided is not None:
        assert math_verify_equal(gold, candidate) is decided, (gold, candidate)


# -- bounded in time ------------------------------------------------------------------------------


def returns_within(seconds: float, call: Callable[[], Any]) -> Any:
    """`call()` on a thread, as rewards run; fails if it has not returned after `seconds`
    (a hang guard, far above the bound under test: not a timing assertion)."""
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(call()), daemon=True)
    thread.start()
    thread.join(seconds)
    assert out, f"still running after {seconds} s"
    return out[0]


def test_a_hung_grading_is_killed_at_its_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    def hangs(gold: str, candidate: str) -> bool:
        threading.Event().wait()  # never returns, as SymPy on a bomb
        return True

    monkeypatch.setattr(grading, "math_verify_equal", hangs)
    monkeypatch.setattr(grading, "warm", lambda: None)
    verdict.cache_clear()
    try:
        assert returns_within(60, lambda: verdict("1", "hangs", 0.3)) is False
    finally:
        verdict.cache_clear()


@needs_math_verify
def test_a_latex_bomb_scores_nothing_and_returns() -> None:
    grader = Grader(timeout=1.0)
    assert returns_within(60, lambda: grader.equivalent("1", BOMB)) is False
    hits = verdict.cache_info().hits
    assert returns_within(60, lambda: grader.equivalent("1", BOMB)) is False
    assert verdict.cache_info().hits == hits + 1  # the group's next copy costs nothing


def test_a_grading_that_cannot_import_math_verify_is_not_equal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "math_verify", None)  # import fails
    monkeypatch.setattr(grading, "warm", lambda: None)
    verdict.cache_clear()
    try:
        assert Grader().equivalent("\\sqrt{8}", "2\\sqrt{2}") is False
    finally:
        verdict.cache_clear()


def test_a_candidate_no_grader_should_see() -> None:
    assert gradable("\\frac{1}{2}")
    assert not gradable("\uff17\uff12")  # digits of another script
    assert not gradable("\\frac{1}{2")  # unpaired
    assert not gradable("1}+{2")  # closes before it opens
    assert not gradable("7\x1b[31m")  # a terminal escape
    assert gradable("a\nb\tc")  # whitespace is no harm
