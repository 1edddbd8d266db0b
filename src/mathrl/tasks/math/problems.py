"""The math task's problems: rows made problems, the held-out split, and the epoch shuffle.

For: the math task. Pure functions, no I/O (the rows come from
`mathrl.tasks.math.sources`). Not for: prompts or grading.

Drawing: training step k (1, 2, ...) of a run seeded `seed` at `size`
problems a step takes positions (k-1) x size to k x size - 1 of one endless
stream, made of epochs one after another; each epoch is the training
problems in an order shuffled by (seed, epoch) alone. So within an epoch no
problem repeats and every one comes once, and any process, at any step,
computes the same problems from (seed, step, size) without drawing the
steps before.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from mathrl.adapter import OptionError
from mathrl.tasks.math.answers import final_answer
from mathrl.text import shown

SPLIT_SEED = "mathrl/math/heldout-split"
"""Seeds the held-out split of a training source without a test source: the same for every
run, so runs on one file evaluate on one set."""


@dataclass(frozen=True, slots=True)
class MathProblem:
    """One problem: its question, its gold final answer, and its answer field as written."""

    question: str
    answer: str
    """The gold final answer (`answers.final_answer` of `solution`)."""
    solution: str
    """The answer field: a worked solution (GSM8K's, MATH's) or the bare answer."""


@dataclass(frozen=True, slots=True)
class Problems:
    """A source's problems, and how many of its rows were left out (no question or answer)."""

    problems: tuple[MathProblem, ...]
    skipped: int


def problems_of(
    rows: Sequence[Mapping[str, object]], question: str, answer: str, option: str
) -> Problems:
    """The problems in `rows`, from fields `question` and `answer`.

    A row whose question is empty, or whose answer states no final answer
    (`answers.final_answer`), is left out and counted. OptionError (for the
    option naming the missing field) when a row lacks a field, or (for
    `option`, the source) when no row is left.
    """
    problems, skipped = [], 0
    for number, row in enumerate(rows, 1):
        for field, name in ((question, "question"), (answer, "answer")):
            if field not in row:
                raise OptionError(
                    name,
                    f"{name} must name a field of {option}'s rows: row {number} has no "
                    f"{shown(field)} (its fields: {', '.join(map(repr, row)) or 'none'})",
                )
        text, solution = _text(row[question]), _text(row[answer])
        gold = final_answer(solution) if solution is not None else None
        if not text or gold is None or solution is None:
            skipped += 1
            continue
        problems.append(MathProblem(text, gold, solution.strip()))
    if not problems:
        raise OptionError(
            option,
            f"{option} must hold at least one problem with a question and a final answer "
            f"(got {len(rows)} rows, none usable)",
        )
    return Problems(tuple(problems), skipped)


def _text(value: object) -> str | None:
    """A field's value as text: a string, or a number written as one (`72` in JSON)."""
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return None


def split_heldout(
    problems: Sequence[MathProblem], share: float
) -> tuple[tuple[MathProblem, ...], tuple[MathProblem, ...]]:
    """(training, held-out): a seeded `share` of the distinct questions held out, at least one,
    and every copy of a question on the same side. OptionError when fewer than two remain."""
    questions = list(dict.fromkeys(p.question for p in problems))
    if len(questions) < 2:
        raise OptionError(
            "heldout",
            "heldout needs a training source of at least two distinct questions to split, "
            f"or a test source (got {len(questions)})",
        )
    random.Random(SPLIT_SEED).shuffle(questions)
    count = min(len(questions) - 1, max(1, round(share * len(questions))))
    held = set(questions[:count])
    return without(problems, held), tuple(p for p in problems if p.question in held)


def without(problems: Sequence[MathProblem], questions: set[str]) -> tuple[MathProblem, ...]:
    """`problems` less those whose question is one of `questions`."""
    return tuple(p for p in problems if p.question not in questions)


def epoch_draw(count: int, seed: int, step: int, size: int) -> list[int]:
    """Which of `count` training problems step `step` takes (see the module docstring)."""
    first = (step - 1) * size
    return [epoch_order(count, seed, i // count)[i % count] for i in range(first, first + size)]


@functools.lru_cache(maxsize=64)
def epoch_order(count: int, seed: int, epoch: int) -> tuple[int, ...]:
    """The order of `count` problems in epoch `epoch` of a run seeded `seed`.

    Seeding `random.Random` with a string hashes it with SHA-512: the same in
    every process, unlike `hash()`.
    """
    order = list(range(count))
    random.Random(f"mathrl/math/seed={seed}/epoch={epoch}").shuffle(order)
    return tuple(order)
