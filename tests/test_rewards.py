"""From sampled tokens to rewards: how a completion ended, reward parts, group rewards, errors."""

from __future__ import annotations

import asyncio
import math
import os
import re
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar

import pytest
from hypothesis import given
from hypothesis import strategies as st

import mathrl
import strategies as st_
from doubles.secret_game import Game, SecretGame
from mathrl.adapter import Response, Reward
from mathrl.backend import Completion, SampleParams
from mathrl.config import TrainConfig
from mathrl.episodes import Player
from mathrl.loop import run_grpo_async
from mathrl.resolved import as_task
from mathrl.rewards import (
    TaskError,
    group_rewards,
    metrics_of,
    response_of,
    reward_total,
    rewards_of,
    text_tokens,
)
from mathrl.rollout import run_problems
from mathrl.tasks.addition import AdditionProblem, MathAdapter
from mathrl.text import elided
from mathrl.workers import Workers
from mathrl_fakes import ByteTokenizer, FakeBackend

TOK = ByteTokenizer()
EOS = TOK.eos_token_id


# -- how a completion ended -----------------------------------------------------------


def test_how_a_completion_ended_worked_examples() -> None:
    # " 42\n" then nothing: the stop "\n" ended it, and stays in the text.
    assert response_of(TOK, TOK.encode(" 42\n"), ("\n",), chat=False) == " 42\n"
    stopped = response_of(TOK, TOK.encode(" 42\n"), ("\n",), chat=False)
    assert (stopped.ended, stopped.stop, stopped.text) == ("stop", "\n", " 42")
    # EOS after " 42": it ended the sequence, and is not part of the text.
    ended = response_of(TOK, [*TOK.encode(" 42"), EOS], ("\n",), chat=False)
    assert (str(ended), ended.ended, ended.stop) == (" 42", "end_of_sequence", None)
    # The same token ends a conversation's turn (the fake's EOS is its end-of-turn too).
    turn = response_of(TOK, [*TOK.encode("42"), EOS], (), chat=True)
    assert (str(turn), turn.ended) == ("42", "end_of_turn")
    # No stop, no EOS: the token limit cut it off.
    cut = response_of(TOK, TOK.encode(" 4"), ("\n",), chat=False)
    assert (str(cut), cut.ended, cut.text) == (" 4", "length", " 4")
    # Token counts: " 42\n" is 4 byte tokens, stop included; " 42" + EOS is 3 + 1; " 4" is 2.
    assert (stopped.tokens, ended.tokens, turn.tokens, cut.tokens) == (4, 4, 3, 2)
    assert Response(" 42").tokens == 0  # built by hand: not sampled


@given(st_.unicode_text, st_.stop_strings, st.booleans())
def test_a_completion_ends_at_a_stop_at_eos_or_at_the_limit(
    text: str, stops: tuple[str, ...], chat: bool
) -> None:
    with_eos = response_of(TOK, [*TOK.encode(text), EOS], stops, chat)
    assert with_eos.ended == ("end_of_turn" if chat else "end_of_sequence")
    assert str(with_eos) == TOK.decode(TOK.encode(text))
    response = response_of(TOK, TOK.encode(text), stops, chat)
    assert (with_eos.tokens, response.tokens) == (len(TOK.encode(text)) + 1, len(TOK.encode(text)))
    if response.ended == "stop":
        assert response.stop in stops
        assert str(response).endswith(response.stop)
        assert response.text + response.stop == str(response)
    else:
        assert response.ended == "length"
        assert not any(str(response).endswith(s) for s in stops)


@given(st_.unicode_text, st_.endings)
def test_a_response_is_its_text(text: str, ended: Any) -> None:
    response = Response(text, ended)
    assert response == text
    assert isinstance(response, str)
    assert response.text == text
    assert repr(response) == repr(text)
    assert response.ended == ended


# -- reward parts ---------------------------------------------------------------------


def test_reward_parts_worked_examples() -> None:
    assert reward_total(0.5) == (0.5, {})
    assert reward_total(1) == (1.0, {})
    # correct 1.0 + format 0.25 = 1.25
    assert reward_total({"correct": 1.0, "format": 0.25}) == (
        1.25,
        {"correct": 1.0, "format": 0.25},
    )
    for not_a_reward in (True, "1", None, {"x": "1"}, {1: 1.0}, {"ok": False}, [1.0]):
        assert reward_total(not_a_reward) is None


