"""Final answers: where a solution or a completion states one, and the exact value of a number.

For: the math task's grading and its references. Pure functions on strings,
each taking any text and never raising; no I/O and no math-verify (that is
`mathrl.tasks.math.grading`). Not for: deciding whether two answers are
equivalent beyond plain numbers.

The final answer of a text, the dataset's or the model's, is found by one rule:

1. the content of the last `\\boxed{...}` (braces nested inside it are kept;
   `\\{` and `\\}` are literal braces), as MATH writes it; none if that box
   never closes;
2. else what follows the last `####` on its line, as GSM8K writes it;
3. else the whole text, when it is one line: a bare number or expression.

A full stop at the end of an answer ends the sentence, not the answer.

An answer longer than MAX_ANSWER_CHARS is no answer: no dataset's is, and a
grader never sees a 10,000-character one (nor is a box read much further:
`boxed_answer`).

What an answer states (`stated`) is its value and its unit, each written one
way, so that the grader compares like with like (`mathrl.tasks.math.grading`
says how):

- LaTeX's spaces (`\\,`, `\\;`, `\\:`, `\\ `, `~`, `\\quad`) are a space; `\\!` is nothing;
- digits grouped in threes by spaces, `{,}` or commas are one number: `12 000`,
  `12\\,000`, `12{,}000` and `x = 12,000` are `12000`. The first group starts
  with 1 to 9, and every group uses the same separator, so `0,111` (a decimal
  comma, to math-verify) and `1 000{,}000` are not. Commas inside brackets
  are left as they are (`(3,100)` may be a point), and math-verify reads them
  as a list's, so a bracket's item that starts with 0 (`\\{1,000\\}`, a set
  of 1 and 0 to math-verify, as is `\\{1,000,000\\}`) states nothing: `stated`
  is None;
- two numbers side by side, nothing but space between them (`2 3`, `0 111`),
  state nothing either. (math-verify would read a product, or a sum.)
- the unit is a trailing `\\text{...}` (or `\\mathrm`, `\\mbox`, ...) of words
  after a value, squared or cubed or not (`5\\text{ cm}^2`), or a degree sign
  (`^\\circ`, `\\text{ degrees}`). Words of scale (`\\text{ million}`) and of
  percent are no unit, nor are `e` and `i`; a unit written without `\\text`
  (`5 cm`) is not found, and math-verify reads its letters as symbols;
- a trailing percent word (`\\text{ percent}`, `%`) is `\\%`, and `\\mathrm{e}` and
  `\\mathrm{i}` (or `\\text`) are `e` and `i`: math-verify's constants.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

MAX_ANSWER_CHARS = 300
"""The longest final answer graded; MATH's longest are about 100 characters."""
BOXED = "\\boxed"
GSM_MARK = "####"

