"""Two-digit addition: the first task adapter, and its pure pieces.

Problem generation, answer parsing and the reward live here as plain functions
so each can be property-tested on its own. No I/O, no model, no mint.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

FEWSHOT = "Q: What is 4 + 5?\nA: 9\n\n"
"""The seed demo's one-shot example, prepended to every question."""

OPERAND_MAX = 99
"""Operands are drawn uniformly from 0..OPERAND_MAX inclusive."""

_FIRST_INTEGER = re.compile(r"-?\d+")
_CHUNK = 4000


@dataclass(frozen=True, slots=True)
class AdditionProblem:
    """`a + b`, with the question and the answer derived from the same pair.

    The seed script drew the question's numbers independently of the label;
    deriving both from one pair makes that defect unrepresentable.
    """

    a: int
    b: int

    @property
    def question(self) -> str:
        return f"Q: What is {self.a} + {self.b}?\nA:"

    @property
    def answer(self) -> int:
        return self.a + self.b


def problem_rng(seed: int, step: int, stream: str = "train") -> random.Random:
    """Return the private RNG for one step of one run.

    Seeding `random.Random` with a string hashes it with SHA-512, which is
    stable across processes (unlike `hash()`). `stream` keeps training and
    held-out problems apart for the same seed.
    """
    return random.Random(f"mathrl/{stream}/seed={seed}/step={step}")


def make_problems(rng: random.Random, size: int) -> list[AdditionProblem]:
    """Draw `size` problems from `rng`, each operand uniform in 0..99."""
    return [
        AdditionProblem(rng.randint(0, OPERAND_MAX), rng.randint(0, OPERAND_MAX))
        for _ in range(size)
    ]


def heldout_problems(seed: int, size: int) -> list[AdditionProblem]:
    """Problems for evaluation, from an RNG stream training never draws from."""
    return make_problems(problem_rng(seed, 0, stream="heldout"), size)


def all_problems() -> Iterator[AdditionProblem]:
    """Every problem the task can generate (10,000 of them)."""
    for a in range(OPERAND_MAX + 1):
        for b in range(OPERAND_MAX + 1):
            yield AdditionProblem(a, b)


def parse_answer(text: str) -> int | None:
    """Return the first integer in `text` (optional minus, then digits), or None.

    This is the seed's rule. It never raises: any string is a valid input.
    """
    match = _FIRST_INTEGER.search(text)
    if match is None:
        return None
    sign, digits = match.group()[:1], match.group().lstrip("-")
    return -_digits_to_int(digits) if sign == "-" else _digits_to_int(digits)


def _digits_to_int(digits: str) -> int:
    # int() refuses strings of more than 4,300 digits (CVE-2020-10735); convert
    # such runs in chunks so a pathological completion still parses.
    # `\d` also matches non-ASCII decimal digits, which int() accepts too.
    value = 0
    for start in range(0, len(digits), _CHUNK):
        chunk = digits[start : start + _CHUNK]
        value = value * 10 ** len(chunk) + int(chunk)
    return value


def reward(completion: str, answer: int) -> float:
    """1.0 when the completion's first integer is `answer`, else 0.0."""
    return 1.0 if parse_answer(completion) == answer else 0.0


class MathAdapter:
    """The seed's `VerifiableMathAdapter`, typed and seeded."""

    def build_dataset(self, seed: int, step: int, size: int) -> list[AdditionProblem]:
        return make_problems(problem_rng(seed, step), size)

    def make_prompt(self, problem: AdditionProblem) -> str:
        return FEWSHOT + problem.question

    def compute_reward(self, completion: str, problem: AdditionProblem) -> float:
        return reward(completion, problem.answer)

    def reference_completion(self, problem: AdditionProblem) -> str:
        # The few-shot example answers as "A: 9": a space, then the number.
        return f" {problem.answer}"

    def evaluate(self, rewards: Sequence[float]) -> float:
        return sum(1 for r in rewards if r > 0) / len(rewards) if rewards else 0.0