@given(st_.reward_parts)
def test_the_total_of_named_parts_is_their_sum(parts: dict[str, float]) -> None:
    total = reward_total(parts)
    assert total is not None
    assert total == (math.fsum(parts.values()), parts)


# -- calling the task's reward ----------------------------------------------------------


async def right_here(method: str, given: object, fn: Callable[[], Any]) -> Any:
    """A `Work` that runs the call on the event loop (where `Player` would use its pool)."""
    return fn()


def scores(
    adapter: MathAdapter, problem: AdditionProblem, responses: Sequence[Response]
) -> list[tuple[float, dict[str, float]]]:
    """A group's (total, parts) as `Player` asks for them: the group at once from a task that
    scores groups (`group_rewards`), else one `compute_reward` a response (`rewards_of`)."""
    task = as_task(adapter)
    if task.rewards_groups:
        return asyncio.run(group_rewards(task, problem, responses, right_here, None))
    return rewards_of(task, problem, responses)


class Counting(MathAdapter):
    """Counts its calls; the same response to one problem must be scored once."""

    def __init__(self) -> None:
        self.calls = 0

    def compute_reward(self, completion: str, problem: AdditionProblem) -> float:
        self.calls += 1
        return super().compute_reward(completion, problem)


def test_identical_responses_are_scored_once_and_parts_are_summed() -> None:
    adapter = Counting()
    problem = AdditionProblem(40, 2)
    same = [Response(" 42\n", "stop", "\n")] * 3
    scored = rewards_of(as_task(adapter), problem, [*same, Response(" 4", "length")])
    assert scored == [(1.0, {}), (1.0, {}), (1.0, {}), (0.0, {})]
    assert adapter.calls == 2


class Parts(MathAdapter):
    def compute_reward(  # type: ignore[override]  # parts, where the addition task has a number
        self, completion: str, problem: AdditionProblem
    ) -> Reward:
        return {"correct": super().compute_reward(completion, problem), "format": 0.25}


def test_a_reward_in_parts_trains_on_their_sum() -> None:
    problem = AdditionProblem(40, 2)
    responses = [Response(" 42\n", "stop", "\n"), Response(" 7\n", "stop", "\n")]
    # 1.0 + 0.25 and 0.0 + 0.25
    assert rewards_of(as_task(Parts()), problem, responses) == [
        (1.25, {"correct": 1.0, "format": 0.25}),
        (0.25, {"correct": 0.0, "format": 0.25}),
    ]


class Ranking(MathAdapter):
    """A group reward: each response's rank by length, 0 for the shortest."""

    seen: ClassVar[list[tuple[int, int]]] = []
    """(the problem's first operand, the group's size) of each call."""

    def compute_group_rewards(
        self, responses: Sequence[Response], problem: AdditionProblem
    ) -> list[float]:
        Ranking.seen.append((problem.a, len(responses)))
        order = sorted(range(len(responses)), key=lambda i: (len(responses[i]), i))
        return [float(order.index(i)) for i in range(len(responses))]


class AsyncRanking(Ranking):
    async def compute_group_rewards(  # type: ignore[override]
        self, responses: Sequence[Response], problem: AdditionProblem
    ) -> list[float]:
        await asyncio.sleep(0)
        return super().compute_group_rewards(responses, problem)


@pytest.mark.parametrize("adapter", [Ranking(), AsyncRanking()])
def test_a_group_reward_scores_each_group_at_once(adapter: MathAdapter) -> None:
    problems = [AdditionProblem(1, 1), AdditionProblem(2, 2)]
    groups = [[Response("ccc"), Response("a"), Response("bb")], [Response("x")]]
    Ranking.seen.clear()
    scored = [scores(adapter, p, g) for p, g in zip(problems, groups, strict=True)]
    assert [[total for total, _ in g] for g in scored] == [[2.0, 0.0, 1.0], [0.0]]
    assert Ranking.seen == [(1, 3), (2, 1)]


class Raising(MathAdapter):
    def compute_reward(self, completion: str, problem: AdditionProblem) -> float:
        return float(int(completion))


class GroupRaising(Ranking):
    async def compute_group_rewards(  # type: ignore[override]
        self, responses: Sequence[Response], problem: AdditionProblem
    ) -> list[float]:
        raise RuntimeError("the judge is down")