_INTEGER = r"(?:[1-9][0-9]{0,2}(?:,[0-9]{3})+|[0-9]+)"
"""An integer in ASCII digits (int() also takes other scripts' digits), commas every three
(`0,111` is not one: math-verify reads a decimal comma there)."""
_DECIMAL = re.compile(rf"(?P<sign>[+-]?) ?(?P<digits>{_INTEGER}(?:\.[0-9]+)?|\.[0-9]+)")
_SLASH = re.compile(r"(?P<sign>[+-]?) ?(?P<top>[0-9]+)/(?P<bottom>[0-9]+)")
_FRAC = re.compile(
    r"(?P<sign>[+-]?) ?\\[dt]?frac\{(?P<top>[+-]?[0-9]+)\}\{(?P<bottom>[+-]?[0-9]+)\}"
)
_SPACES = re.compile(
    r"\\[,;: ]|\\(?:quad|qquad|thinspace|medspace|thickspace|enspace)(?![A-Za-z])|~|\s+"
)
"""LaTeX's spaces, and runs of white space: one space each."""
_GROUPED = re.compile(
    r"(?<![0-9.,])[1-9][0-9]{0,2}(?P<sep> |\{,\}|,)[0-9]{3}(?:(?P=sep)[0-9]{3})*(?!,?[0-9])"
)
_ZERO_ITEM = re.compile(r"(?<![0-9.,])[1-9][0-9]{0,2}(?:,[0-9]{3})*,0[0-9]{2}(?!,?[0-9])")
"""Comma-grouped digits left in a bracket, one group starting with 0: `\\{1,000\\}`."""
_SIDE_BY_SIDE = re.compile(r"[0-9] [0-9]")
_UNIT = re.compile(
    r"\\(?:text|textrm|textnormal|textup|mathrm|mbox) ?\{(?P<words>[^{}\\]*[A-Za-z][^{}\\]*)\}"
    r"(?: ?\^ ?(?:\{ ?(?P<power>[23]) ?\}|(?P<bare_power>[23])))? ?$"
    r"|(?P<degree>\^ ?(?:\{ ?\\circ ?\}|\\circ)|°|\\degree) ?$"
)
NOT_UNITS = frozenset({"e", "i", "dozen", "hundred", "thousand", "million", "billion", "trillion"})
"""Trailing words that change the value or are a constant, not a unit (with the percents),
singular or plural."""
PERCENT_WORDS = frozenset({"percent", "\\%", "%"})
DEGREE_WORDS = frozenset({"degree", "degrees", "deg"})
_PERCENT = re.compile(r" ?(?:\\text ?\{ ?(?:percent|\\%|%) ?\}|\\%|%| percent)$")
_UPRIGHT = re.compile(r"\\(?:mathrm|text|textrm|mathit) ?\{ ?([ei]) ?\}")
ABSOLUTE_TOLERANCE = Fraction(1, 10**6)
RELATIVE_TOLERANCE = Fraction(1, 10**9)
"""Decimals closer than both are left to math-verify, which compares floats rounded to six
places with fifteen significant digits: the fast path never contradicts it there."""


def boxed_span(text: str, longest: int | None = None) -> tuple[int, int] | None:
    """(start, end) of the content of the last `\\boxed{...}` in `text`, if it is closed
    (within `longest` characters of content, if given)."""
    at = text.rfind(BOXED + "{")
    if at < 0:
        return None
    start = at + len(BOXED) + 1
    depth, i = 1, start
    end = len(text) if longest is None else min(len(text), start + longest + 1)
    while i < end:
        char = text[i]
        if char == "\\":
            i += 2  # an escaped character, `\{` or `\}` among them, opens and closes nothing
            continue
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return start, i
        i += 1
    return None


def boxed_answer(text: str) -> str | None:
    """The content of the last closed `\\boxed{...}` in `text`, stripped; None if there is none
    (or it is empty or longer than MAX_ANSWER_CHARS, or than twice that with its spaces: a
    box is read no further, so a 100,000-character one costs no more than a short one)."""
    span = boxed_span(text, 2 * MAX_ANSWER_CHARS)
    return _answer(text[span[0] : span[1]]) if span else None


def final_answer(text: str) -> str | None:
    """The final answer `text` states, by the module's rule; None if it states none."""
    if BOXED + "{" in text:  # a box, closed or not, is where the answer is
        return boxed_answer(text)
    at = text.rfind(GSM_MARK)
    if at >= 0:
        return _answer(text[at + len(GSM_MARK) :].split("\n", 1)[0])
    line = text.strip()
    return None if "\n" in line else _answer(line)


def _answer(text: str) -> str | None:
    answer = text.strip().removesuffix(".").rstrip()  # the full stop ends a sentence
    return answer if 0 < len(answer) <= MAX_ANSWER_CHARS else None


def balanced(text: str) -> bool:
    """True when `text`'s unescaped braces pair up (so it can stand inside `\\boxed{...}`)."""
    depth, i = 0, 0
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth < 0:
            return False
        i += 1
    return depth == 0


@dataclass(frozen=True, slots=True)
class Stated:
    """What an answer states, as the module docstring says: its value, and its unit ("" if
    it names none)."""

    value: str
    unit: str


def stated(answer: str) -> Stated | None:
    """The value and the unit `answer` states; None when it puts two numbers side by side."""
    text = spaced(answer)
    value, unit = text, ""
    match = _UNIT.search(text)
    head = text[: match.start()].strip() if match else ""
    if match and head:
        words = " ".join((match["words"] or "").split())
        if match["degree"] or words in DEGREE_WORDS:
            value, unit = head, "°"
        elif words.removesuffix("s") not in NOT_UNITS | PERCENT_WORDS:
            power = match["power"] or match["bare_power"]
            value, unit = head, words + (f"^{power}" if power else "")
    value = _UPRIGHT.sub(r"\1", _PERCENT.sub("\\%", value))
    value = joined(value)
    if _SIDE_BY_SIDE.search(value) or _ZERO_ITEM.search(value):
        return None
    return Stated(value, unit)


