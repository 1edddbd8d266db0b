"""The math task's grader: final answers, the exact-number fast path, math-verify, time bounds.

The tables are worked examples (each pair's reason in a comment); the
properties cover any text. Tests that need math-verify (`mathrl[math]`,
which CI installs) skip without it, and say so.
"""

from __future__ import annotations

import doctest
import json
import sys
import threading
from collections.abc import Callable
from decimal import Decimal
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
    Stated,
    boxed_answer,
    exact_number,
    final_answer,
    numbers_decide,
    stated,
    units_agree,
    wrong_answer,
)
from mathrl.tasks.math.cost import costly
from mathrl.tasks.math.grading import (
    Grader,
    gradable,
    math_verify_equal,
    same_text,
    verdict,
)

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
        (f"\\boxed{{{'9' * 100_000}}}", None),  # read no further than twice the longest answer
        (f"\\boxed{{{' ' * (2 * MAX_ANSWER_CHARS)}7}}", None),
        (f"\\boxed{{{' ' * MAX_ANSWER_CHARS}7}}", "7"),
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
        ("12 000", Fraction(12000)),  # a space between groups of three: one number
        ("-12\\ 000.5", Fraction(-24001, 2)),
        ("1,\\!000", Fraction(1000)),  # MATH's comma and negative space
        ("0,111", None),  # no group starts with 0: a decimal comma, math-verify's
        ("0 111", None),
        ("1\\,2", None),  # not a group of three: two numbers
        ("1 000{,}000", None),  # one separator a number
        ("1" * 100_000, None),  # longer than any answer (and than int() reads)
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
        ("0", "12 000", False),  # one number, 12000, where math-verify reads 12 * 000
        ("12000", "12 000", True),
        ("111", "0,111", None),  # a decimal comma to math-verify, not 111
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


# -- what an answer states ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "value", "unit"),
    [
        ("12 000", "12000", ""),  # digits grouped in threes: one number
        ("12\\,000", "12000", ""),
        ("12{,}000", "12000", ""),
        ("x = 12,000", "x = 12000", ""),  # a comma outside brackets too
        ("(3,100)", "(3,100)", ""),  # inside, a list's, maybe: math-verify's to read
        ("0,111", "0,111", ""),  # no group starts with 0: a decimal comma
        ("5\\text{ cm}", "5", "cm"),
        ("5 \\, \\mathrm{cm}", "5", "cm"),
        ("12\\text{ cm}^{2}", "12", "cm^2"),
        ("\\frac{1}{2}\\mbox{ square units}", "\\frac{1}{2}", "square units"),
        ("30^\\circ", "30", "°"),
        ("30^{\\circ}", "30", "°"),
        ("30\\text{ degrees}", "30", "°"),
        ("5\\text{ million}", "5\\text{ million}", ""),  # scale: no unit
        ("12\\text{ dozens}", "12\\text{ dozens}", ""),
        ("2\\mathrm{e}", "2e", ""),  # Euler's number, upright
        ("1 - \\frac{1}{\\mathrm{e}}", "1 - \\frac{1}{e}", ""),
        ("\\text{Monday}", "\\text{Monday}", ""),  # text alone: no value, so no unit
        ("5 cm", "5 cm", ""),  # without \text: symbols, as math-verify reads them
        ("50\\text{ percent}", "50\\%", ""),
        ("50%", "50\\%", ""),
    ],
)
def test_what_an_answer_states_worked_examples(answer: str, value: str, unit: str) -> None:
    assert stated(answer) == Stated(value, unit)


@pytest.mark.parametrize(
    "answer",
    [
        "2 3",  # math-verify reads 2 + 3, or 2 * 3
        "0 111",  # math-verify reads 0 * 111: equal to 0
        "12 00",  # not a group of three
        "x = 1\\;2",
        "\\{1,000\\}",  # a set of 1 and 0 to math-verify, as is \{1,000,000\}
    ],
)
def test_two_numbers_side_by_side_state_nothing(answer: str) -> None:
    assert stated(answer) is None


@pytest.mark.parametrize(
    ("a", "b", "agree"),
    [
        ("cm", "cm", True),
        ("cm", "", True),  # a unit on one side only: the question named it, or the answer did
        ("", "", True),
        ("inch", "inches", True),  # singular and plural
        ("cm", "cms", True),
        ("cm", "m", False),
        ("cm^2", "cm", False),
        ("°", "radians", False),
    ],
)
def test_units_agree_worked_examples(a: str, b: str, agree: bool) -> None:
    assert units_agree(a, b) is agree
    assert units_agree(b, a) is agree