class SyncGroupRaising(Ranking):
    def compute_group_rewards(
        self, responses: Sequence[Response], problem: AdditionProblem
    ) -> list[float]:
        raise RuntimeError("the judge is down")


class TooFew(Ranking):
    def compute_group_rewards(
        self, responses: Sequence[Response], problem: AdditionProblem
    ) -> list[float]:
        return [1.0]


class GroupInfinite(Ranking):
    def compute_group_rewards(
        self, responses: Sequence[Response], problem: AdditionProblem
    ) -> list[float]:
        return [1.0, math.nan]


class Infinite(MathAdapter):
    def compute_reward(self, completion: str, problem: AdditionProblem) -> float:
        return math.inf


@pytest.mark.parametrize(
    ("adapter", "message"),
    [
        # int() quotes the completion; the line shows it once, in the (on ...).
        (Raising(), r"^task 'addition' failed: compute_reward raised ValueError: invalid literal "
                    r"for int\(\) with base 10: <input> \(on ' forty-two'\)$"),
        (GroupRaising(), r"^task 'addition' failed: compute_group_rewards raised RuntimeError: "
                         r"the judge is down \(on \[' forty-two', ' 42\\n'\]\)$"),
        (SyncGroupRaising(), r"^task 'addition' failed: compute_group_rewards raised "
                             r"RuntimeError: the judge is down \(on \[' forty-two', ' 42\\n'\]\)$"),
        (TooFew(), r"^task 'addition' failed: compute_group_rewards broke the contract: it must "
                   r"return 2 rewards, one each \(got \[1\.0\]\) "
                   r"\(on \[' forty-two', ' 42\\n'\]\)$"),
        (Infinite(), r"^task 'addition' failed: compute_reward broke the contract: a reward "
                     r"must be finite: a number or named numbers \(got inf\) \(on ' forty-two'\)$"),
        (GroupInfinite(), r"^task 'addition' failed: compute_group_rewards broke the contract: a "
                          r"reward must be finite: a number or named numbers \(got nan\) "
                          r"\(on ' 42\\n'\)$"),
    ],
)  # fmt: skip
def test_a_task_that_fails_raises_one_line_naming_it(adapter: MathAdapter, message: str) -> None:
    responses = [Response(" forty-two", "length"), Response(" 42\n", "stop", "\n")]
    with pytest.raises(TaskError, match=message) as excinfo:
        scores(adapter, AdditionProblem(40, 2), responses)
    assert "\n" not in str(excinfo.value)
    assert excinfo.value.task_identity.endswith(f":{type(adapter).__qualname__}")


@pytest.mark.parametrize(
    ("adapter", "method"),
    [(Raising(), "compute_reward"), (GroupRaising(), "compute_group_rewards")],
)
def test_a_task_error_names_the_method_that_failed(adapter: MathAdapter, method: str) -> None:
    responses = [Response(" forty-two", "length")]
    with pytest.raises(TaskError) as excinfo:
        scores(adapter, AdditionProblem(40, 2), responses)
    assert excinfo.value.method == method


class Verbose(MathAdapter):
    def compute_reward(self, completion: str, problem: AdditionProblem) -> float:
        raise ValueError("x" * 250)


def test_a_task_errors_line_cuts_a_long_error_at_200_and_a_long_input_at_60() -> None:
    response = Response("y" * 100, "length")
    with pytest.raises(TaskError) as excinfo:
        scores(Verbose(), AdditionProblem(40, 2), [response])
    # The error's first 200 of 250 characters; the input's first 60 of 100, quoted.
    assert str(excinfo.value) == (
        f"task 'addition' failed: compute_reward raised ValueError: {'x' * 200}... "
        f"(250 characters) (on '{'y' * 60}'... (100 characters))"
    )


