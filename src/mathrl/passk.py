"""pass@k and maj@k: what k samples of one problem are worth, estimated from n >= k of them.

For: evaluation (`mathrl.evaluation`), which draws n samples per held-out
problem and reports, for each k, the mean over problems of these estimates.
Pure arithmetic, no I/O. Not for: deciding which samples are correct (the
task's `evaluate`) or what answer a sample names (its `final_answer`).

Both are the exact expectation, over every subset of k of the n samples
(each equally likely), of "the k samples succeed": an unbiased estimate of
the chance that k fresh samples succeed, which uses all n samples, whatever
their order. Drawing n = k samples and asking "did any succeed" is unbiased
too, but noisier; n > k samples give a steadier estimate of the same value.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from fractions import Fraction

MAX_SAMPLES = 256
"""The most samples per problem an evaluation draws (maj@k's count grows as n x k^2)."""


def pass_at_k(n: int, c: int, k: int) -> float:
    """pass@k from n samples of which c are correct: the chance that k of them hold one.

    The unbiased estimator of Chen et al. (2021), 1 - C(n - c, k) / C(n, k),
    computed as 1 - prod over i = n - c + 1 .. n of (1 - k / i), which never
    forms the large binomials. It is exactly 1 when n - c < k (every k-subset
    then holds a correct sample): the product then has the factor 1 - k / k.
    ValueError unless 1 <= k <= n and 0 <= c <= n.
    """
    _check(n, k)
    if not 0 <= c <= n:
        raise ValueError(f"c must be from 0 to n = {n}, the correct samples (got {c})")
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def majority_at_k(answers: Sequence[str | None], correct: Sequence[bool], k: int) -> float:
    """maj@k from n samples: the chance that the answer most of k of them name is right.

    `answers[i]` is the final answer sample i names (None: it names none),
    `correct[i]` whether sample i is correct. Over every k-subset of the n
    samples, equally likely:

    - the samples that name an answer vote for it; the others do not vote;
    - the answer with the most votes wins; a tie between t answers is
      broken uniformly at random, so a tie the right answer shares counts 1/t;
    - a subset in which no sample names an answer is wrong;
    - an answer is right when any sample naming it is correct (whether an
      answer is right is a property of the answer: samples naming the same
      one differ only in form, which a format reward may grade).

    It returns the exact expectation, counted in integers and divided once.
    maj@1 is the share of samples whose answer is right; maj@n is the vote
    of all n. The count takes up to about n x k^2 / 2 steps (a quarter of a
    second at n = 256 and k = 128: hence MAX_SAMPLES). ValueError unless
    1 <= k <= n and the sequences are as long.
    """
    n = len(answers)
    _check(n, k)
    if len(correct) != n:
        raise ValueError(f"answers and correct must be as long (got {n} and {len(correct)})")
    votes = Counter(a for a in answers if a is not None)
    right = {a for a, ok in zip(answers, correct, strict=True) if a is not None and ok}
    if k == n:  # one subset: the vote of all n samples
        top = max(votes.values(), default=0)
        tied = [a for a, count in votes.items() if count == top]
        return sum(a in right for a in tied) / len(tied) if tied else 0.0
    won = sum((_wins(votes, answer, n, k) for answer in right), Fraction(0))
    return float(won / math.comb(n, k))


def _wins(votes: Counter[str], answer: str, n: int, k: int) -> Fraction:
    """How many k-subsets `answer` wins, a tie between t answers counting 1/t.

    For each number v of its votes in the subset, every other answer must
    get at most v. One named fewer than v times in all n samples never gets
    there: its samples are drawn freely, with those that name nothing. The
    others, the rivals, are counted one by one: `ways[d][t]` is the number
    of ways to draw d samples from the rivals so far with none above v and
    t of them at exactly v.
    """
    others = [count for other, count in votes.items() if other != answer]
    abstaining = n - sum(votes.values())
    total = Fraction(0)
    for v in range(1, min(votes[answer], k) + 1):
        room = k - v  # samples of the subset not voting for `answer`
        free = abstaining + sum(count for count in others if count < v)
        ways: list[list[int]] = [[1]] + [[] for _ in range(room)]
        for count in (count for count in others if count >= v):
            draws = [math.comb(count, x) for x in range(v + 1)]
            grown: list[list[int]] = [[] for _ in range(room + 1)]
            for d, ways_d in enumerate(ways):
                for x in range(min(v, room - d) + 1) if ways_d else ():
                    tie = int(x == v)
                    row = grown[d + x]
                    row.extend([0] * (len(ways_d) + tie - len(row)))
                    for t, w in enumerate(ways_d):
                        row[t + tie] += w * draws[x]
            ways = grown
        mine = math.comb(votes[answer], v)
        for d, ways_d in enumerate(ways):
            rest = math.comb(free, room - d)
            total += sum((Fraction(mine * w * rest, t + 1) for t, w in enumerate(ways_d)), 0)
    return total


def _check(n: int, k: int) -> None:
    if n < 1:
        raise ValueError(f"n must be at least 1 sample (got {n})")
    if not 1 <= k <= n:
        raise ValueError(f"k must be from 1 to n = {n}, the samples drawn (got {k})")