@given(strategies.answer_texts)
def test_reading_what_an_answer_states_never_raises(answer: str) -> None:
    read = stated(answer)
    assert read is None or read.value == read.value.strip()


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
    ("0", "12 000", False),  # 12000, which math-verify reads as 12 * 000
    ("12000", "12 000", True),
    ("12000", "12\\,000", True),
    ("111", "0,111", False),  # 0.111 to math-verify, not 111
    ("5\\text{ cm}", "5", True),  # a unit on one side only: the numbers
    ("5\\text{ cm}", "5\\text{ m}", False),
    ("5", "2 3", False),  # two numbers side by side, which math-verify adds
    ("1", "1" * 100_000, False),  # longer than any answer (and than int() reads)
    ("9^{9^{9}}", "9^{9^{9}}", True),  # costly, but the same text
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


PAID_WRONG_BEFORE = [
    ("0", "12 000", False),  # math-verify reads a space between digits as a product
    ("12000", "12 000", True),
    ("\\frac{1}{\\mathrm{e}}", "\\frac{1}{\\mathrm{x}}", False),  # math-verify's unit stripping
    # cut both to `\frac{1}{`, which it then compared as text
    ("1 - \\frac{1}{\\mathrm{e}}", "1 - \\frac{1}{e}", True),  # an upright e is e
    ("5\\text{ cm}", "5\\text{ m}", False),  # math-verify strips units, any units
    ("3", "3t", False),  # and letters it takes for units (t, h, m, s, ...)
    ("5", "5\\text{ million}", False),  # and words of scale
    ("x = 1,000", "x = 1,000,000", False),  # both x = {1, 0} to math-verify
    ("1000", "x = 1,000", True),
    ("0.111", "0,111", True),  # math-verify's decimal comma
    ("30", "30\\text{ degrees}", True),
]
"""(gold, candidate, equivalent): pairs math-verify alone grades wrongly, and the grader not."""


@needs_math_verify
@pytest.mark.parametrize(("gold", "candidate", "equal"), PAID_WRONG_BEFORE)
def test_the_grader_settles_what_math_verify_alone_gets_wrong(
    gold: str, candidate: str, equal: bool
) -> None:
    assert Grader().equivalent(gold, candidate) is equal


@needs_math_verify
def test_the_graders_docstring_examples_hold() -> None:
    # The policy on units, percents, separators and approximations, with its examples.
    finder = doctest.DocTestFinder(recurse=False)
    [examples_] = finder.find(Grader, "Grader", globs={"equal": Grader().equivalent})
    assert len(examples_.examples) >= 8
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    failures: list[str] = []
    runner.run(examples_, out=failures.append)
    assert runner.failures == 0, "".join(failures)


@needs_math_verify
def test_what_math_verify_cannot_parse_is_not_equal() -> None:
    # Both fail to parse; math-verify keeps the text it failed on, `1+` for both, and would
    # compare that. The same text is equal before math-verify is asked.
    assert math_verify_equal("1+", "1+\\$") is False
    assert math_verify_equal("1+", "1+") is False
    assert Grader().equivalent("1+", "1+") is True


@settings(max_examples=examples(200, 1000))
@given(st.data(), strategies.grouped_values, strategies.grouped_values)
def test_different_numbers_are_never_equal_however_their_digits_are_grouped(
    data: st.DataObject, a: Decimal, b: Decimal
) -> None:
    # Without math-verify, each is a plain number, or one with a unit (`x = ` is not).
    gold, candidate = data.draw(strategies.grouped(a)), data.draw(strategies.grouped(b))
    equal = Grader(math_verify=False).equivalent(gold, candidate)
    assert equal is (a == b) or (a == b and "x = " in gold + candidate), (gold, candidate)


@needs_math_verify
@settings(max_examples=examples(25, 150))  # a number after `x = ` forks a grading
@given(st.data(), strategies.grouped_values, strategies.grouped_values)
def test_different_numbers_are_never_equal_however_their_digits_are_grouped_to_math_verify(
    data: st.DataObject, a: Decimal, b: Decimal
) -> None:
    gold, candidate = data.draw(strategies.grouped(a)), data.draw(strategies.grouped(b))
    assert Grader(timeout=30.0).equivalent(gold, candidate) is (a == b), (gold, candidate)


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
def test_grading_never_raises_and_where_it_asks_math_verify_gives_its_verdict(
    gold: str, candidate: str
) -> None:
    graded = Grader(timeout=10.0).equivalent(gold, candidate)
    assert graded in (True, False)
    if not gradable(candidate) or same_text(gold, candidate):  # decided by the text alone
        assert graded is (gradable(candidate) and same_text(gold, candidate))
        return
    a, b = stated(gold), stated(candidate)
    if costly(gold) or costly(candidate) or a is None or b is None:
        assert graded is False  # never shown to math-verify
    elif units_agree(a.unit, b.unit) and numbers_decide(a.value, b.value) is None:
        # Shown to math-verify in a child process, on the values: its verdict, as it gives
        # it here, in this process (or the same text, which it is not asked about).
        here = same_text(a.value, b.value) or math_verify_equal(a.value, b.value)
        assert graded is here, (gold, candidate)


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
def test_a_latex_bomb_that_reaches_math_verify_is_killed_and_remembered() -> None:
    # `costly` keeps this one from math-verify; one it misses ends the same way.
    assert returns_within(60, lambda: verdict("1", BOMB, 1.0)) is False
    hits = verdict.cache_info().hits
    assert returns_within(60, lambda: verdict("1", BOMB, 1.0)) is False
    assert verdict.cache_info().hits == hits + 1  # the group's next copy costs nothing


