"""Grading a final answer against the gold one, bounded in time, never raising.

For: the math task's `correct` reward part. Not for: finding the final answer
in a completion, or reading what it states (`mathrl.tasks.math.answers`).
How two answers compare is `Grader`'s docstring; this says how it is done.

`Grader.equivalent(gold, candidate)` decides in tiers, cheapest first:

1. a candidate no grader should see is not equal (`gradable`): one with
   non-printable characters, digits of other scripts (full-width `72` looks
   like 72), unpaired braces (which would close the `\\boxed{}` it is graded
   in), or longer than `answers.MAX_ANSWER_CHARS`;
2. the same text (runs of whitespace aside) is the same answer;
3. an answer costly to grade (`cost.costly`) is equal to nothing else;
4. what each answer states (`answers.stated`): two numbers side by side are
   not equal, nor are different units;
5. the fast path (`answers.numbers_decide`) on the values: plain numbers,
   exactly, with no extra installed: `72` = `72.0` = `\\$72`, `3/4` = `0.75`;
6. math-verify (`pip install 'mathrl[math]'`), for everything else:
   `\\frac{\\sqrt{3}}{2}`, `9\\pi`, intervals, sets, `x = 2`. With
   `Grader(math_verify=False)` nothing else is equal. math-verify strips
   units itself, dropping a unit's first letter and everything after it in
   `\\frac{1}{\\mathrm{e}}`: here it is told not to (units are settled in tier
   4), and what it fails to parse is equal to nothing, where it would compare
   the text it failed on (`\\frac{1}{` for both `\\frac{1}{\\mathrm{e}}` and
   `\\frac{1}{\\mathrm{x}}`).

Why a child process: math-verify bounds its own work with `signal.alarm`,
which works only on the main thread, and rewards run on worker threads; an
alarm also cannot stop work inside a C call (SymPy computing `9^{9^{9^9}}`
never returns to the interpreter). So each math-verify grading runs with
its own timeouts off, in a child process forked for it
(`mathrl.workers.in_process`), killed at `timeout` seconds; a grading that
is killed, crashes or raises is not equal. The child starts from this
process's memory, with math-verify imported and its parser warmed, so it
pays no import. Verdicts are cached per (gold, candidate, timeout): a group
that writes the same answer eight times forks once.

Why tier 3: each distinct answer that runs math-verify to its deadline costs
a worker the whole `timeout`; `mathrl.tasks.math.cost` says what is costly, and
`tests/bench/math_bombs.py` measures a step's rewards with bombs.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.metadata
import logging
import re
import warnings
from dataclasses import dataclass
from functools import partial
from typing import Any

from mathrl.tasks.math.answers import (
    MAX_ANSWER_CHARS,
    balanced,
    numbers_decide,
    stated,
    units_agree,
)
from mathrl.tasks.math.cost import costly
from mathrl.workers import in_process

DEFAULT_TIMEOUT = 5.0
"""Seconds one math-verify grading may take (math-verify's own default): the slowest
fair answers measured take under 1 s alone."""
CACHED_VERDICTS = 65_536
_OTHER_DIGITS = re.compile(r"(?![0-9])\d")
"""A digit of any script but ASCII: `\\d` matches them all."""


def math_verify_version() -> str | None:
    """The installed math-verify's version, or None when it is not installed."""
    try:
        return importlib.metadata.version("math-verify")
    except importlib.metadata.PackageNotFoundError:
        return None


def gradable(candidate: str) -> bool:
    """False for a candidate no grader should see: see the module docstring."""
    return (
        len(candidate) <= MAX_ANSWER_CHARS
        and " ".join(candidate.split()).isprintable()
        and _OTHER_DIGITS.search(candidate) is None
        and balanced(candidate)
    )


def same_text(a: str, b: str) -> bool:
    """The same answer written the same way, runs of whitespace aside."""
    return a.split() == b.split()


@dataclass(frozen=True, slots=True)
class Grader:
    r"""Decides whether a candidate final answer is equivalent to the gold one.

    Two answers are equal when they state the same value, however it is
    written, and no different units. The aim is that a wrong answer is never
    equal (a reward that pays one is what RL learns first); where a right one
    cannot be told from a wrong one, it is not equal either. The examples
    run as a test (`equal = Grader().equivalent`):

    Numbers: digits grouped in threes by commas, spaces, `{,}` or `\,` are one
    number (commas outside brackets only: `(3,100)` may be a point). A first
    group of 0 is no group: `0,111` is left to math-verify, which reads a
    decimal comma. Two numbers side by side are no answer.

    >>> equal("12000", "12 000"), equal("12000", "12{,}000"), equal("12000", "12\\,000")
    (True, True, True)
    >>> equal("0", "12 000"), equal("111", "0,111"), equal("0.111", "0,111"), equal("5", "2 3")
    (False, False, True, False)

    Units: a unit on one side only compares the values (the question names
    it, or the answer does); two units must be the same word, singular or
    plural, written in `\text{}` (or `\mathrm{}`, `\mbox{}`), or a degree sign.
    Units are never converted, and a word of scale is no unit. Letters after
    a number outside `\text{}` are symbols: `5 cm` is 5 times c times m.

    >>> equal("5\\text{ cm}", "5"), equal("5", "5\\,\\mathrm{cm}"), equal("5\\text{ cm}", "5 cm")
    (True, True, False)
    >>> equal("5\\text{ cm}", "5\\text{ m}"), equal("500\\text{ cm}", "5\\text{ m}")
    (False, False)
    >>> equal("30^\\circ", "30\\text{ degrees}"), equal("5", "5\\text{ million}")
    (True, False)

    Percents (math-verify's rule): `X\%` equals both X and X/100, so a
    question that asks for a percentage may be answered with or without the
    sign, and one that asks for a fraction may be answered as a percentage.

    >>> equal("50", "50\\%"), equal("\\frac{1}{2}", "50\\%"), equal("0.5", "0.5\\%")
    (True, True, False)

    Approximations: a decimal equals a value it matches to six decimal
    places (math-verify rounds both to six); fewer places are not enough.

    >>> equal("\\frac{1}{3}", "0.333333"), equal("\\pi", "3.141593"), equal("\\pi", "3.14")
    (True, True, False)

    An upright e is Euler's number; what math-verify cannot parse, and an
    answer costly to grade (`mathrl.tasks.math.cost`), equal only their own
    text:

    >>> equal("\\frac{1}{\\mathrm{e}}", "\\frac{1}{\\mathrm{x}}")
    False
    >>> equal("1 - \\frac{1}{\\mathrm{e}}", "1 - \\frac{1}{e}")
    True
    >>> equal("1+", "1+\\$"), equal("1", "9^{9^{9}}"), equal("9^{9^{9}}", "9^{9^{9}}")
    (False, False, True)
    """

    math_verify: bool = True
    """Ask math-verify what exact numbers and the same text cannot settle."""
    timeout: float = DEFAULT_TIMEOUT
    """Seconds one math-verify grading may take; a later one is not equal."""

    def equivalent(self, gold: str, candidate: str) -> bool:
        """True when `candidate` is equivalent to `gold`; never raises, bounded in time."""
        if not gradable(candidate):
            return False
        if same_text(gold, candidate):
            return True
        if costly(gold) or costly(candidate):
            return False
        a, b = stated(gold), stated(candidate)
        if a is None or b is None or not units_agree(a.unit, b.unit):
            return False
        decided = numbers_decide(a.value, b.value)
        if decided is not None:
            return decided
        if same_text(a.value, b.value):
            return True
        return self.math_verify and verdict(a.value, b.value, self.timeout)


@functools.lru_cache(maxsize=CACHED_VERDICTS)
def verdict(gold: str, candidate: str, timeout: float) -> bool:
    """math-verify's verdict in a child process, killed after `timeout` s (then False)."""
    try:
        warm()
        equal: bool = in_process(partial(math_verify_equal, gold, candidate), timeout)()
    except Exception:  # not installed, killed at the deadline, died or raised: not equal
        return False
    return equal


WARM_UP = (
    ("\\frac{1}{2}", "0.5"),
    ("\\frac{\\sqrt{2}}{3}", "0.4714045"),
    ("2\\pi", "\\pi \\cdot 2"),
    ("[0, 1)", "(0, 1]"),
    ("\\{1, 2\\}", "\\{2, 1\\}"),
    ("1, 2", "2, 1"),
    ("x^2 - 1", "(x - 1)(x + 1)"),
    ("x = 3", "3"),
    ("10\\%", "0.1"),
    ("\\text{(A)}", "A"),
    ("3^\\circ", "3"),
    ("2^{1/2}", "\\sqrt{2}"),
)
"""One of each kind of answer, graded once in the trainer before the first child is forked:
SymPy and the LaTeX parser load much of themselves on first use, which every child would
otherwise pay again (a child's grading took about 175 ms instead of 45 ms without it)."""


@functools.cache
def warm() -> None:
    """Import math-verify here and grade WARM_UP, so every child starts with it all loaded.

    Its logger is kept to errors: it warns once that its own timeouts are
    off, and this module bounds every call itself.
    """
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    for gold, candidate in WARM_UP:
        math_verify_equal(gold, candidate)


@functools.cache
def _extraction() -> tuple[Any, ...]:
    """math-verify's default extraction, but for its unit stripping (see the module docstring)."""
    from math_verify import ExprExtractionConfig, LatexExtractionConfig

    latex = LatexExtractionConfig()
    normalization = dataclasses.replace(latex.normalization_config, units=False)
    return (dataclasses.replace(latex, normalization_config=normalization), ExprExtractionConfig())


def math_verify_equal(gold: str, candidate: str) -> bool:
    """math-verify's verdict on two final answers, each parsed as the content of a `\\boxed{}`;
    False when either does not parse.

    Unbounded: call it through `verdict`, in a child process with a deadline
    (its own timeouts are `signal.alarm`, which works on the main thread only).
    """
    import math_verify

    with warnings.catch_warnings():  # SymPy's deprecation notes are no verdict
        warnings.simplefilter("ignore")
        parsed_gold = _parsed(
            math_verify.parse(f"\\boxed{{{gold}}}", _extraction(), parsing_timeout=None)
        )
        parsed = _parsed(
            math_verify.parse(f"\\boxed{{{candidate}}}", _extraction(), parsing_timeout=None)
        )
        if not (parsed_gold and parsed):
            return False
        return bool(math_verify.verify(parsed_gold, parsed, timeout_seconds=None))


def _parsed(extracted: list[Any]) -> list[Any]:
    """What math-verify parsed, without the text it keeps beside it (or instead of it)."""
    return [value for value in extracted if not isinstance(value, str)]
