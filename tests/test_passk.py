"""pass@k and maj@k (`mathrl.passk`): their properties, and a few worked examples."""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Sequence
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mathrl.passk import MAX_SAMPLES, majority_at_k, pass_at_k
from strategies import sample_counts, voted_samples


def subsets_passing(n: int, c: int, k: int) -> Fraction:
    """pass@k by enumeration: the share of k-subsets of n samples (the first c correct)
    that hold a correct one."""
    subsets = list(itertools.combinations(range(n), k))
    return Fraction(sum(any(i < c for i in s) for s in subsets), len(subsets))


def subsets_voting(answers: Sequence[str | None], correct: Sequence[bool], k: int) -> Fraction:
    """maj@k by enumeration: over every k-subset, the vote's winner, a tie of t counting 1/t."""
    right = {a for a, ok in zip(answers, correct, strict=True) if a is not None and ok}
    subsets = list(itertools.combinations(range(len(answers)), k))
    won = Fraction(0)
    for subset in subsets:
        votes = Counter(answers[i] for i in subset if answers[i] is not None)
        if votes:
            top = max(votes.values())
            tied = [a for a, count in votes.items() if count == top]
            won += Fraction(sum(a in right for a in tied), len(tied))
    return won / len(subsets)


# -- pass@k ---------------------------------------------------------------------------


@given(sample_counts())
def test_pass_at_1_is_the_share_correct(counts: tuple[int, int, int]) -> None:
    n, c, _ = counts
    assert math.isclose(pass_at_k(n, c, 1), c / n, abs_tol=1e-12)


@given(sample_counts(), st.data())
def test_pass_at_k_is_1_when_fewer_than_k_samples_are_wrong(
    counts: tuple[int, int, int], data: st.DataObject
) -> None:
    n, _, k = counts
    c = data.draw(st.integers(n - k + 1, n), label="c, so that n - c < k")
    assert pass_at_k(n, c, k) == 1.0


@given(sample_counts())
def test_pass_at_k_never_falls_as_k_grows_and_stays_in_0_1(counts: tuple[int, int, int]) -> None:
    n, c, _ = counts
    values = [pass_at_k(n, c, k) for k in range(1, n + 1)]
    assert all(0.0 <= v <= 1.0 for v in values)
    assert values == sorted(values)
    assert (values[0] == 0.0) == (c == 0)


@given(sample_counts(max_n=12))
def test_pass_at_k_matches_enumerating_every_subset(counts: tuple[int, int, int]) -> None:
    n, c, k = counts
    assert math.isclose(pass_at_k(n, c, k), subsets_passing(n, c, k), abs_tol=1e-12)


@given(sample_counts(max_n=MAX_SAMPLES))
def test_pass_at_k_is_the_closed_form_of_chen_et_al(counts: tuple[int, int, int]) -> None:
    n, c, k = counts
    exact = 1 - Fraction(math.comb(n - c, k), math.comb(n, k))
    assert math.isclose(pass_at_k(n, c, k), exact, rel_tol=1e-9, abs_tol=1e-12)


def test_pass_at_k_worked_examples() -> None:
    # 4 samples, 1 correct, k=2: 1 - C(3,2)/C(4,2) = 1 - 3/6; as the product, 1 - (1 - 2/4).
    assert pass_at_k(4, 1, 2) == 0.5
    # 16 samples, 4 correct, k=4: 1 - C(12,4)/C(16,4) = 1 - 495/1820 = 265/364.
    assert math.isclose(pass_at_k(16, 4, 4), 265 / 364)
    # 5 samples, 3 correct, k=3: only 2 are wrong, so every 3 of them hold a correct one.
    assert pass_at_k(5, 3, 3) == 1.0
    # Nothing correct: no subset passes.
    assert pass_at_k(8, 0, 8) == 0.0


