"""`check_adapter` draws the problems again in a new interpreter with another hash seed.

Each test here starts a Python process (a few tenths of a second): the tasks
it imports are written to small files, not test modules, so it imports little.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest

from cli_process import run_main
from conftest import BUILT_IN_ARGS
from mathrl.cli.loader import load_task
from mathrl.resolved import as_task
from mathrl.tasks import BUILT_IN
from mathrl.tasks.addition import AdditionProblem, MathAdapter
from mathrl.testing import check_adapter
from mathrl.testing.checker import Checker
from mathrl.testing.new_interpreter import check_across_processes, drawn

HASH_SEEDED = '''
import random

from mathrl.tasks.addition import MathAdapter, make_problems


class HashSeeded(MathAdapter):
    """Seeds its draws with hash() of a string, which differs from process to process."""

    name = "hash-seeded"

    def build_dataset(self, seed, step, size):
        return make_problems(random.Random(hash(f"sums/{seed}/{step}")), size)


class HeldoutHashSeeded(MathAdapter):
    """Draws its held-out problems with hash(); its training problems are sound."""

    name = "heldout-hash-seeded"

    def heldout_dataset(self, seed, size):
        return make_problems(random.Random(hash(f"held-out/{seed}")), size)
'''

GUESS = '''
import random


class Guess:
    """Guess my number: one prompt, one first guess, a secret drawn with hash()."""

    name = "guess"

    def build_dataset(self, seed, step, size):
        rng = random.Random(hash(f"guess/{seed}/{step}"))
        return [rng.randint(1, 10**9) for _ in range(size)]

    def make_prompt(self, problem):
        return "Guess my number:"

    def compute_reward(self, completion, problem):
        return 1.0 if completion.strip() == str(problem) else 0.0

    def reference_completion(self, problem):
        return " 50"

    def evaluate(self, rewards):
        return sum(r == 1.0 for r in rewards) / len(rewards) if rewards else 0.0


class Shorter(Guess):
    """Draws one problem fewer in a process whose hash seed the checker set."""

    def build_dataset(self, seed, step, size):
        import os

        rng = random.Random(f"guess/{seed}/{step}")
        short = os.environ.get("PYTHONHASHSEED") in ("1", "2")
        return [rng.randint(1, 10**9) for _ in range(size - short)]


class Needy(Guess):
    """A task whose constructor needs what its options do not hold."""

    def __init__(self, secret_source):
        self.source = secret_source
'''


def in_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, source: str) -> Any:
    """The module `name` made of `source`, imported from `tmp_path` (as another process can)."""
    (tmp_path / f"{name}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, name, raising=False)
    return __import__(name)


def drawn_elsewhere(adapter: Any) -> Checker:
    """A checker that drew the problems as check_adapter does, then in a new interpreter."""
    checker = Checker(as_task(adapter))
    checker.dataset((0, 1), (1, 2, 3), 8)
    checker.heldout(0, 32, 10, 8)
    check_across_processes(checker)
    return checker


def test_a_task_seeded_with_hash_is_caught_from_the_command_line(tmp_path: Path) -> None:
    (tmp_path / "hashy.py").write_text(HASH_SEEDED)
    done = run_main(tmp_path, "check-adapter", "hashy.py:HashSeeded")
    assert done.returncode == 1, done.stdout
    # Six draws of build_dataset differ (seeds 0 and 1, steps 1 to 3); the held-out set,
    # the addition task's own, does not.
    found = re.compile(
        r"build_dataset\(seed=0, step=1, size=8\) gave other problems in a new interpreter "
        # Both prompts quoted from just before where they differ: "...What is 12 + 30?".
        r"\(PYTHONHASHSEED=[12]\): problem 0's prompt is \.\.\.'[^']*\d+ \+ \d+\?\\nA:' here, "
        r"\.\.\.'[^']*\d+ \+ \d+\?\\nA:' there; a task must draw the same problems in every "
        r"process \(so a resumed run trains on what the first would have\): seed a "
        r"random\.Random with a string or numbers, never hash\(\) of a string, id\(\), the time "
        r"or the order of a set \(6 times\)"
    )
    assert any(found.fullmatch(line) for line in done.stdout.splitlines()), done.stdout


def test_held_out_problems_seeded_with_hash_are_caught(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = in_module(tmp_path, monkeypatch, "heldout_hashy", HASH_SEEDED)
    checker = drawn_elsewhere(module.HeldoutHashSeeded())
    found = re.compile(
        r"heldout_dataset\(seed=0, size=32\) gave other problems in a new interpreter "
        r"\(PYTHONHASHSEED=[12]\): problem 0's prompt is .* here, .* there; a task must draw "
        r"the same problems in every process .*"
    )
    assert [line for line in checker.report() if found.fullmatch(line)], checker.report()
    assert not any(line.startswith("build_dataset") for line in checker.report())


def test_problems_that_share_a_prompt_and_a_reference_are_told_apart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = in_module(tmp_path, monkeypatch, "guess", GUESS)
    checker = drawn_elsewhere(module.Guess())
    found = re.compile(
        r"build_dataset\(seed=0, step=1, size=8\) gave other problems in a new interpreter "
        r"\(PYTHONHASHSEED=[12]\): problem 0 is \d+ here, \d+ there; a task must draw the same "
        r"problems in every process .*"
    )
    assert any(found.fullmatch(line) for line in checker.report()), checker.report()


def test_a_draw_of_another_size_there_is_told_by_its_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = in_module(tmp_path, monkeypatch, "shorter", GUESS)
    monkeypatch.delenv("PYTHONHASHSEED", raising=False)
    checker = drawn_elsewhere(module.Shorter())
    found = re.compile(
        r"build_dataset\(seed=0, step=1, size=8\) gave other problems in a new interpreter "
        r"\(PYTHONHASHSEED=1\): 8 problems here, 7 there; .*"
    )
    assert any(found.fullmatch(line) for line in checker.report()), checker.report()


def test_a_problem_without_a_fingerprint_is_compared_by_prompt_and_reference() -> None:
    # No fingerprint (nothing of its own to compare): None, and the other parts still count.
    assert drawn(MathAdapter(), AdditionProblem(2, 3))[2] is not None
    assert drawn(Opaque(), object())[:3] == ("the prompt", " 42", None)


class Opaque:
    """A task whose problems are bare objects."""

    def make_prompt(self, problem: object) -> str:
        return "the prompt"

    def reference_completion(self, problem: object) -> str:
        return " 42"


def test_a_task_that_cannot_be_made_there_is_warned_of(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = in_module(tmp_path, monkeypatch, "needy", GUESS)
    checker = drawn_elsewhere(module.Needy("a hat"))
    assert checker.warnings == [
        "build_dataset was not drawn again in a new interpreter: Needy() could not be made "
        "there (TypeError: Needy.__init__() missing 1 required positional argument: "
        "'secret_source')"
    ]


def test_a_task_defined_in_a_function_is_warned_of_without_a_new_interpreter() -> None:
    class Local(MathAdapter):
        pass

    summary = check_adapter(Local())
    assert (
        "warning: build_dataset was not drawn again in a new interpreter: "
        "test_a_task_defined_in_a_function_is_warned_of_without_a_new_interpreter.<locals>.Local "
        "is defined in a function, where another process cannot import it; define the task in "
        "a module to have its problems compared across processes"
    ) in summary.splitlines()


@pytest.mark.parametrize(
    "name",
    [pytest.param(n, marks=pytest.mark.slow) if n == "reasoning-gym" else n for n in BUILT_IN],
)
def test_each_built_in_task_draws_the_same_problems_in_a_new_interpreter(name: str) -> None:
    checker = drawn_elsewhere(load_task(name, task_args=BUILT_IN_ARGS.get(name)).adapter)
    assert checker.violations == []
    assert checker.warnings == []
