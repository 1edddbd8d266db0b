"""Pairwise rewards: each member of a group scored by how it fares against the others.

For: a task whose judge can only say which of two completions is better (a
preference model, "the shorter complete summary wins"), in its
`compute_group_rewards`: `win_rates(responses, compare)` gives each
completion its mean outcome against every other member of its group. Not
for: scoring a completion alone (`compute_reward`).

The mean-1/2 trap. In every group the win rates average 1/2, however good
the whole group is: each comparison gives one side what it takes from the
other. So a reward made of win rates alone has the same mean at every step,
and the mean reward never rises, whatever the model learns. Worse, a
held-out completion is scored alone, in a group of one, whose win rate is
1/2: `evaluate` cannot tell a good answer from a bad one. GRPO still learns
from the differences within each group, but no curve shows it.

The remedy is an absolute part beside the rate, which a completion earns on
its own: beating a fixed baseline answer, passing a check, keeping to a
length. `mathrl.tasks.preference` pays 0.3 x the win rate plus 0.7 for
beating its baseline answer, and counts a completion correct when it earns
the 0.7: its mean reward rises as the model learns, and its accuracy means
something.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TypeVar

from mathrl.text import shown

T = TypeVar("T")


def win_rates(items: Sequence[T], compare: Callable[[T, T], float]) -> list[float]:
    """Each item's win rate against the others: its mean outcome over every other item
    (1 a win, 1/2 a tie, 0 a loss), in [0, 1]; 1/2 for an item alone.

    `compare(a, b)` is a's outcome against b: a number in [0, 1], or True/False
    ("a beats b"). It is asked both ways for every pair, and a's outcome against
    b is 1/2 + (compare(a, b) - compare(b, a)) / 2. So a judge that favours
    whichever item it sees first (as language-model judges do) favours no one,
    equal items tie, shuffling the items shuffles their rates alike (the rates
    are permutation-equivariant whatever `compare` is, as
    `compute_group_rewards` must be), and the rates average 1/2 (up to
    rounding). That is n(n - 1) calls of `compare` for n items. See the module
    docstring for why win rates alone make a poor reward.

    Raises ValueError, naming what it got, if `compare` returns anything else.
    """
    outcomes = {
        (i, j): _outcome(compare(a, b))
        for i, a in enumerate(items)
        for j, b in enumerate(items)
        if i != j
    }
    rates = []
    for i in range(len(items)):
        # i's outcome against j, the judge asked both ways; summed exactly, in any order.
        against = [0.5 + (outcomes[i, j] - outcomes[j, i]) / 2 for j in range(len(items)) if j != i]
        rates.append(math.fsum(against) / len(against) if against else 0.5)
    return rates


def _outcome(value: object) -> float:
    """`compare`'s answer as a float in [0, 1]; ValueError if it is not one."""
    if isinstance(value, int | float) and 0 <= value <= 1:
        return float(value)
    raise ValueError(
        f"compare must return a number in [0, 1], 1 when its first argument wins "
        f"(got {shown(value)})"
    )