@pytest.mark.parametrize(
    ("n", "c", "k", "message"),
    [
        (4, 1, 5, "k must be from 1 to n = 4, the samples drawn (got 5)"),
        (4, 1, 0, "k must be from 1 to n = 4, the samples drawn (got 0)"),
        (4, 5, 1, "c must be from 0 to n = 4, the correct samples (got 5)"),
        (0, 0, 1, "n must be at least 1 sample (got 0)"),
    ],
)
def test_pass_at_k_refuses_what_it_cannot_estimate(n: int, c: int, k: int, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        pass_at_k(n, c, k)


# -- maj@k ----------------------------------------------------------------------------


@given(voted_samples(), st.data())
def test_maj_at_k_matches_enumerating_every_subset(
    samples: tuple[list[str | None], list[bool]], data: st.DataObject
) -> None:
    answers, correct = samples
    k = data.draw(st.integers(1, len(answers)))
    assert math.isclose(
        majority_at_k(answers, correct, k), subsets_voting(answers, correct, k), abs_tol=1e-12
    )


@given(voted_samples(max_n=40), st.data())
def test_maj_at_k_is_a_probability_whatever_the_order(
    samples: tuple[list[str | None], list[bool]], data: st.DataObject
) -> None:
    answers, correct = samples
    k = data.draw(st.integers(1, len(answers)))
    value = majority_at_k(answers, correct, k)
    assert 0.0 <= value <= 1.0
    order = data.draw(st.permutations(range(len(answers))))
    shuffled = majority_at_k([answers[i] for i in order], [correct[i] for i in order], k)
    assert math.isclose(shuffled, value, abs_tol=1e-12)


@given(voted_samples(max_n=40))
def test_maj_at_1_is_the_share_of_samples_whose_answer_is_right(
    samples: tuple[list[str | None], list[bool]],
) -> None:
    answers, correct = samples
    right = {a for a, ok in zip(answers, correct, strict=True) if a is not None and ok}
    share = sum(a in right for a in answers) / len(answers)
    assert math.isclose(majority_at_k(answers, correct, 1), share, abs_tol=1e-12)


def test_maj_at_k_worked_examples() -> None:
    answers, correct = ["7", "7", "5", None], [True, True, False, False]
    # k=2, C(4,2) = 6 pairs: {7,7} wins; {7,5} twice, a tie -> 1/2 each; {7,None} twice
    # wins; {5,None} loses: (1 + 1/2 + 1/2 + 1 + 1 + 0) / 6 = 4/6.
    assert math.isclose(majority_at_k(answers, correct, 2), 4 / 6)
    # k=1: the samples naming a right answer, 2 of 4.
    assert majority_at_k(answers, correct, 1) == 0.5
    # k=4: one vote of all, 7 (2 votes) beats 5 (1).
    assert majority_at_k(answers, correct, 4) == 1.0
    # A tie between a right and a wrong answer is broken at random: 1/2.
    assert majority_at_k(["7", "5"], [True, False], 2) == 0.5
    # No sample names an answer: no vote, so wrong, even if a sample was correct.
    assert majority_at_k([None, None], [True, False], 2) == 0.0
    # A right answer named by a sample the reward failed (its format, say) still counts.
    assert majority_at_k(["7", "7", "5"], [True, False, False], 3) == 1.0


@pytest.mark.parametrize("k", [3, 5, 6, 8])
def test_maj_at_k_with_several_rivals_as_strong_is_every_subsets_vote(k: int) -> None:
    # Three answers named three times each and one sample naming none: a subset's rivals
    # reach the right answer's count by several draws at once (two of b and one of c, or one
    # of b and two of c), which the count must add up, not keep the last of.
    answers = [*"aaabbbccc", None]
    correct = [a == "a" for a in answers]
    assert math.isclose(
        majority_at_k(answers, correct, k), subsets_voting(answers, correct, k), abs_tol=1e-12
    )


@pytest.mark.slow
def test_maj_at_k_on_many_samples_is_quick_enough_to_be_exact() -> None:
    # 256 samples over 30 answers, k = 128: the count takes well under a second.
    answers: list[str | None] = [str(i % 30) for i in range(MAX_SAMPLES)]
    value = majority_at_k(answers, [a == "0" for a in answers], MAX_SAMPLES // 2)
    # Answers 0-15 are named 9 times, 16-29 8 times: "0" ties or leads often, never always.
    assert 0.0 < value < 0.5


@pytest.mark.parametrize(
    ("answers", "correct", "k", "message"),
    [
        (["7"], [True], 2, r"k must be from 1 to n = 1, the samples drawn \(got 2\)"),
        (["7", "5"], [True], 1, r"answers and correct must be as long \(got 2 and 1\)"),
        ([], [], 1, r"n must be at least 1 sample \(got 0\)"),
    ],
)
def test_maj_at_k_refuses_what_it_cannot_estimate(
    answers: list[str | None], correct: list[bool], k: int, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        majority_at_k(answers, correct, k)
