"""Episodes: the model takes a turn, the environment replies, the model goes on, until it ends.

For: the rollout and evaluation, which play every completion as an episode
(a task without `feedback` plays episodes of one turn, exactly today's
completions). Not for: the arithmetic of advantages and datums
(`mathrl.grpo`), or what a task's methods must be (`mathrl.adapter`).

How a group is played (`Player.group`): one sample request for the group's
first turns, as a one-turn task always did; then each member goes on as its
own coroutine: the environment's feedback and the reward run in the
`Workers` pool as soon as the turn is in, and a later turn's request goes
out at once, so slow episodes never hold back the others, and task work
overlaps other episodes' sampling. Identical histories in a group share
one feedback call and one reward call, and one metrics call for a task that
reports metrics (they are pure).

Tokens: turn k + 1's prompt is turn k's prompt, plus the tokens sampled
exactly as sampled (never decoded and encoded again), plus the reply's
tokens: the text encoded for a text prompt, or the chat template's next
message and the assistant's opening for a conversation. A conversation's
turn cut off at the token limit has no end-of-turn token, so the reply
starts with one (an environment token, which trains nothing).

Limits: the first turn samples with the task's stop sequences and the run's
max_tokens; each later turn with those its feedback sets (`Feedback.stop`,
`Feedback.max_tokens`), or those, and never more tokens than the episode's
budget has left (`next_turn_params`). A feedback that sets invalid limits
ends the run (`limits_error`), as a feedback that returns no `Feedback` does.

Tools (`mathrl.tools`): an episode of a task with tools opens its tools
(`Toolbox.open`, in the pool) when it starts and closes them when it ends. A
turn that calls a tool is answered by the tools, not by `feedback`: each call
runs on a worker thread within its time limit (`Workers.run`'s `seconds`), in
order, and the results are the reply, one message each in the chat template
(`message_tokens`), environment tokens like any reply; the calls go on the
`Turn` (`calls`), and the running counts on the episode's metrics.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, Generic, TypeVar

from mathrl.adapter import Feedback, Message, Prompt, Response
from mathrl.backend import Completion, Datum, SampleParams, Sampler, Tokenizer
from mathrl.grpo import episode_datum
from mathrl.resolved import Task
from mathrl.rewards import (
    BrokenContract,
    TaskError,
    checked_metrics,
    checked_reward,
    group_rewards,
    metrics_of,
    response_key,
    response_of,
    rewards_of,
    task_call,
    text_tokens,
)
from mathrl.text import shown
from mathrl.tools import FAILED_TOOL_CALLS, TOOL_CALLS, Call, Session, ToolCall, refused
from mathrl.workers import Late, Workers, in_process

P = TypeVar("P")
T = TypeVar("T")
Score = tuple[float, dict[str, float]]


@dataclass(frozen=True, slots=True)
class Turn:
    """One of the model's turns, and the environment's reply to it (none after the last)."""

    completion: Completion
    response: Response
    reply: str | None = None
    reply_T: tuple[int, ...] = ()
    calls: tuple[ToolCall, ...] = ()
    """The tool calls the turn made, each with its result (a task with tools)."""


@dataclass(frozen=True, slots=True)
class Episode:
    """The model's turns of one episode, and what the whole episode earned."""

    turns: tuple[Turn, ...]
    reward: float = 0.0
    parts: dict[str, float] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    """What the task reports beside the reward (`episode_metrics`); none by default."""

    @property
    def final(self) -> Response:
        """The last turn's response: what `compute_reward` scores."""
        return self.turns[-1].response

    @property
    def sampled_tokens(self) -> int:
        return sum(len(t.completion.tokens) for t in self.turns)

    def datum(self, prompt_T: Sequence[int], advantage: float) -> Datum | None:
        """The episode's datum (`mathrl.grpo.episode_datum`); None if the model wrote nothing."""
        return episode_datum(
            prompt_T,
            [t.completion.tokens for t in self.turns],
            [t.completion.logprobs for t in self.turns],
            [t.reply_T for t in self.turns[:-1]],
            advantage,
        )


def limits_error(said: Feedback) -> str | None:
    """What is wrong with the next turn's limits that `said` sets, in one phrase; None if
    they are valid: `stop` None or a tuple (or list) of non-empty strings, `max_tokens`
    None or an integer >= 1."""
    stop, max_tokens = said.stop, said.max_tokens
    if stop is not None and not (
        isinstance(stop, tuple | list) and all(isinstance(s, str) and s for s in stop)
    ):
        return (
            "Feedback.stop must be a tuple of non-empty strings, e.g. ('\\n',), or None for "
            f"the task's stop (got {shown(stop)})"
        )
    if max_tokens is not None and not (
        isinstance(max_tokens, int) and not isinstance(max_tokens, bool) and max_tokens >= 1
    ):
        return (
            "Feedback.max_tokens must be an integer >= 1, or None for the run's max_tokens "
            f"(got {shown(max_tokens)})"
        )
    return None


