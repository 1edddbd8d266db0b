"""From sampled tokens to rewards: how each completion ended, and what the task made of it.

For: `mathrl.episodes.Player`, which scores every episode that the step
and evaluation play. As each turn comes back it calls `response_of` (pure:
the text, and how sampling ended it); then, in its worker pool, the task's
own reward: `rewards_of` for the responses of a group (`compute_reward`, once per
distinct response: a group of one-turn episodes in one hand-over, or the
last turn of a longer episode), or `group_rewards` for a task that scores
whole groups (`compute_group_rewards`, plain or `async`); and, for a task
that reports them, the metrics beside the reward (`metrics_of`). From the
episode's turn to the task's `compute_reward` is four calls: `Player._one_turn`,
`Player._work` (the pool's one visible call, `Workers.run`), `rewards_of`.
A task's method that raises, or returns what is not a reward (or not
metrics), raises `TaskError`: one line naming the task, the method, the
error and a shortened input, so a run can stop cleanly. What the task raised
reads "compute_reward raised ValueError: ..."; what it returned against the
contract, which mathrl's own check found, reads "compute_reward broke the
contract: a reward must be finite ..." (`BrokenContract`). Not for:
`check_adapter`, which calls the task's methods itself to report what is
wrong rather than raise, and shares only `reward_total` and `metric_values`.
"""

from __future__ import annotations

import asyncio
import inspect
import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeGuard, TypeVar

from mathrl.adapter import Response
from mathrl.backend import Tokenizer
from mathrl.resolved import Task
from mathrl.text import elided, one_line, shown
from mathrl.workers import Late

P = TypeVar("P")
T = TypeVar("T")


class BrokenContract(ValueError):
    """What a task's method returned (or how it behaved) breaks the adapter contract: found by
    mathrl's own check, not raised by the task. `TaskError` words it so, not as a raise."""


class TaskError(Exception):
    """A task's own method failed during a run. The message names the task, method and input."""

    def __init__(self, task: Task[Any], method: str, exc: BaseException, given: object) -> None:
        if isinstance(exc, Late):
            what = f"{method} {str(exc).removeprefix('it ')}"
        else:  # the input once: in the (on ...) below, escaped and cut, not in the error too
            detail = one_line(elided(str(exc), given), 200) or type(exc).__name__
            how = f"raised {type(exc).__name__}"
            if isinstance(exc, BrokenContract):  # mathrl's check on what the task returned
                how = "broke the contract"
            what = f"{method} {how}: {detail}"
        # A Response shows as its text; in an episode, with the model's turn it was.
        on = shown(given, 60)
        if isinstance(given, Response) and (task.plays_episodes or given.turn > 1):
            on = f"the model's turn {given.turn}: {on}"
        super().__init__(f"task {task.name!r} failed: {what} (on {on})")
        self.task_identity = task.identity
        self.method = method
        self.late = isinstance(exc, Late)
        """True when the call ran past the workers' timeout (`Workers.timeout`)."""
        allowed_by = getattr(exc, "allowed_by", None)
        self.allowed_by = allowed_by if isinstance(allowed_by, str) else None
        """The task's option that would have let the call run, as the error names it (a
        sandbox layer this machine failed to set up: `sandbox.SandboxError.allowed_by`)."""

    def __reduce__(self) -> tuple[Any, ...]:
        # Raised in a worker process, it comes back pickled: keep the message and fields.
        fields = (self.task_identity, self.method, self.late, self.allowed_by)
        return _task_error, (str(self), *fields)


def _task_error(
    message: str, identity: str, method: str, late: bool, allowed_by: str | None
) -> TaskError:
    error = TaskError.__new__(TaskError)
    Exception.__init__(error, message)
    error.task_identity, error.method, error.late = identity, method, late
    error.allowed_by = allowed_by
    return error


def response_of(
    tokenizer: Tokenizer, tokens_T: Sequence[int], stop: Sequence[str], chat: bool, turn: int = 1
) -> Response:
    """The completion's text as a reward sees it, and how sampling ended it.

    Sampling stops only at a stop sequence, at end-of-sequence (or, for a
    conversation, end-of-turn), or at the token limit: a completion that ends
    at none of them ran out of tokens. The end-of-sequence and end-of-turn
    tokens are not part of the text; `tokens` counts every token sampled.
    """
    last, count = (tokens_T[-1] if tokens_T else None), len(tokens_T)
    if chat and last == tokenizer.end_of_turn_id:
        return Response(tokenizer.decode(tokens_T[:-1]), "end_of_turn", None, turn, count)
    if last == tokenizer.eos_token_id:
        return Response(tokenizer.decode(tokens_T[:-1]), "end_of_sequence", None, turn, count)
    text = tokenizer.decode(tokens_T)
    for s in stop:
        if text.endswith(s):
            return Response(text, "stop", s, turn, count)
    return Response(text, "length", None, turn, count)


def text_tokens(tokenizer: Tokenizer, text: str) -> list[int]:
    """`text`'s tokens in the middle of a sequence: without what the tokenizer adds to any
    text at its start (a Llama tokenizer's beginning-of-text token, say)."""
    tokens, added = tokenizer.encode(text), tokenizer.encode("")
    return tokens[len(added) :] if added and tokens[: len(added)] == added else tokens


