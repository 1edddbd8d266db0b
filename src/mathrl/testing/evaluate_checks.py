"""`evaluate`'s part of `check_adapter`: it counts correct completions, never averages rewards.

The rewards it is given are ones the task really produced: the reward checks
score the reference and the task's wrong completions with every ending
sampling can give them, besides wrong and hostile text, so partial credit a
task pays only for some ending is among them. Each reward alone must be
correct (1) or not (0), a list of them their mean, and the reference's reward
correct.
"""

from __future__ import annotations

import math
from functools import partial

from mathrl.testing.checker import Checker
from mathrl.text import shown

MOST = 50
"""How many distinct rewards are evaluated at most."""


def check_evaluate(c: Checker) -> None:
    """evaluate stays in [0, 1], counts each reference's reward correct, and agrees with
    itself: 0 or 1 for one reward, the mean of those for several."""
    seen = _spread(sorted(set(c.seen)), MOST)
    for rewards in ([], [0.0], [1.0, 0.0, 0.5], seen):
        what = f"evaluate({shown(rewards)})"
        ok, value = c.call(what, partial(c.adapter.evaluate, rewards), key="evaluate")
        c.expect(
            not ok or (_is_number(value) and 0 <= value <= 1),
            f"{what} = {shown(value)}: an accuracy must be a number in [0, 1]",
            key="evaluate-range",
        )
    for best in sorted(set(c.references)):
        ok, full = c.call("evaluate", partial(c.adapter.evaluate, [best] * 4), key="evaluate")
        c.expect(
            # An episode's reward holds its turns' too: the episode checks evaluate the whole.
            not ok or full == 1.0 or c.task.plays_episodes,
            f"the reference completion earns {best}, which evaluate([{best}] * 4) scores "
            f"{shown(full)}, not 1.0: reference_completion must return a fully correct "
            "answer, and evaluate must count the maximum reward as correct",
            key="evaluate-reference",
        )
    ok, each = c.call("evaluate", lambda: [c.adapter.evaluate([r]) for r in seen])
    if not ok or not seen:
        return
    ok, all_at_once = c.call("evaluate", partial(c.adapter.evaluate, seen))
    agrees = all(v in (0, 1) for v in each) and (
        _is_number(all_at_once) and math.isclose(all_at_once, sum(each) / len(seen), abs_tol=1e-9)
    )
    c.expect(
        not ok or agrees,
        f"evaluate does not count correct completions: for single rewards it gives "
        f"{shown(dict(zip(seen, each, strict=True)))}, and for all {len(seen)} at once "
        f"{shown(all_at_once)}; each completion is correct (1) or not (0), and the "
        "accuracy is their mean, never the mean reward",
        key="evaluate-agrees",
    )


def _spread(values: list[float], most: int) -> list[float]:
    """At most `most` of `values` (sorted), from all over their range."""
    if len(values) <= most:
        return values
    return [values[round(i * (len(values) - 1) / (most - 1))] for i in range(most)]


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