COSTLY = [
    "9^{9^{9^{9^{9}}}}",  # a tower: 9^(9^9) has 370 million digits
    "9^{9^9}",
    "9^{999999999}",
    "9^999999999",  # math-verify reads the digits after ^ whole
    "10^{10^{5}}",  # 100,001 digits
    "\\pi^{100000}",
    "100000!",  # 456,574 digits
    "(10^{6})!",
    "\\binom{10^{6}}{5}",
    "\\binom{100000}{50000}",
    "(x+y+z)^{100}",  # expands to 5,151 terms
    "(x+1)^{20}(x-1)^{20}",  # 441 terms once expanded
    "(x+y+z+w)^{12}",  # 455 terms
    "(a+b)(c+d)(e+f)(g+h)(i+j)(k+l)(m+n)",  # 128 terms
    "(x+1)^{64}",  # 65 terms
    "(x+1)^{10000000}",
    "\\alpha^{100000}",
    "2^{11111111111111111111}",
    "\\frac{1}{" * 7 + "2" + "}" * 7,  # brackets seven deep
    "(" * 7 + "1" + ")" * 7,
    "\\sin " * 9 + "x",  # nine function names (twelve take 6 s to parse)
    "\\int_0^1 x^2 dx",  # work left to do
    "\\lim_{x \\to 0} \\frac{\\sin x}{x}",
    "\\sum_{k=1}^{n} k",
    "1" * (MAX_ANSWER_CHARS + 1),
]
FAIR = [
    "2^{2017}",  # 608 digits
    "\\left(\\frac{1}{2}\\right)^{2017}",
    "2^{2^{10}}",
    "2^{2^{n}}",
    "e^{-x^2}",
    "x^{1000}",
    "(x+1)^{2}(x-1)^{3}",
    "\\binom{10000}{5000}",
    "1000!",
    "10^{-10000}",
    "\\sqrt[1000]{2}",
    "3 \\times 10^{8}",
    "\\frac{\\sqrt{3}}{2}",
    "\\left( -\\frac{1}{2}, \\frac{\\sqrt{3}}{2} \\right)",
    "\\sqrt[3]{\\frac{1}{2}\\left(1+\\sqrt{\\frac{3}{5}}\\right)}",  # five deep
    "\\sin x \\cos y - \\cos x \\sin y",
    "\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}",
    "12\\text{ cm}^2",
    "(x+1)^{63}",  # 64 terms once expanded
    "(a+b)(c+d)(e+f)(g+h)(i+j)(k+l)",  # 64 terms
    "(x+y+z)^{6}",  # 28 terms
    "\\sqrt{x}^{30}",  # one term
    "x^2 + 2x + 1",
    "1+" * 140 + "1",  # a long sum: one number
    "x = 1, y = 2",
    "3!!",
    "0^{5}",
    "2^",  # LaTeX that does not close: nothing costly in it
    "(1",
    "\\binom 5",
    "x^\\pi",
    "x^ 2",
    "1,000^{2}",
]


@pytest.mark.parametrize("answer", COSTLY)
def test_a_costly_answer_is_equal_only_to_its_own_text_and_never_graded(
    answer: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_grading(*given: object) -> bool:
        raise AssertionError(f"math-verify was asked about {given}")

    monkeypatch.setattr(grading, "verdict", no_grading)
    assert costly(answer)
    assert Grader().equivalent("1", answer) is False
    assert Grader().equivalent(answer, "1") is False
    assert Grader().equivalent(answer, answer) is gradable(answer)


@pytest.mark.parametrize("answer", FAIR)
def test_a_fair_answer_is_not_costly(answer: str) -> None:
    assert not costly(answer)


@given(st.one_of(strategies.answer_texts, strategies.huge_answers))
def test_the_cost_check_never_raises(answer: str) -> None:
    assert costly(answer) in (True, False)


def test_grading_never_raises_whatever_the_size(monkeypatch: pytest.MonkeyPatch) -> None:
    # int() refuses 4,300 digits and more: the fast path read this one as a number.
    assert Grader().equivalent("1", "1" * 100_000) is False
    assert Grader().equivalent("1" * 100_000, "1") is False
    assert exact_number("1" * 100_000) is None


@given(st.one_of(strategies.answer_texts, strategies.huge_answers), strategies.huge_answers)
def test_an_answer_of_any_size_is_graded_without_math_verify_or_an_error(
    other: str, huge: str
) -> None:
    asked = verdict.cache_info().misses
    assert Grader().equivalent(other, huge) is False
    assert Grader().equivalent(huge, other) is (same_text(huge, other) and gradable(other))
    assert verdict.cache_info().misses == asked  # math-verify was never asked


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