def next_turn_params(params: SampleParams, said: Feedback, left: int, seed: int) -> SampleParams:
    """How to sample the turn after the feedback `said` (valid: `limits_error`), with `left`
    of the episode's tokens left, at `seed`: `params`, the episode's (the task's stops and
    the run's max_tokens), with the limits `said` sets in their place, the budget at most
    `left`."""
    stop = params.stop if said.stop is None else tuple(said.stop)
    max_tokens = params.max_tokens if said.max_tokens is None else said.max_tokens
    return replace(params, stop=stop, max_tokens=min(max_tokens, left), seed=seed)


def turn_seed(request_seed: int, member: int, turn: int) -> int:
    """The sampling seed of turn `turn` (2, 3, ...) of group member `member`: stable anywhere."""
    digest = hashlib.blake2b(f"{request_seed}/{member}/{turn}".encode(), digest_size=4).digest()
    return int.from_bytes(digest, "little") & 0x7FFF_FFFF


def reply_tokens(
    tokenizer: Tokenizer, task: Task[Any], prompt: Prompt, after_T: Sequence[int], said: Feedback
) -> list[int]:
    """The tokens of the environment's reply `said` after the model's turn `after_T`."""
    assert said.reply is not None
    if isinstance(prompt, str):
        return text_tokens(tokenizer, said.reply)
    return message_tokens(tokenizer, task, after_T, [{"role": said.role, "content": said.reply}])


def message_tokens(
    tokenizer: Tokenizer, task: Task[Any], after_T: Sequence[int], messages: Sequence[Message]
) -> list[int]:
    """The tokens of `messages` in the chat template after the model's turn `after_T`: an
    end-of-turn first if the turn was cut off, then what the template writes for them."""
    opening = (
        [] if after_T and after_T[-1] == tokenizer.end_of_turn_id else [tokenizer.end_of_turn_id]
    )
    one = messages[0] if len(messages) == 1 else messages  # one as one: any tokenizer takes it
    return opening + tokenizer.render_reply(one, task.chat_template_options)


async def all_or_none(awaitables: Sequence[Awaitable[T]]) -> list[T]:
    """`asyncio.gather`, but the first failure cancels the others (a failed step's other
    episodes stop sampling and scoring at once)."""
    tasks = [asyncio.ensure_future(a) for a in awaitables]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        raise


def add_scores(scores: Sequence[Score]) -> Score:
    """The episode's reward: the sum of its turns' rewards and its end reward, part by part."""
    parts: dict[str, float] = {}
    for _, named in scores:
        for name, value in named.items():
            parts[name] = parts.get(name, 0.0) + value
    return math.fsum(total for total, _ in scores), parts


def episode_metrics(
    said: Sequence[Mapping[str, float]], end: Mapping[str, float]
) -> dict[str, float]:
    """An episode's metrics: for each name, the latest turn's `Feedback.metrics` that
    reported it, then the task's `metrics` of the last response (`end`), which win."""
    latest: dict[str, float] = {}
    for metrics in [*said, end]:
        latest.update(metrics)
    return latest


