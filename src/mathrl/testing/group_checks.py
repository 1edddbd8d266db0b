"""The laws of a group reward (`compute_group_rewards`), part of `check_adapter`.

For a task that scores whole groups: the same group gets the same rewards;
shuffling it shuffles them alike; a group that holds the same completion
more than once (as real groups do) gets one reward for each member, and equal
rewards for equal members; and the reference alone in its group, as held-out
evaluation scores each greedy completion, earns what `evaluate` counts as
correct.
"""

from __future__ import annotations

import random
from typing import Any

from mathrl.adapter import Response
from mathrl.testing.inputs import ADVERSARIAL, WRONG
from mathrl.testing.reward_checks import RewardChecks, sampled
from mathrl.text import shown


def check_group_laws(rewards: RewardChecks, problem: Any, reference: Response, where: str) -> None:
    """Deterministic, permutation-equivariant, one reward a member even when members repeat,
    and the reference alone counted correct."""
    c = rewards.c
    group = [reference, *(sampled(rewards.tokenizer, t, "length") for _, t in ADVERSARIAL[:6])]
    names = ["the reference", *(f"{label} cut off" for label, _ in ADVERSARIAL[:6])]
    first = rewards.score(group, problem, where, names)
    again = rewards.score(group, problem, where, names, "the same group again")
    if first is not None and again is not None:
        c.expect(
            first == again,
            f"compute_group_rewards gave one group {shown(first)} then {shown(again)}: "
            "rewards must be deterministic",
            key="group-determinism",
        )
        order = list(range(len(group)))
        random.Random("mathrl.testing/shuffle").shuffle(order)
        shuffled = rewards.score(
            [group[i] for i in order],
            problem,
            where,
            [names[i] for i in order],
            "the group shuffled",
        )
        c.expect(
            shuffled is None or shuffled == [first[i] for i in order],
            "compute_group_rewards is not permutation-equivariant: shuffling the group "
            "changed the rewards, not just their order",
            key="group-equivariance",
        )
    repeats(rewards, problem, reference, where)
    alone(rewards, problem, reference, where)


def repeats(rewards: RewardChecks, problem: Any, reference: Response, where: str) -> None:
    """A group holding the same completions more than once: one reward each, equal for equals."""
    wrong = sampled(rewards.tokenizer, WRONG[1], "length")
    group = [reference, wrong, reference, wrong, wrong]
    label = "a group with repeated completions"
    scores = rewards.score(group, problem, where, label=label)
    rewards.c.expect(
        scores is None or (scores[0] == scores[2] and scores[1] == scores[3] == scores[4]),
        f"compute_group_rewards gave {label} ([the reference, {WRONG[1]!r}] twice, then "
        f"{WRONG[1]!r} once more) {shown(scores, 80)}: equal completions must earn equal rewards "
        "(swapping them leaves the group as it was)",
        key="group-repeats",
    )


def alone(rewards: RewardChecks, problem: Any, reference: Response, where: str) -> None:
    """The reference alone in its group earns a reward that evaluate counts as correct."""
    c = rewards.c
    scores = rewards.score([reference], problem, where, ["the reference"], "the reference alone")
    if scores is None:
        return
    (reward,) = scores
    ok, correct = c.call("evaluate", lambda: rewards.adapter.evaluate([reward]), key="evaluate")
    c.expect(
        not ok or correct == 1.0 or rewards.task.plays_episodes,
        f"compute_group_rewards gives the reference alone in its group {reward:g}, which "
        f"evaluate([{reward:g}]) counts as wrong ({shown(correct)}) on {where}: held-out "
        "evaluation scores each greedy completion in a group of one, so it would count "
        "the reference wrong; a group of one must earn a correct completion full credit",
        key="group-alone",
    )