def test_a_reward_that_raises_on_unprintable_bytes_shows_them_once_escaped_and_cut() -> None:
    # What the fake's untrained policy writes: bytes that are not UTF-8 (U+FFFD once
    # decoded), control characters, and more of them than a line should hold.
    completion = Response("\ufffdx\xad\ufffd\x00\x1b[2J" + "\ufffd" * 100, "length")
    with pytest.raises(TaskError) as excinfo:
        rewards_of(as_task(Raising()), AdditionProblem(40, 2), [completion])
    line = str(excinfo.value)
    assert line == (
        "task 'addition' failed: compute_reward raised ValueError: invalid literal for int() "
        "with base 10: <input> (on '\\ufffdx\\xad\\ufffd\\x00\\x1b[2J"
        + "\\ufffd" * 5  # as many as fit in 60 characters, escaped
        + "'... (109 characters))"
    )
    assert line.isprintable()
    assert "\ufffd" not in line  # escaped, not shown as a glyph that hides what was there


@given(st_.unicode_text)
def test_elided_leaves_no_quoted_copy_of_the_input(text: str) -> None:
    message = f"invalid literal for int() with base 10: {text!r}"
    if text:
        assert repr(text) not in elided(message, text)
    assert elided(message, 42) == message  # only text is looked for


# -- the path from a turn to the task ----------------------------------------------------


MATHRL = str(Path(mathrl.__file__).parent)


def frames_between(stack: list[traceback.FrameSummary], start: str) -> list[str]:
    """The mathrl frames after the last frame named `start` (the episode's turn, or the worker
    thread's start, `run`) and before the task's own frame, the last: `file:function` each."""
    named = [(f, MUTATED.sub("", f.name)) for f in stack]
    (at,) = [i for i, (_, name) in enumerate(named) if name == start][-1:]
    ours = [(f, name) for f, name in named[at + 1 : -1] if f.filename.startswith(MATHRL)]
    return [f"{Path(f.filename).stem}:{name}" for f, name in ours]


MUTATED = re.compile(r"^x(ǁ[^ǁ]+ǁ|_)|__mutmut_\w+$")
"""What mutmut adds to a function's name in the copy it mutates (`x_rewards_of__mutmut_orig`
for `rewards_of`, under a trampoline of its own): under `nox -s mutants`, the same frames."""


class Traced(MathAdapter):
    """Addition that keeps the stack each of its rewards and metrics is computed under."""

    def __init__(self) -> None:
        self.stacks: dict[str, list[traceback.FrameSummary]] = {}

    def compute_reward(self, completion: str, problem: AdditionProblem) -> float:
        self.stacks.setdefault("compute_reward", traceback.extract_stack())
        return super().compute_reward(completion, problem)

    def metrics(self, completion: Response, problem: AdditionProblem) -> dict[str, float]:
        self.stacks.setdefault("metrics", traceback.extract_stack())
        return {"tokens": completion.tokens}


class TracedGame(SecretGame):
    """The secret game, keeping the stack its end reward is computed under."""

    def __init__(self) -> None:
        self.stacks: dict[str, list[traceback.FrameSummary]] = {}

    def compute_reward(self, completion: Response, problem: Game) -> float:
        self.stacks.setdefault("compute_reward", traceback.extract_stack())
        return super().compute_reward(completion, problem)


@pytest.mark.parametrize("pool", ["threads", "inline"])
def test_from_the_turn_to_the_task_is_a_few_calls(tmp_path: Path, pool: str) -> None:
    # A traceback taken inside compute_reward (and metrics) during a fake run: at most 4 of
    # mathrl's frames between the worker thread's start (with a pool of threads) or the
    # episode's turn (a pool of none, the calls on the event loop) and the task.
    task = Traced()
    config = TrainConfig(steps=1, batch=2, group=2)
    backend = FakeBackend.for_run(task, run_problems(task, config), checkpoint_dir=tmp_path)
    workers = Workers(0) if pool == "inline" else Workers()
    with workers:
        asyncio.run(run_grpo_async(backend, task, config, workers=workers))
    for method, caller in (("compute_reward", "rewards_of"), ("metrics", "metrics_of")):
        stack = task.stacks[method]
        assert stack[-1].name == method
        if pool == "threads":
            between = frames_between(stack, "run")  # threading.Thread.run: the thread's start
            assert between == ["workers:_work", "workers:_one", f"rewards:{caller}"]
        else:
            between = frames_between(stack, "_one_turn")
            assert between == ["episodes:_work", "workers:run", f"rewards:{caller}"]
        assert len(between) <= 4