def ended_tokens(tokenizer: Tokenizer, text: str, stops: Sequence[str]) -> int:
    """The tokens sampling takes to write `text` and end it as the task asks: with its first
    stop sequence, or else with one end-of-turn (conversation) or end-of-sequence token."""
    if stops:
        return len(text_tokens(tokenizer, text + stops[0]))
    return len(text_tokens(tokenizer, text)) + 1


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


def metric_values(value: object) -> dict[str, float] | None:
    """A task's metrics as names to floats (True and False count as 1.0 and 0.0); None if
    `value` is not a mapping of non-empty names to finite numbers."""
    if not isinstance(value, Mapping):
        return None
    values: dict[str, float] = {}
    for name, number in value.items():
        if not (isinstance(name, str) and name and isinstance(number, int | float)):
            return None
        try:
            values[name] = float(number)
        except OverflowError:  # an int past the largest float
            return None
        if not math.isfinite(values[name]):
            return None
    return values


def _is_number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


Work = Callable[[str, object, Callable[[], Any]], Awaitable[Any]]
"""Runs a task's call somewhere (a worker pool): `work(method, given, fn)` returns `fn()`."""


def response_key(response: Response) -> tuple[object, ...]:
    """What a response is to a pure reward: its text, how it ended, at which turn, and in
    how many tokens."""
    return (str(response), response.ended, response.stop, response.turn, response.tokens)


def rewards_of(
    task: Task[P], problem: P, responses: Sequence[Response]
) -> list[tuple[float, dict[str, float]]]:
    """Each response's `compute_reward(response, problem)` as (total, parts), called once per
    distinct response (`response_key`: rewards are pure); TaskError if it raises or returns
    what is not a reward. It runs in the worker pool (`Player._work`), and calls the task
    itself: in a traceback taken inside `compute_reward`, it is the frame right above it."""
    seen: dict[tuple[object, ...], tuple[float, dict[str, float]]] = {}
    for response in responses:
        key = response_key(response)
        if key not in seen:
            try:
                value = task.adapter.compute_reward(response, problem)
            except Exception as exc:
                raise TaskError(task, "compute_reward", exc, response) from None
            seen[key] = checked_reward(task, "compute_reward", value, response)
    return [seen[response_key(response)] for response in responses]


def metrics_of(task: Task[P], problem: P, responses: Sequence[Response]) -> list[dict[str, float]]:
    """Each response's `metrics(response, problem)` as names to floats, called once per
    distinct response (metrics are pure); TaskError if it raises or returns what is not
    metrics. As `rewards_of`, in the worker pool, right above the task's call."""
    metrics = task.metrics
    assert metrics is not None, "called for a task that reports metrics only"
    seen: dict[tuple[object, ...], dict[str, float]] = {}
    for response in responses:
        key = response_key(response)
        if key not in seen:
            try:
                value = metrics(response, problem)
            except Exception as exc:
                raise TaskError(task, "metrics", exc, response) from None
            seen[key] = checked_metrics(task, "metrics", value, response)
    return [seen[response_key(response)] for response in responses]


def checked_metrics(
    task: Task[Any], method: str, value: object, response: object
) -> dict[str, float]:
    """What `method` returned as metrics, as names to floats; TaskError if it is not metrics."""
    values = metric_values(value)
    if values is None:
        problem = BrokenContract(
            f"metrics must be a mapping of names to finite numbers (got {shown(value)})"
        )
        raise TaskError(task, method, problem, response)
    return values


async def group_rewards(
    task: Task[P],
    problem: P,
    responses_G: Sequence[Response],
    work: Work,
    timeout: float | None,
) -> list[tuple[float, dict[str, float]]]:
    """The group's rewards from `compute_group_rewards`: plain (run by `work`) or `async`.

    An `async` judge runs on the event loop, limited to `timeout` seconds (None: no limit).
    """
    method = task.group_rewards
    assert method is not None, "called for a task that scores groups only"
    name, given = "compute_group_rewards", list(responses_G)
    if inspect.iscoroutinefunction(method):  # a judge that awaits: on the event loop
        values = task_call(task, name, given, given, problem)
    else:
        values = await work(name, given, lambda: task_call(task, name, given, given, problem))
    if inspect.isawaitable(values):
        limit = asyncio.timeout(timeout)
        try:
            async with limit:
                values = await values
        except Exception as exc:
            cause = Late(timeout) if timeout is not None and limit.expired() else exc
            raise TaskError(task, name, cause, given) from None
    if not (isinstance(values, Sequence) and len(values) == len(given)):
        raise TaskError(
            task,
            name,
            BrokenContract(f"it must return {len(given)} rewards, one each (got {shown(values)})"),
            given,
        )
    return [checked_reward(task, name, v, r) for v, r in zip(values, given, strict=True)]


def task_call(task: Task[Any], method: str, given: object, *args: Any) -> Any:
    """Call the adapter's `method` on `args`; TaskError naming `given` if it raises."""
    try:
        return getattr(task.adapter, method)(*args)
    except Exception as exc:
        raise TaskError(task, method, exc, given) from None


def checked_reward(
    task: Task[Any], method: str, value: object, response: object
) -> tuple[float, dict[str, float]]:
    """(total, parts) of what `method` returned as a reward; TaskError if it is not one."""
    total = reward_total(value)
    if total is None or not math.isfinite(total[0]):
        problem = BrokenContract(
            f"a reward must be finite: a number or named numbers (got {shown(value)})"
        )
        raise TaskError(task, method, problem, response)
    return total