@dataclass
class Player(Generic[P]):
    """Plays episodes of one task from one sampler; see the module docstring."""

    tokenizer: Tokenizer
    sampler: Sampler
    task: Task[P]
    workers: Workers
    on_done: Callable[[int], None] | None = None

    async def group(
        self, problem: P, prompt: Prompt, prompt_T: Sequence[int], size: int, params: SampleParams
    ) -> list[Episode]:
        """`size` episodes of `problem`, their first turns drawn by one request."""
        budget = self.task.episode_budget(params.max_tokens)
        first = replace(params, max_tokens=min(params.max_tokens, budget))
        firsts = await self.sampler.sample(prompt_T, size, first)
        if self.on_done is not None:
            self.on_done(len(firsts))
        if not self.task.plays_episodes:
            return await self._one_turn(problem, prompt, firsts, params)
        shared: dict[tuple[object, ...], asyncio.Future[Any]] = {}
        opened: list[Session] = []  # each episode's tools, until the episode closes them
        try:
            played = await all_or_none(
                [
                    self._episode(problem, prompt, prompt_T, params, g, completion, shared, opened)
                    for g, completion in enumerate(firsts)
                ]
            )
        except BaseException:
            for session in opened:  # of episodes that failed or were cancelled
                with contextlib.suppress(Exception):
                    session.close()
            raise
        if self.task.rewards_groups:
            ends = await self._group_rewards(problem, [e.final for e, _, _ in played])
        else:
            ends = [end for _, _, end in played]
        episodes_G = []
        for (episode, scores, _), end in zip(played, ends, strict=True):
            total, parts = add_scores([*scores, end])
            episodes_G.append(replace(episode, reward=total, parts=parts))
        return episodes_G

    async def _one_turn(
        self, problem: P, prompt: Prompt, firsts: Sequence[Completion], params: SampleParams
    ) -> list[Episode]:
        """Episodes of one turn: the group's rewards in one call to the pool (cheap rewards
        cost one hand-over a group, not one a completion)."""
        chat = not isinstance(prompt, str)
        finals = [response_of(self.tokenizer, c.tokens, params.stop, chat) for c in firsts]
        if self.task.rewards_groups:
            ends = await self._group_rewards(problem, finals)
        else:
            alone = partial(rewards_of, self.task, problem, finals)
            calls = len({response_key(r) for r in finals})  # each may take the timeout
            ends = await self._work("compute_reward", finals, alone, calls)
        metrics_G: list[dict[str, float]] = [{} for _ in finals]
        if self.task.metrics is not None:
            reported = partial(metrics_of, self.task, problem, finals)
            calls = len({response_key(r) for r in finals})
            metrics_G = await self._work("metrics", finals, reported, calls)
        return [
            Episode((Turn(c, r),), total, parts, metrics)
            for c, r, (total, parts), metrics in zip(firsts, finals, ends, metrics_G, strict=True)
        ]

    async def _group_rewards(self, problem: P, finals: Sequence[Response]) -> list[Score]:
        """`compute_group_rewards` of the group's last turns: plain in the pool, or `async`
        on the loop with the pool's timeout."""
        timeout = self.workers.timeout if self.workers.size else None
        return await group_rewards(self.task, problem, finals, self._work, timeout)

    async def _episode(
        self,
        problem: P,
        prompt: Prompt,
        prompt_T: Sequence[int],
        params: SampleParams,
        member: int,
        completion: Completion,
        shared: dict[tuple[object, ...], asyncio.Future[Any]],
        opened: list[Session],
    ) -> tuple[Episode, list[Score], Score]:
        task, tokenizer = self.task, self.tokenizer
        chat = not isinstance(prompt, str)
        budget = task.episode_budget(params.max_tokens)
        context_T, used, stop = list(prompt_T), 0, params.stop
        turns: list[Turn] = []
        scores: list[Score] = []
        said_metrics: list[dict[str, float]] = []
        made, failures, ran = 0, 0, 0  # tool calls answered, with an error, and run
        if task.toolbox is not None:
            said_metrics.append({TOOL_CALLS: 0.0, FAILED_TOOL_CALLS: 0.0})
        session = await self._open_tools(problem, prompt, opened)
        while True:
            turn = len(turns) + 1
            response = response_of(tokenizer, completion.tokens, stop, chat, turn)
            used += len(completion.tokens)
            history = (*(t.response for t in turns), response)
            calls = task.toolbox.parse(response) if task.toolbox is not None else []
            answered: list[ToolCall] = []
            if session is not None and calls:  # the tools answer; the last turn's, never
                if turn < task.max_turns:
                    answered, ran = await self._answer(session, calls, ran, response)
                    made += len(answered)
                    failures += sum(c.failed for c in answered)
                    said_metrics.append({TOOL_CALLS: made, FAILED_TOOL_CALLS: failures})
                said = Feedback("\n".join(c.result for c in answered) if answered else None)
            elif task.feedback is not None:
                said = await self._feedback(problem, history, shared)
                scores.append(checked_reward(task, "feedback", said.reward, response))
                said_metrics.append(checked_metrics(task, "feedback", said.metrics, response))
            else:  # a task with tools alone: a turn that calls none is its answer
                said = Feedback(None)
            goes_on = said.reply is not None and turn < task.max_turns
            reply_T: list[int] = []
            if goes_on:
                reply_T = self._reply(prompt, completion, said, response, answered)
            if not goes_on or used + len(reply_T) >= budget:
                turns.append(Turn(completion, response, calls=tuple(answered)))
                break
            turns.append(Turn(completion, response, said.reply, tuple(reply_T), tuple(answered)))
            used += len(reply_T)
            context_T += [*completion.tokens, *reply_T]
            seed = turn_seed(params.seed or 0, member, turn + 1)
            later = next_turn_params(params, said, budget - used, seed)
            stop = later.stop
            (completion,) = await self.sampler.sample(context_T, 1, later)
        if session is not None:
            opened.remove(session)
            await self._on_thread("tools", problem, session.close)
        end: Score = (0.0, {})
        if not task.rewards_groups:
            end = await self._shared(
                shared, ("reward", response_key(response)), "compute_reward", response,
                lambda: rewards_of(task, problem, [response])[0],
            )  # fmt: skip
        reported: dict[str, float] = {}
        if task.metrics is not None:
            reported = await self._shared(
                shared, ("metrics", response_key(response)), "metrics", response,
                lambda: metrics_of(task, problem, [response])[0],
            )  # fmt: skip
        metrics = episode_metrics(said_metrics, reported)
        return Episode(tuple(turns), metrics=metrics), scores, end

    async def _open_tools(
        self, problem: P, prompt: Prompt, opened: list[Session]
    ) -> Session | None:
        """The episode's tools (None for a task without), opened in the pool and kept in
        `opened` until the episode closes them (the group closes those of an episode that
        fails); TaskError if they fail to open, or the prompt is not a conversation (whose chat
        template shows the model its tools)."""
        toolbox = self.task.toolbox
        if toolbox is None:
            return None
        if isinstance(prompt, str):
            wrong = BrokenContract("a task with tools must prompt with a conversation, whose "
                                   "chat template shows the model its tools")  # fmt: skip
            raise TaskError(self.task, "make_prompt", wrong, prompt)
        session = await self._on_thread("tools", problem, partial(toolbox.open, problem))
        opened.append(session)
        return session

    async def _answer(
        self, session: Session, calls: Sequence[Call], ran: int, response: Response
    ) -> tuple[list[ToolCall], int]:
        """A turn's calls answered in order, after `ran` run in the episode: each run on a
        worker thread within the tools' time limit, or refused past a cap; and how many have
        run now. TaskError if a tool finds the machine cannot run it (`Unavailable`)."""
        toolbox = session.toolbox
        answered = []
        for call, refusal in zip(calls, toolbox.refusals(calls, ran), strict=True):
            if refusal is not None:
                answered.append(refused(call, refusal))
                continue
            ran += 1
            try:
                answered.append(
                    await self.workers.run(partial(session.run, call), 1, toolbox.seconds)
                )
            except Late:
                answered.append(toolbox.late(call))
            except Exception as exc:
                raise TaskError(self.task, "tools", exc, response) from None
        return answered, ran

    async def _on_thread(self, method: str, given: object, fn: Callable[[], T]) -> T:
        """`fn()` on a worker thread (never in a process: what it makes lives in this one);
        TaskError if it fails or is late."""
        try:
            return await self.workers.run(fn)
        except Exception as exc:
            raise TaskError(self.task, method, exc, given) from None

    def _reply(
        self,
        prompt: Prompt,
        completion: Completion,
        said: Feedback,
        response: Response,
        answered: Sequence[ToolCall] = (),
    ) -> list[int]:
        """The reply's tokens (the tools' results, one message each, if the turn made calls);
        TaskError if the chat template cannot render it (a role it refuses, say)."""
        toolbox = self.task.toolbox
        try:
            if answered and toolbox is not None:
                messages = toolbox.messages(answered)
                return message_tokens(self.tokenizer, self.task, completion.tokens, messages)
            return reply_tokens(self.tokenizer, self.task, prompt, completion.tokens, said)
        except Exception as exc:
            raise TaskError(self.task, "tools" if answered else "feedback", exc, response) from None

    async def _feedback(
        self, problem: P, history: tuple[Response, ...], shared: dict[tuple[object, ...], Any]
    ) -> Feedback:
        def ask() -> Feedback:
            said = task_call(self.task, "feedback", history[-1], problem, history)
            if not (
                isinstance(said, Feedback)
                and (said.reply is None or isinstance(said.reply, str))
                and isinstance(said.role, str)
            ):
                problem_ = BrokenContract(
                    f"it must return a Feedback(reply=text or None, reward=...) (got {shown(said)})"
                )
                raise TaskError(self.task, "feedback", problem_, history[-1])
            wrong = limits_error(said)
            if wrong is not None:
                problem_ = BrokenContract(f"after turn {len(history)}, {wrong}")
                raise TaskError(self.task, "feedback", problem_, history[-1])
            return said

        key = ("feedback", *map(response_key, history))
        result: Feedback = await self._shared(shared, key, "feedback", history[-1], ask)
        return result

    async def _shared(
        self,
        shared: dict[tuple[object, ...], asyncio.Future[Any]],
        key: tuple[object, ...],
        method: str,
        given: object,
        fn: Callable[[], T],
    ) -> T:
        """`fn()` in the pool, once per `key` in the group."""
        if key not in shared:
            shared[key] = asyncio.ensure_future(self._work(method, given, fn))
        result: T = await shared[key]
        return result

    async def _work(self, method: str, given: object, fn: Callable[[], T], calls: int = 1) -> T:
        """`fn()` (`calls` of the task's calls) in the pool; TaskError if it fails or is late."""
        if self.task.work_in_processes and self.workers.size:
            fn = in_process(fn, self.workers.timeout, calls)
        try:
            return await self.workers.run(fn, calls)
        except TaskError:
            raise
        except Exception as exc:  # past the timeout, or its process died or could not answer
            raise TaskError(self.task, method, exc, given) from None