def units_agree(a: str, b: str) -> bool:
    """False when both units are named and differ, singular and plural aside
    (`cm` = `cms`, `inch` = `inches`); a unit on one side only, or none, agrees."""
    return not a or not b or a == b or a in (b + "s", b + "es") or b in (a + "s", a + "es")


def spaced(text: str) -> str:
    """`text` with each of LaTeX's spaces, and each run of white space, one space; `\\!`
    (a negative space) gone; stripped."""
    return _SPACES.sub(" ", text.replace("\\!", "")).strip()


def joined(text: str) -> str:
    """`text` with digits grouped in threes written as one number (see the module
    docstring): `12 000` is `12000`, and so is `12,000` outside brackets. Give it `spaced`
    text."""

    def one(match: re.Match[str]) -> str:
        if match["sep"] == "," and _depth(text, match.start()) > 0:
            return match[0]  # a list's items, maybe: `(3,100)`
        return match[0].replace(match["sep"], "")

    return _GROUPED.sub(one, text)


def _depth(text: str, at: int) -> int:
    """How many brackets are open at `at`."""
    before = text[:at]
    return sum(before.count(c) for c in "{([") - sum(before.count(c) for c in "})]")


@dataclass(frozen=True, slots=True)
class ExactNumber:
    """A plain number's exact value, and whether it was written with a decimal point."""

    value: Fraction
    decimal: bool


def exact_number(text: str) -> ExactNumber | None:
    """The exact value of `text` if it is a plain number, else None.

    Plain numbers: integers and decimals in ASCII digits (digits grouped in
    threes by commas, spaces or `{,}` allowed: `1,234.5`, `12 000`, see
    `joined`), `a/b` and `\\frac{a}{b}` (`\\dfrac`, `\\tfrac`), each with an
    optional sign, inside optional `$...$`, after an optional currency sign.
    Anything else (`50\\%`, `3\\sqrt{2}`, `5 cm`, `1e3`, `0,111`, `1\\,2`) is
    not a plain number, nor is text longer than MAX_ANSWER_CHARS.
    """
    if len(text) > MAX_ANSWER_CHARS:  # no answer; and int() refuses 4,300 digits and more
        return None
    plain = joined(spaced(text))
    if len(plain) > 1 and plain[0] == plain[-1] == "$":
        plain = plain[1:-1].strip()
    plain = plain.removeprefix("\\$").removeprefix("$").strip()
    if match := _DECIMAL.fullmatch(plain):
        digits = match["digits"].replace(",", "")
        value = Fraction(digits)
        return ExactNumber(-value if match["sign"] == "-" else value, "." in digits)
    match = _SLASH.fullmatch(plain) or _FRAC.fullmatch(plain)
    if match is None or int(match["bottom"]) == 0:
        return None
    value = Fraction(int(match["top"]), int(match["bottom"]))
    return ExactNumber(-value if match["sign"] == "-" else value, False)


def numbers_decide(gold: str, candidate: str) -> bool | None:
    """The fast path: True or False when both answers are plain numbers that settle it.

    Equal values are equal. Unequal values are unequal when neither was
    written as a decimal, or when they differ by more than the tolerances;
    closer decimals (0.333333 against 1/3) are left to math-verify (None), as
    is everything that is not a plain number.
    """
    a, b = exact_number(gold), exact_number(candidate)
    if a is None or b is None:
        return None
    if a.value == b.value:
        return True
    if not (a.decimal or b.decimal):
        return False
    gap = abs(a.value - b.value)
    scale = max(abs(a.value), abs(b.value))
    return False if gap > ABSOLUTE_TOLERANCE and gap > RELATIVE_TOLERANCE * scale else None


def wrong_answer(answer: str) -> str:
    """A plausible answer that is not `answer`: a plain number plus one, else `answer + 1`."""
    number = exact_number(answer)
    if number is None:
        return f"{answer}+1"
    value = number.value + 1
    return (
        str(value.numerator) if value.denominator == 1 else f"{value.numerator}/{value.denominator}"
    )
