r"""What grading an answer would cost math-verify, bounded before it is asked: `costly`.

For: `mathrl.tasks.math.grading`, which finds an answer `costly` equal to
nothing but its own text, without forking math-verify. Not for: telling a
right answer from a wrong one.

Why: math-verify runs in a child process killed at its deadline (5 s), so a
bomb cannot hang the trainer, but each distinct one costs a worker that
deadline, and a policy that learns to write them would make every step pay
it. `costly` reads an answer for what makes math-verify's parser or SymPy
slow, in microseconds. An answer is costly when it has (measured on one core
against the gold `1`):

- more than MAX_ANSWER_CHARS characters;
- brackets nested more than MAX_NESTING deep, or more than MAX_FUNCTIONS
  function names: the parser's work grows about threefold a level (six nested
  `\cos(` take 0.7 s, ten 2.7 s; twelve nested `\sin`, no bracket, 6 s);
- an integral, limit, sum or product: work left to do
  (`\int_0^1 e^{-x^2}\sin(x^3)\,dx` runs past any deadline);
- a number of more than MAX_DIGITS digits, as `size` bounds it: `9^{9^{9}}`,
  `10^{10^{5}}`, `(10^{6})!`, `\binom{10^{6}}{5}`, which SymPy computes in C;
- a product that expands to more than MAX_TERMS terms, as `size` bounds it:
  `(x+y+z)^{100}` (5,151 terms, minutes), ten `(a+b)` side by side (1,024
  terms, past 8 s), `(x+y+z+w)^{12}` (455 terms, 6 s).

What passes costs at most about a second alone (six `(a+b)` side by side,
64 terms: 0.7 s); math-verify's deadline bounds whatever else this misses.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from mathrl.tasks.math.answers import MAX_ANSWER_CHARS

MAX_NESTING = 6
"""Brackets deeper than this are costly."""
MAX_FUNCTIONS = 8
"""More function names than this are costly."""
MAX_DIGITS = 10_000
"""The most digits of a number an answer writes (`2^{2017}` has 608, `10^{10^{5}}` too many)."""
MAX_TERMS = 64
"""The most terms a product in an answer may expand to (`(x+1)^{63}`, `(x+y+z)^{6}`: 28)."""
_FUNCTION = re.compile(
    r"\\(?:(?:arc)?(?:sin|cos|tan|cot|sec|csc)h?|ln|log|lg|exp|operatorname)(?![A-Za-z])"
)
_CALCULUS = re.compile(r"\\(?:i*int|oint|lim|sum|prod)(?![A-Za-z])")
_BINOMIAL = re.compile(r"\\[dt]?binom")
_COMMAND = re.compile(r"\\[A-Za-z]+|\\.?", re.DOTALL)
_SYMBOL = re.compile(
    r"\\(?:var)?(?:alpha|beta|gamma|delta|epsilon|zeta|eta|theta|iota|kappa|lambda|mu|nu|xi|pi"
    r"|rho|sigma|tau|upsilon|phi|chi|psi|omega|infty)",
    re.IGNORECASE,
)
"""A command that is a number or a symbol (the others are spacing, structure or operators)."""
_DIGITS = "0123456789"
_OPENING, _CLOSING = "{([", "})]"
_SUMS = "+-=,;"
"""What separates the terms of a sum (or the sides of an equation, or a list's items)."""
_LOG2 = math.log10(2)


def costly(answer: str) -> bool:
    """True for an answer that could cost math-verify seconds (see the module docstring).
    One pass over the text, and one over each bracket's content; never raises."""
    if len(answer) > MAX_ANSWER_CHARS or len(_FUNCTION.findall(answer)) > MAX_FUNCTIONS:
        return True
    if _CALCULUS.search(answer) or _nesting(answer) > MAX_NESTING:
        return True
    bounds = size(answer)
    return bounds.digits > MAX_DIGITS or bounds.expansion > MAX_TERMS


@dataclass(frozen=True, slots=True)
class Size:
    """Upper bounds on what math-verify may make of a text."""

    digits: float
    """log10 of any number it writes, each symbol counted as 2: a sum or product of terms
    is at most the product of each term or 2, whichever is more, so the logs add."""
    terms: float
    """The terms of its sum, each product of letters expanded (a number is one term)."""
    expansion: float
    """The most terms any product in it expands to."""
    lettered: bool
    """Whether it has a letter, or a Greek one."""


def size(text: str) -> Size:
    """`Size` of `text`. Call it on text nested at most MAX_NESTING deep: it recurses into
    brackets."""
    digits, terms, expansion, product = 0.0, 0.0, 1.0, 1.0
    lettered = in_product = False
    i = 0
    while i < len(text):
        char, start = text[i], i
        if char in _SUMS:
            terms, product, in_product, i = terms + product * in_product, 1.0, False, i + 1
            continue
        if char in _DIGITS:
            i = _digits_end(text, i)
            term = Size(_literal_log(text[start:i]), 1.0, 1.0, False)
        elif char in _OPENING:
            i = _closing(text, i) + 1
            term = size(text[start + 1 : i - 1])
        elif char == "\\":
            command = _COMMAND.match(text, i)
            assert command is not None  # a backslash, at least
            i = command.end()
            if _BINOMIAL.fullmatch(command[0]) and i < len(text) and text[i] in _OPENING:
                end = _closing(text, i)  # binom(n, k) <= 2^n: n's size, times log10(2)
                top = size(text[i + 1 : end])
                term, i = Size(_LOG2 * _power_of_ten(top.digits), 1.0, 1.0, top.lettered), end + 1
            elif _SYMBOL.fullmatch(command[0]):
                term = Size(_LOG2, 1.0, 1.0, True)
            else:
                continue  # spacing, escapes, \left, \frac, \sqrt: their brackets are terms
        elif char.isalpha():
            term, i = Size(_LOG2, 1.0, 1.0, True), i + 1
        else:
            i += 1
            continue
        log, count = term.digits, term.terms if term.lettered else 1.0
        while True:  # what follows the term: powers and factorials
            j = i
            while j < len(text) and text[j] == " ":
                j += 1
            if j < len(text) and text[j] == "^":
                exponent, i = _exponent(text, j + 1)
                power = _power_of_ten(exponent)
                log, count = max(log, _LOG2) * power, _expanded(count, power)
            elif j < len(text) and text[j] == "!":
                log, i = _power_of_ten(log) * max(log, _LOG2), j + 1  # n! <= n^n
            else:
                break
        digits += max(log, _LOG2)
        product, in_product = product * count, True
        expansion = max(expansion, term.expansion, product)
        lettered = lettered or term.lettered
    return Size(digits, max(1.0, terms + product * in_product), expansion, lettered)


def _expanded(terms: float, power: float) -> float:
    """How many terms a sum of `terms` terms, raised to `power`, expands to (at most):
    the multisets of `power` of them, C(terms + power - 1, power)."""
    if terms <= 1 or power <= 1:
        return terms
    if terms > 1e6 or power > 1e6:
        return math.inf
    log = math.lgamma(terms + power) - math.lgamma(power + 1) - math.lgamma(terms)
    return float(round(_power_of_ten(log / math.log(10)), 6))  # lgamma's error aside


def _exponent(text: str, i: int) -> tuple[float, int]:
    """The digits bound of the exponent after a `^` at i - 1, and the index after it: a
    bracket, a run of digits (math-verify reads `9^999` whole), a command or one char."""
    while i < len(text) and text[i] == " ":
        i += 1
    if i >= len(text):
        return 0.0, i
    if text[i] in _OPENING:
        end = _closing(text, i)
        return size(text[i + 1 : end]).digits, end + 1
    if text[i] in _DIGITS:
        end = _digits_end(text, i)
        return _literal_log(text[i:end]), end
    command = _COMMAND.match(text, i)
    return _LOG2, command.end() if command else i + 1


def _nesting(text: str) -> int:
    depth = deepest = 0
    for char in text:
        if char in _OPENING:
            depth += 1
            deepest = max(deepest, depth)
        elif char in _CLOSING:
            depth = max(0, depth - 1)
    return deepest


def _digits_end(text: str, i: int) -> int:
    while i < len(text) and (text[i] in _DIGITS or text[i] in ".,"):
        i += 1
    return i


def _literal_log(literal: str) -> float:
    """log10 of a number written in ASCII digits (commas and a decimal point allowed), >= 0."""
    digits = literal.split(".")[0].replace(",", "")
    if len(digits) > 15:
        return float(len(digits))
    return math.log10(int(digits)) if digits and int(digits) > 0 else 0.0


def _power_of_ten(log: float) -> float:
    """10 ** log, or infinity where a float overflows."""
    return math.inf if log > 300 else 10.0**log


def _closing(text: str, i: int) -> int:
    """The index of the bracket that closes the one at i (of any kind), or len(text)."""
    depth = 0
    for j in range(i, len(text)):
        if text[j] in _OPENING:
            depth += 1
        elif text[j] in _CLOSING:
            depth -= 1
            if depth == 0:
                return j
    return len(text)