def test_from_a_worker_threads_start_to_an_episodes_end_reward_is_a_few_calls(
    tmp_path: Path,
) -> None:
    game = TracedGame()
    config = TrainConfig(steps=1, batch=2, group=2)
    backend = FakeBackend.for_run(game, run_problems(game, config), checkpoint_dir=tmp_path)
    asyncio.run(run_grpo_async(backend, game, config))
    between = frames_between(game.stacks["compute_reward"], "run")
    assert between == ["workers:_work", "workers:_one", "episodes:<lambda>", "rewards:rewards_of"]


# -- where a task's call runs, and what its errors name -------------------------------------------


@pytest.mark.parametrize(("adapter", "pooled"), [(Ranking(), True), (AsyncRanking(), False)])
def test_a_plain_group_judge_runs_in_the_pool_and_an_async_one_on_the_event_loop(
    adapter: MathAdapter, pooled: bool
) -> None:
    asked: list[tuple[str, object]] = []

    async def recording(method: str, given: object, fn: Callable[[], Any]) -> Any:
        asked.append((method, given))
        return fn()

    responses = [Response(" 4"), Response(" 42")]
    task = as_task(adapter)
    scored = asyncio.run(group_rewards(task, AdditionProblem(40, 2), responses, recording, None))
    assert [total for total, _ in scored] == [0.0, 1.0]
    # The pool is told the call and its input, to name them if the call fails or is late.
    assert asked == ([("compute_group_rewards", responses)] if pooled else [])


class NoProblem(Ranking):
    async def compute_group_rewards(  # type: ignore[override]  # the problem left out
        self, responses: Sequence[Response]
    ) -> list[float]:
        return [0.0] * len(responses)


class BadMetrics(MathAdapter):
    def metrics(self, response: Response, problem: AdditionProblem) -> Any:
        if "bad" in response:
            return {"tokens": "many"}
        if "raise" in response:
            raise ValueError("no metric")
        return {}


@pytest.mark.parametrize(
    ("responses", "message"),
    [
        ([" 1", " bad"], r"metrics broke the contract: metrics must be a mapping of names to "
                         r"finite numbers \(got \{'tokens': 'many'\}\) \(on ' bad'\)$"),
        ([" 1", " raise"], r"metrics raised ValueError: no metric \(on ' raise'\)$"),
    ],
)  # fmt: skip
def test_a_task_error_names_the_response_its_metrics_failed_on(
    responses: list[str], message: str
) -> None:
    with pytest.raises(TaskError, match=r"^task 'addition' failed: " + message):
        metrics_of(as_task(BadMetrics()), AdditionProblem(1, 2), list(map(Response, responses)))


def test_an_async_judge_that_cannot_be_called_is_named_with_the_group() -> None:
    with pytest.raises(
        TaskError, match=r"^task 'addition' failed: compute_group_rewards raised TypeError: .*"
        r"\(on \[' 4'\]\)$",
    ):  # fmt: skip
        scores(NoProblem(), AdditionProblem(40, 2), [Response(" 4")])


def test_a_task_errors_line_worked_examples() -> None:
    task = as_task(MathAdapter())
    # An error with no message is named by its type.
    assert str(TaskError(task, "compute_reward", ValueError(), Response(" 4"))) == (
        "task 'addition' failed: compute_reward raised ValueError: ValueError (on ' 4')"
    )
    # A one-turn task's response past its first turn (after a tool's result): the turn named.
    later = Response(" 4", turn=2)
    assert str(TaskError(task, "compute_reward", ValueError("no"), later)) == (
        "task 'addition' failed: compute_reward raised ValueError: no (on the model's turn 2: ' 4')"
    )
    # A sandbox's allowed_by is the name of an option; anything else is none.
    odd = ValueError("no")
    odd.allowed_by = 3  # type: ignore[attr-defined]
    assert TaskError(task, "compute_reward", odd, later).allowed_by is None


def test_a_response_ended_by_the_end_of_turn_keeps_its_turn() -> None:
    tokenizer = ByteTokenizer()
    tokens = [*tokenizer.encode(" 42"), tokenizer.end_of_turn_id]
    response = response_of(tokenizer, tokens, (), chat=True, turn=3)
    assert (response, response.ended, response.turn, response.tokens) == (
        " 42", "end_of_turn", 3, 4
    )  # fmt: skip


class MarksEmptyText:
    """A tokenizer whose empty text is a marker its other texts do not start with."""

    def encode(self, text: str) -> list[int]:
        return [1, *text.encode()] if text else [7]


