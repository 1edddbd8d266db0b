"""From sampled tokens to rewards: how each completion ended, and what the task made of it.

For: the step, evaluation and `check_adapter`, which all score completions
the same way. `response_of` is pure; `rewards_of` calls the task's own
reward (`compute_reward`, or `compute_group_rewards` for a whole group, plain
or `async`). A task's method that raises, or returns what is not a reward,
raises `TaskError`: one line naming the task, the method, the error and a
shortened input, so a run can stop cleanly.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeGuard, TypeVar

from mathrl.adapter import Response
from mathrl.backend import Tokenizer
from mathrl.resolved import Task
from mathrl.text import describe, shown

P = TypeVar("P")


class TaskError(Exception):
    """A task's own method failed during a run. The message names the task, method and input."""

    def __init__(self, task: Task[Any], method: str, exc: BaseException, given: object) -> None:
        super().__init__(
            f"task {task.name!r} failed: {method} raised {type(exc).__name__}: "
            f"{describe(exc, 200)} (on {shown(given, 60)})"  # a Response shows as its text
        )
        self.task_identity = task.identity
        self.method = method


@dataclass(frozen=True, slots=True)
class Scores:
    """A group's (or batch's) rewards: each completion's total, and its named parts."""

    rewards_P_G: list[list[float]]
    parts_P_G: list[list[dict[str, float]]]


def response_of(
    tokenizer: Tokenizer, tokens_T: Sequence[int], stop: Sequence[str], chat: bool
) -> Response:
    """The completion's text as a reward sees it, and how sampling ended it.

    Sampling stops only at a stop sequence, at end-of-sequence (or, for a
    conversation, end-of-turn), or at the token limit: a completion that ends
    at none of them ran out of tokens. The end-of-sequence and end-of-turn
    tokens are not part of the text.
    """
    last = tokens_T[-1] if tokens_T else None
    if chat and last == tokenizer.end_of_turn_id:
        return Response(tokenizer.decode(tokens_T[:-1]), "end_of_turn")
    if last == tokenizer.eos_token_id:
        return Response(tokenizer.decode(tokens_T[:-1]), "end_of_sequence")
    text = tokenizer.decode(tokens_T)
    for s in stop:
        if text.endswith(s):
            return Response(text, "stop", s)
    return Response(text, "length")


def reward_total(value: object) -> tuple[float, dict[str, float]] | None:
    """(total, parts) of a reward, a number or named parts; None if it is neither.

    The total of named parts is their sum. A part's name is a string, its value
    a number (booleans are not rewards).
    """
    if isinstance(value, Mapping):
        parts: dict[str, float] = {}
        for name, part in value.items():
            if not (isinstance(name, str) and _is_number(part)):
                return None
            parts[name] = float(part)
        return math.fsum(parts.values()), parts
    if _is_number(value):
        return float(value), {}
    return None


def _is_number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


async def rewards_of(
    task: Task[P], problems_P: Sequence[P], responses_P_G: Sequence[Sequence[Response]]
) -> Scores:
    """Each completion's reward and parts, from the task's own reward.

    One reward a completion (`compute_reward`): identical responses to one
    problem are scored once, which changes nothing but the cost (rewards are
    pure), and that matters for rewards that run code. A task that scores
    groups (`compute_group_rewards`) is asked once per problem.
    """
    rewards_P_G, parts_P_G = [], []
    for problem, responses_G in zip(problems_P, responses_P_G, strict=True):
        if task.rewards_groups:
            values = await _group_rewards(task, problem, responses_G)
        else:
            seen: dict[tuple[str, str, str | None], object] = {}
            for r in responses_G:
                key = (str(r), r.ended, r.stop)
                if key not in seen:
                    seen[key] = _call(
                        task, "compute_reward", r, task.adapter.compute_reward, r, problem
                    )
            values = [seen[str(r), r.ended, r.stop] for r in responses_G]
        totals = [_checked(task, v, r) for v, r in zip(values, responses_G, strict=True)]
        rewards_P_G.append([t for t, _ in totals])
        parts_P_G.append([p for _, p in totals])
    return Scores(rewards_P_G, parts_P_G)


async def _group_rewards(
    task: Task[P], problem: P, responses_G: Sequence[Response]
) -> Sequence[object]:
    # The adapter's type is the minimal contract; `rewards_groups` was set only after
    # resolution saw this optional method on it, so the attribute is there.
    method = task.adapter.compute_group_rewards  # type: ignore[attr-defined]
    given = list(responses_G)
    values = _call(task, "compute_group_rewards", given, method, given, problem)
    if inspect.isawaitable(values):
        try:
            values = await values
        except Exception as exc:
            raise TaskError(task, "compute_group_rewards", exc, given) from None
    if not (isinstance(values, Sequence) and len(values) == len(given)):
        raise TaskError(
            task,
            "compute_group_rewards",
            ValueError(f"it must return {len(given)} rewards, one each (got {shown(values)})"),
            given,
        )
    return values


def _call(task: Task[Any], method: str, given: object, fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception as exc:
        raise TaskError(task, method, exc, given) from None


def _checked(task: Task[Any], value: object, response: Response) -> tuple[float, dict[str, float]]:
    total = reward_total(value)
    if total is None or not math.isfinite(total[0]):
        method = "compute_group_rewards" if task.rewards_groups else "compute_reward"
        problem = ValueError(
            f"a reward must be finite: a number or named numbers (got {shown(value)})"
        )
        raise TaskError(task, method, problem, response)
    return total
