"""`mathrl.testing.check_adapter` on adapters broken one way each: every check can fail."""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from typing import Any

import pytest

from mathrl.tasks.addition import AdditionProblem, MathAdapter
from mathrl.testing import check_adapter, random_texts


def violations(adapter: Any, **options: Any) -> list[str]:
    with pytest.raises(AssertionError) as excinfo:
        check_adapter(adapter, **options)
    return [line.removeprefix("- ") for line in str(excinfo.value).splitlines()[1:]]


class EmptyPrompt(MathAdapter):
    def make_prompt(self, problem: AdditionProblem) -> str:
        return ""


class WrongSize(MathAdapter):
    def build_dataset(self, seed: int, step: int, size: int) -> list[AdditionProblem]:
        return super().build_dataset(seed, step, size + 1)


class SameEveryStep(MathAdapter):
    def build_dataset(self, seed: int, step: int, size: int) -> list[AdditionProblem]:
        return super().build_dataset(0, 1, size)


class BrokenHeldout(MathAdapter):
    def heldout_dataset(self, seed: int, size: int) -> list[AdditionProblem]:
        raise RuntimeError("no held-out problems")


class HeldoutIsTraining(MathAdapter):
    def heldout_dataset(self, seed: int, size: int) -> list[AdditionProblem]:
        return self.build_dataset(seed, 1, size)


class NotAString(MathAdapter):
    def reference_completion(self, problem: AdditionProblem) -> str:
        return problem.answer  # type: ignore[return-value]


class StopInReference(MathAdapter):
    def reference_completion(self, problem: AdditionProblem) -> str:
        return f" {problem.answer}\n"


class StopCostsReward(MathAdapter):
    def compute_reward(self, completion: str, problem: AdditionProblem) -> float:
        return 0.5 if completion.endswith("\n") else super().compute_reward(completion, problem)


class BeatsTheReference(MathAdapter):
    def compute_reward(self, completion: str, problem: AdditionProblem) -> float:
        return 2.0 if len(completion) > 1000 else super().compute_reward(completion, problem)


class ReturnsBool(MathAdapter):
    def compute_reward(self, completion: str, problem: AdditionProblem) -> float:
        return completion.strip() == str(problem.answer)  # a bool is a float to mypy, not to us


class TooLongForItsBudget(MathAdapter):
    max_tokens = 2


class RaisingReference(MathAdapter):
    def reference_completion(self, problem: AdditionProblem) -> str:
        if problem.a % 2:
            raise ValueError("odd")
        return super().reference_completion(problem)


class OneAnswer:
    """Every problem has the same reference: no other reference can serve as a wrong answer."""

    def build_dataset(self, seed: int, step: int, size: int) -> list[int]:
        rng = random.Random(f"one/{seed}/{step}")
        return [rng.randint(0, 10**6) for _ in range(size)]

    def make_prompt(self, problem: int) -> str:
        return f"{problem}: say yes"

    def compute_reward(self, completion: str, problem: int) -> float:
        return 1.0 if completion.strip() == "yes" else 0.0

    def reference_completion(self, problem: int) -> str:
        return " yes"

    def evaluate(self, rewards: Sequence[float]) -> float:
        return sum(rewards) / len(rewards) if rewards else 0.0


@pytest.mark.parametrize(
    ("adapter", "expected"),
    [
        (EmptyPrompt(), r"^make_prompt must return a non-empty str \(got \['', ''\] for "),
        (WrongSize(), r"^build_dataset\(seed=0, step=1, size=8\) must return a list of exactly "
                      r"8 problems \(got 9\)$"),
        (SameEveryStep(), r"^build_dataset gave the same problems for \(seed=0, step=1\) and "),
        (BrokenHeldout(), r"^heldout_dataset\(seed=0, size=32\) raised RuntimeError: no held-out"),
        (HeldoutIsTraining(), r"^heldout_dataset\(seed=0, size=32\) shares \d+ of 32 prompts with "
                              r"training steps 1-10 \(size 8\)"),
        (NotAString(), r"^reference_completion\(.*\) must return a str \(got \d+\)$"),
        (StopInReference(), r"contains the stop sequence '\\n', so sampling would stop before"),
        (StopCostsReward(), r"^compute_reward\(reference \+ '\\n', .*\) = 0\.5 but the reference "
                            r"alone earns 1\.0"),
        (BeatsTheReference(), r"^compute_reward\(10,000 characters, .*\) = 2\.0 beats the "
                              r"reference's 1\.0"),
        (ReturnsBool(), r"^compute_reward\(the reference completion, .*\) returned True: a reward "
                        r"must be a finite float$"),
        (RaisingReference(), r"^reference_completion\(.*\) raised ValueError: odd$"),
    ],
)  # fmt: skip
def test_each_check_names_what_it_found(adapter: Any, expected: str) -> None:
    found = violations(adapter)
    assert any(re.search(expected, line) for line in found), found


def test_the_learning_check_needs_the_reference_to_fit_the_budget() -> None:
    (line,) = violations(TooLongForItsBudget(), learns=True)
    assert re.fullmatch(
        r"reference_completion\(.*\) with its stop and end-of-sequence takes \d tokens on the "
        r"fake backend's byte tokenizer, more than max_tokens=2",
        line,
    )


def test_a_task_with_one_answer_is_still_checked_against_wrong_text() -> None:
    assert check_adapter(OneAnswer()).startswith("task 'OneAnswer'")


def test_something_that_is_not_an_adapter_fails_with_one_violation() -> None:
    with pytest.raises(AssertionError, match=r"^1 violation of the Adapter contract:\n- int is"):
        check_adapter(3)  # type: ignore[arg-type]


def test_random_texts_are_seeded_and_varied() -> None:
    texts = random_texts(12)
    assert texts == random_texts(12)
    assert len(set(texts)) == 12
    assert any(max(map(ord, t)) > 0xFFFF for t in texts)
