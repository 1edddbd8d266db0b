"""`mathrl.pairwise.win_rates`: a group's members scored against each other."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

import strategies as st_
from mathrl.pairwise import win_rates

Table = dict[tuple[int, int], float]


@given(st_.judged_items(), st.data())
def test_shuffling_the_items_shuffles_their_rates_alike_whatever_the_judge(
    judged: tuple[list[int], Table], data: st.DataObject
) -> None:
    items, table = judged
    order = data.draw(st.permutations(range(len(items))))
    rates = win_rates(items, lambda a, b: table[a, b])
    shuffled = win_rates([items[i] for i in order], lambda a, b: table[a, b])
    assert shuffled == [rates[i] for i in order]  # exactly: the sums are exact (math.fsum)


@given(st_.judged_items())
def test_each_rate_is_in_0_1_and_equal_items_tie(judged: tuple[list[int], Table]) -> None:
    items, table = judged
    rates = win_rates(items, lambda a, b: table[a, b])
    assert len(rates) == len(items)
    assert all(0.0 <= r <= 1.0 for r in rates)
    for i, a in enumerate(items):
        for j, b in enumerate(items):
            if a == b:
                assert rates[i] == rates[j]


@given(st_.judged_items(antisymmetric=True))
def test_the_rates_average_one_half_for_an_antisymmetric_judge(
    judged: tuple[list[int], Table],
) -> None:
    # The mean-1/2 trap: every comparison gives one side what it takes from the other.
    items, table = judged
    rates = win_rates(items, lambda a, b: table[a, b])
    if items:
        assert math.isclose(math.fsum(rates) / len(rates), 0.5, abs_tol=1e-12)
    # Asking both ways changes nothing for a judge that is antisymmetric already.
    for i, a in enumerate(items):
        plain = [table[a, b] for j, b in enumerate(items) if j != i]
        assert math.isclose(rates[i], sum(plain) / len(plain) if plain else 0.5, abs_tol=1e-12)


@given(st_.judged_items())
def test_the_rates_average_one_half_for_any_judge(judged: tuple[list[int], Table]) -> None:
    items, table = judged
    rates = win_rates(items, lambda a, b: table[a, b])
    if items:
        assert math.isclose(math.fsum(rates) / len(rates), 0.5, abs_tol=1e-12)


def test_win_rates_worked_example() -> None:
    # The shorter summary wins: "ab" beats both others (1, 1), "abcd" loses both (0, 0), and
    # "abc" beats "abcd" and loses to "ab": (1 + 0) / 2. Mean (1 + 0.5 + 0) / 3 = 1/2.
    summaries = ["abc", "ab", "abcd"]
    assert win_rates(summaries, lambda a, b: len(a) < len(b)) == [0.5, 1.0, 0.0]
    # Equal lengths tie: neither is shorter, either way round.
    assert win_rates(["xy", "ab", "abc"], lambda a, b: len(a) < len(b)) == [0.75, 0.75, 0.0]
    # A judge that always prefers the first it is shown favours no one.
    assert win_rates(["a", "b", "c"], lambda a, b: 1.0) == [0.5, 0.5, 0.5]
    # Alone (a held-out completion is scored in a group of one): 1/2. None: none.
    assert win_rates(["a"], lambda a, b: 1.0) == [0.5]
    assert win_rates([], lambda a, b: 1.0) == []


@pytest.mark.parametrize("said", [2.0, -0.5, float("nan"), "yes", None])
def test_a_judge_that_says_what_is_not_an_outcome_is_named(said: object) -> None:
    with pytest.raises(ValueError, match=r"^compare must return a number in \[0, 1\], 1 when "):
        win_rates(["a", "b"], lambda a, b: said)  # type: ignore[arg-type, return-value]
