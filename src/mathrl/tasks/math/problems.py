"""The math task's problems: what a row must hold to be one.

For: the math task. Pure functions, no I/O (the rows come from
`mathrl.tasks.dataset.sources`, and `mathrl.tasks.dataset.rows` checks them
all, drops duplicates, splits and draws). Not for: prompts or grading.

A row is a problem when its question field holds text and its answer field
states a final answer (`answers.final_answer`): GSM8K's last line `#### 72`,
MATH's last `\\boxed{...}`, or a bare answer, one line that is the answer
alone (a number or an expression, with at most two words: `4.5`,
`\\frac{3}{4}`, `5 cm`; `She has 7 apples.` is a sentence, not an answer).
A file whose answers are mostly in one of the two formats must have every
answer in it: a GSM8K answer without its `####` line would otherwise make
its whole reasoning the gold answer, which no model writes.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from mathrl.tasks.dataset.rows import BadRow, Keyed, field_text
from mathrl.tasks.dataset.sources import Row
from mathrl.tasks.math.answers import BOXED, GSM_MARK, boxed_span, final_answer

Format = Literal["gsm8k", "math"]
MAX_WORDS = 2
"""The most words (two letters or more, outside LaTeX commands) a bare answer may hold."""
_COMMAND = re.compile(r"\\[A-Za-z]+")
_WORD = re.compile(r"[A-Za-z]{2,}")


@dataclass(frozen=True, slots=True)
class MathProblem:
    """One problem: its question, its gold final answer, and its answer field as written."""

    question: str
    answer: str
    """The gold final answer (`answers.final_answer` of `solution`)."""
    solution: str
    """The answer field: a worked solution (GSM8K's, MATH's) or the bare answer."""


def answer_format(rows: Sequence[Row], field: str) -> Format | None:
    """The format most rows' answer field is in (more than half of them), if one is."""
    texts = [str(row[field]) for row in rows if isinstance(row.get(field), str)]
    if sum(GSM_MARK in t for t in texts) * 2 > len(rows):
        return "gsm8k"
    if sum(boxed_span(t) is not None for t in texts) * 2 > len(rows):
        return "math"
    return None


def make_problem(row: Row, question: str, answer: str, expected: Format | None) -> MathProblem:
    """The problem row `row` is; BadRow naming the field when it is none (module docstring)."""
    text = field_text(row, question, "the question")
    solution = field_text(row, answer, "the answer")
    gold = final_answer(solution)
    if expected == "gsm8k" and GSM_MARK not in solution:
        raise BadRow(
            answer,
            f"has no '{GSM_MARK} ANSWER' line, as most of this file's answers have (GSM8K's "
            "format): without it the whole text would be the gold answer",
        )
    if expected == "math" and boxed_span(solution) is None:
        raise BadRow(
            answer,
            f"has no closed {BOXED}{{ANSWER}}, as most of this file's answers have (MATH's format)",
        )
    if gold is None:
        raise BadRow(
            answer,
            f"states no final answer: no closed {BOXED}{{}}, no '{GSM_MARK}' line, and not one "
            "line",
        )
    bare = GSM_MARK not in solution and boxed_span(solution) is None
    if bare and len(_WORD.findall(_COMMAND.sub(" ", gold))) > MAX_WORDS:
        raise BadRow(
            answer,
            f"is a sentence, not an answer: a bare answer is the answer alone (at most "
            f"{MAX_WORDS} words); end a worked solution with '{GSM_MARK} ANSWER' or "
            f"{BOXED}{{ANSWER}}",
        )
    return MathProblem(text, gold, solution)


def keyed(problem: MathProblem, where: str) -> Keyed[MathProblem]:
    """`problem` as the rows module compares it: by its question, asking for its answer."""
    return Keyed(problem, problem.question, problem.answer, where)
