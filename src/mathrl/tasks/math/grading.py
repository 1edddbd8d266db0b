"""Grading a final answer against the gold one, bounded in time, never raising.

For: the math task's `correct` reward part. Not for: finding the final answer
in a completion (`mathrl.tasks.math.answers`).

`Grader.equivalent(gold, candidate)` decides in three tiers, cheapest first:

1. the fast path (`answers.numbers_decide`): plain numbers, exactly, with no
   extra installed: `72` = `72.0` = `\\$72`, `3/4` = `0.75`, `1,234` = `1234`;
2. the same text (runs of whitespace aside) is the same answer;
3. math-verify (`pip install 'mathrl[math]'`), for everything else:
   `\\frac{\\sqrt{3}}{2}`, `9\\pi`, intervals, sets, units, `x = 2`. With
   `Grader(math_verify=False)` nothing else is equal.

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

Before any of that, a candidate that could not be a fair answer is not equal:
one with non-printable characters, digits of other scripts (full-width
`72` looks like 72), or unpaired braces (which would close the `\\boxed{}` it is
graded in).
"""

from __future__ import annotations

import functools
import importlib.metadata
import logging
import re
import warnings
from dataclasses import dataclass
from functools import partial

from mathrl.tasks.math.answers import balanced, numbers_decide
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
        " ".join(candidate.split()).isprintable()
        and _OTHER_DIGITS.search(candidate) is None
        and balanced(candidate)
    )


def same_text(a: str, b: str) -> bool:
    """The same answer written the same way, runs of whitespace aside."""
    return a.split() == b.split()


@dataclass(frozen=True, slots=True)
class Grader:
    """Decides whether a candidate final answer is equivalent to the gold one."""

    math_verify: bool = True
    """Ask math-verify what exact numbers and the same text cannot settle."""
    timeout: float = DEFAULT_TIMEOUT
    """Seconds one math-verify grading may take; a later one is not equal."""

    def equivalent(self, gold: str, candidate: str) -> bool:
        """True when `candidate` is equivalent to `gold`; never raises, bounded in time."""
        if not gradable(candidate):
            return False
        decided = numbers_decide(gold, candidate)
        if decided is not None:
            return decided
        if same_text(gold, candidate):
            return True
        return self.math_verify and verdict(gold, candidate, self.timeout)


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
    ("4 \\text{ cm}", "4"),
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


def math_verify_equal(gold: str, candidate: str) -> bool:
    """math-verify's verdict on two final answers, each parsed as the content of a `\\boxed{}`.

    Unbounded: call it through `verdict`, in a child process with a deadline
    (its own timeouts are `signal.alarm`, which works on the main thread only).
    """
    import math_verify

    with warnings.catch_warnings():  # SymPy's deprecation notes are no verdict
        warnings.simplefilter("ignore")
        parsed_gold = math_verify.parse(f"\\boxed{{{gold}}}", parsing_timeout=None)
        parsed = math_verify.parse(f"\\boxed{{{candidate}}}", parsing_timeout=None)
        return bool(math_verify.verify(parsed_gold, parsed, timeout_seconds=None))
