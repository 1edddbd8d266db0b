"""`mathrl.problem_keys`: problems told apart by value, the same way in every process."""

from __future__ import annotations

import copy
import enum
import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mathrl.problem_keys import Unfingerprintable, problem_fingerprint, problem_key
from mathrl.tasks.addition import AdditionProblem, MathAdapter
from strategies import problem_values


@dataclass(frozen=True)
class Game:
    secret: int
    hint: object = None
    seen: int = field(default=0, compare=False)


class Colour(enum.Enum):
    RED = 1


class Shade(enum.Enum):
    RED = 1


class Plain:
    def __init__(self, secret: int) -> None:
        self.secret = secret


class Slotted:
    __slots__ = ("secret",)

    def __init__(self, secret: int) -> None:
        self.secret = secret


@given(problem_values)
def test_equal_problems_have_one_fingerprint(value: Any) -> None:
    assert problem_fingerprint(value) == problem_fingerprint(copy.deepcopy(value))


@given(st.dictionaries(st.text(max_size=4), st.integers(), min_size=2, max_size=6))
def test_a_dicts_order_does_not_count(entries: dict[str, int]) -> None:
    backwards = dict(reversed(list(entries.items())))
    assert problem_fingerprint(entries) == problem_fingerprint(backwards)


@given(problem_values, problem_values)
def test_one_fingerprint_is_one_value(a: Any, b: Any) -> None:
    if problem_fingerprint(a) == problem_fingerprint(b):
        assert a == b
        assert type(a) is type(b)


def test_worked_examples() -> None:
    # A game's secret is its value; a field that does not count in == does not count here.
    assert problem_fingerprint(Game(3)) != problem_fingerprint(Game(4))
    assert problem_fingerprint(Game(3, seen=1)) == problem_fingerprint(Game(3, seen=2))
    # 1, 1.0 and True are equal in Python but other problems here (their types differ).
    assert len({problem_fingerprint(v) for v in (1, 1.0, True, "1", (1,), [1])}) == 6
    # Plain objects are their attributes, whether in __dict__ or __slots__.
    assert problem_fingerprint(Plain(3)) == problem_fingerprint(Plain(3))
    assert problem_fingerprint(Slotted(3)) != problem_fingerprint(Slotted(4))
    assert problem_fingerprint(Plain) == problem_fingerprint(Plain)  # a class: by name
    # An enum member is its class and name, not its value.
    assert problem_fingerprint(Colour.RED) != problem_fingerprint(Shade.RED)
    assert len(problem_fingerprint(AdditionProblem(2, 3))) == 32


@pytest.mark.parametrize(
    ("problem", "message"),
    [
        (Game(3, hint=lambda: 3), r"^the problem\.hint is a function, which has no fingerprint"),
        (Game(3, hint=[object()]), r"^the problem\.hint\[0\] is a object, which has no"),
        ({"x": {1: object()}}, r"^the problem\['x'\]\[1\] is a object, which has no"),
    ],
)
def test_a_problem_without_a_fingerprint_says_where_and_what(problem: Any, message: str) -> None:
    with pytest.raises(Unfingerprintable, match=message):
        problem_fingerprint(problem)


def test_a_problem_that_holds_itself_has_no_fingerprint() -> None:
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(Unfingerprintable, match=r"is nested more than 100 deep \(or holds"):
        problem_fingerprint(loop)


def test_a_problem_without_a_fingerprint_is_known_by_its_prompt() -> None:
    class Opaque:
        """No attributes: nothing to fingerprint."""

    adapter = MathAdapter()
    assert problem_key(adapter, AdditionProblem(2, 3)) == problem_fingerprint(AdditionProblem(2, 3))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(adapter, "make_prompt", lambda problem: "the prompt")
        assert problem_key(adapter, Opaque()) == "prompt:the prompt"


def test_a_set_of_strings_has_one_fingerprint_whatever_the_hash_seed() -> None:
    # A set's order (and pickle's bytes for it) changes with PYTHONHASHSEED; its fingerprint
    # does not.
    script = (
        "import json; from mathrl.problem_keys import problem_fingerprint as f; "
        "print(json.dumps([f(frozenset({'apple', 'pear', 'plum', 'fig'})), "
        "str(list({'apple', 'pear', 'plum', 'fig'}))]))"
    )
    runs = [
        json.loads(
            subprocess.run(
                [sys.executable, "-c", script],
                env={**os.environ, "PYTHONHASHSEED": seed},
                capture_output=True,
                text=True,
                check=True,
            ).stdout
        )
        for seed in ("1", "2")
    ]
    assert len({fingerprint for fingerprint, _ in runs}) == 1
    assert len({order for _, order in runs}) > 1  # the set's own order did change
