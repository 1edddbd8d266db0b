"""Two-digit addition: the first task adapter, and its pure pieces.

Problem generation, answer parsing and the reward live here as plain functions
so each can be property-tested on its own. No I/O, no model, no mint.

The 10,000 problems are split once, by a hash of each problem, into a
training pool and a held-out pool of about a tenth, so no held-out problem is
ever a training problem, at any seed or step.
"""

from __future__ import annotations

import functools
import hashlib
import random
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

FEWSHOT = "Q: What is 4 + 5?\nA: 9\n\n"
"""The seed demo's one-shot example, prepended to every question."""

OPERAND_MAX = 99
"""Operands range over 0..OPERAND_MAX inclusive."""

HELDOUT_EVERY = 10
"""About one problem in HELDOUT_EVERY is held out (chosen by hash, not by value)."""

_FIRST_INTEGER = re.compile(r"-?[0-9]+")
"""ASCII digits only: `\\d` (and int()) also take look-alikes, full-width digits say."""
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


def all_problems() -> Iterator[AdditionProblem]:
    """Every problem the task has (10,000 of them), held-out ones included."""
    for a in range(OPERAND_MAX + 1):
        for b in range(OPERAND_MAX + 1):
            yield AdditionProblem(a, b)


def is_heldout(problem: AdditionProblem) -> bool:
    """True for the problems kept out of training (a fixed tenth, by hash)."""
    digest = hashlib.blake2b(f"{problem.a}+{problem.b}".encode(), digest_size=4).digest()
    return int.from_bytes(digest, "little") % HELDOUT_EVERY == 0


@functools.cache
def pools() -> tuple[tuple[AdditionProblem, ...], tuple[AdditionProblem, ...]]:
    """(training pool, held-out pool): split on first use, not at import."""
    training = tuple(p for p in all_problems() if not is_heldout(p))
    return training, tuple(p for p in all_problems() if is_heldout(p))


def problem_rng(seed: int, step: int, stream: str = "train") -> random.Random:
    """Return the private RNG for one step of one run.

    Seeding `random.Random` with a string hashes it with SHA-512, which is
    stable across processes (unlike `hash()`). `stream` keeps training and
    held-out draws apart for the same seed.
    """
    return random.Random(f"mathrl/{stream}/seed={seed}/step={step}")


def make_problems(rng: random.Random, size: int) -> list[AdditionProblem]:
    """Draw `size` training problems from `rng`, uniformly from the training pool."""
    training, _ = pools()
    return [rng.choice(training) for _ in range(size)]


def heldout_problems(seed: int, size: int) -> list[AdditionProblem]:
    """`size` held-out problems: a seeded shuffle of the held-out pool, repeated if need be."""
    pool = list(pools()[1])
    problem_rng(seed, 0, stream="heldout").shuffle(pool)
    return [pool[i % len(pool)] for i in range(size)]


def parse_answer(text: str) -> int | None:
    """Return the first integer in `text` (optional minus, then digits), or None.

    This is the seed's rule, in ASCII digits: the seed's `\\d` also matched
    full-width and other scripts' digits, which a model can write to look right.
    It never raises: any string is a valid input.
    """
    match = _FIRST_INTEGER.search(text)
    if match is None:
        return None
    sign, digits = match.group()[:1], match.group().lstrip("-")
    return -_digits_to_int(digits) if sign == "-" else _digits_to_int(digits)


def _digits_to_int(digits: str) -> int:
    # int() refuses strings of more than 4,300 digits (CVE-2020-10735); convert
    # such runs in chunks so a pathological completion still parses.
    value = 0
    for start in range(0, len(digits), _CHUNK):
        chunk = digits[start : start + _CHUNK]
        value = value * 10 ** len(chunk) + int(chunk)
    return value


def named_answer(text: str) -> str | None:
    """The first integer in `text` as `str(parse_answer(text))` writes it, or None.

    Written from the digits themselves, never through int(): str() refuses
    integers of more than 4,300 digits, and this must never raise.
    """
    match = _FIRST_INTEGER.search(text)
    if match is None:
        return None
    digits = match.group().lstrip("-").lstrip("0") or "0"
    return f"-{digits}" if match.group().startswith("-") and digits != "0" else digits


def reward(completion: str, answer: int) -> float:
    """1.0 when the completion's first integer is `answer`, else 0.0."""
    return 1.0 if parse_answer(completion) == answer else 0.0


class MathAdapter:
    """The seed's `VerifiableMathAdapter`, typed and seeded, with held-out problems."""

    name = "addition"
    stop = ("\n",)
    """The answer is one line: " 42" then the newline."""
    max_tokens = 8
    """The seed page's default token budget."""
    cut_off_graded: str | None = (
        "the seed's reward reads the first integer a completion writes, however it ended, and "
        "this task keeps the seed's reward and output byte for byte: a sum is written in its "
        "first tokens, so a completion cut off after them still states it"
    )

    def build_dataset(self, seed: int, step: int, size: int) -> list[AdditionProblem]:
        return make_problems(problem_rng(seed, step), size)

    def heldout_dataset(self, seed: int, size: int) -> list[AdditionProblem]:
        return heldout_problems(seed, size)

    def make_prompt(self, problem: AdditionProblem) -> str:
        return FEWSHOT + problem.question

    def compute_reward(self, completion: str, problem: AdditionProblem) -> float:
        return reward(completion, problem.answer)

    def reference_completion(self, problem: AdditionProblem) -> str:
        # The few-shot example answers as "A: 9": a space, then the number.
        return f" {problem.answer}"

    def evaluate(self, rewards: Sequence[float]) -> float:
        return sum(1 for r in rewards if r > 0) / len(rewards) if rewards else 0.0

    def final_answer(self, completion: str) -> str | None:
        """The integer the completion answers (what the reward reads), for maj@k."""
        return named_answer(completion)