def test_text_tokens_strip_only_what_the_tokenizer_adds_to_every_text() -> None:
    assert text_tokens(MarksEmptyText(), "hi") == [1, 104, 105]  # type: ignore[arg-type]  # encode alone
    assert text_tokens(ByteTokenizer(), "hi") == ByteTokenizer().encode("hi")


# -- a one-turn group's rewards and metrics in the pool ---------------------------------------


class Two:
    """Samples " 4" and " 5" for a request of two: two distinct responses."""

    tokenizer = ByteTokenizer()

    async def sample(self, prompt_T: Sequence[int], n: int, params: SampleParams) -> list[Any]:
        return [Completion((*self.tokenizer.encode(t), EOS), (-0.5,) * 3) for t in (" 4", " 5")]

    async def logprobs(self, tokens_T: Sequence[int]) -> list[float]:
        return [-0.5] * (len(tokens_T) - 1)


class SlowSums(MathAdapter):
    """Addition whose reward and metric each take 0.3 s a response; the metric is the
    problem's first operand."""

    def compute_reward(self, completion: str, problem: AdditionProblem) -> float:
        time.sleep(0.3)
        return super().compute_reward(completion, problem)

    def metrics(self, completion: Response, problem: AdditionProblem) -> dict[str, float]:
        time.sleep(0.3)
        return {"a": problem.a}


def one_turn(adapter: MathAdapter, workers: Workers) -> list[Any]:
    task = as_task(adapter)
    player = Player(Two.tokenizer, Two(), task, workers)
    prompt = adapter.make_prompt(AdditionProblem(2, 2))
    params = SampleParams(max_tokens=8, temperature=1.0, stop=("\n",), seed=0)
    prompt_T = Two.tokenizer.encode(prompt)
    return asyncio.run(player.group(AdditionProblem(2, 2), prompt, prompt_T, 2, params))


def test_a_groups_rewards_and_metrics_have_the_pools_time_for_each_distinct_response() -> None:
    # Two responses, 0.3 s each: 0.6 s, within 2 x 0.5 s, though not within one call's.
    for adapter in (SlowSums(), SlowSumsInProcesses()):
        with Workers(1, timeout=0.5) as workers:
            episodes = one_turn(adapter, workers)
        assert [(e.reward, e.metrics) for e in episodes] == [(1.0, {"a": 2}), (0.0, {"a": 2})]
        # A text prompt's completion ends at the end of the sequence, never of a turn.
        assert [e.final.ended for e in episodes] == ["end_of_sequence"] * 2


class SlowSumsInProcesses(SlowSums):
    work_in_processes = True


class HangsInAProcess(MathAdapter):
    """Writes its process's id to `where`, then never scores."""

    work_in_processes = True

    def __init__(self, where: Path) -> None:
        self.where = where

    def compute_reward(self, completion: str, problem: AdditionProblem) -> float:
        self.where.write_text(str(os.getpid()))
        time.sleep(60)
        return 0.0


def test_a_late_reward_in_a_process_ends_that_process_at_the_groups_budget(
    tmp_path: Path,
) -> None:
    with Workers(1, timeout=0.2) as workers, pytest.raises(TaskError, match=r"within 0\.4 s"):
        one_turn(HangsInAProcess(tmp_path / "pid"), workers)
    # Killed at the group's budget (2 responses x 0.2 s), not left to sleep on.
    pid, deadline = int((tmp_path / "pid").read_text()), time.monotonic() + 1.5
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not Path(f"/proc/{pid}").exists()


@pytest.mark.parametrize("method", ["compute_reward", "metrics"])
def test_a_late_reward_or_metric_names_the_group(method: str) -> None:
    class Late(MathAdapter):
        def compute_reward(self, completion: str, problem: AdditionProblem) -> float:
            time.sleep(0.3 if method == "compute_reward" else 0.0)
            return super().compute_reward(completion, problem)

        def metrics(self, completion: Response, problem: AdditionProblem) -> dict[str, float]:
            time.sleep(0.3)
            return {}

    with Workers(1, timeout=0.1) as workers, pytest.raises(TaskError) as late:
        one_turn(Late(), workers)
    assert str(late.value) == (
        f"task 'addition' failed: {method} did not return within 0.2 s (2 calls of up to 0.1 s "
        "each) (on [' 4', ' 5'])"
    )
