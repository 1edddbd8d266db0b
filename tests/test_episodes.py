"""Episodes: turns, the environment's replies, their tokens, rewards and sharing."""

from __future__ import annotations

import asyncio
import math
import os
import random
import re
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import strategies as st_
from conftest import checks_passed
from mathrl.adapter import AdapterError, Feedback, Message, Response
from mathrl.backend import Completion, SampleParams
from mathrl.config import TrainConfig
from mathrl.episodes import (
    Episode,
    Player,
    Turn,
    add_scores,
    all_or_none,
    episode_metrics,
    limits_error,
    next_turn_params,
    turn_seed,
)
from mathrl.grpo import episode_datum
from mathrl.loop import run_grpo
from mathrl.resolved import Task, as_task
from mathrl.rewards import TaskError, ended_tokens, text_tokens
from mathrl.rollout import run_problems
from mathrl.tasks.addition import AdditionProblem, MathAdapter, reward
from mathrl.text import shown
from mathrl.workers import Workers
from mathrl_fakes import ByteTokenizer, FakeBackend, RecordingBackend
from observing import Everything

TOK = ByteTokenizer()
EOS = TOK.eos_token_id
PARAMS = SampleParams(max_tokens=8, temperature=1.0, stop=("\n",), seed=7)


class Scripted:
    """A sampler that writes `script[k]` for the k-th request (k from 0), cut at max_tokens.

    It records every request; a text ending in "\\n" stops there, one that ends in
    "<eos>" ends with the end-of-sequence token.
    """

    def __init__(self, *script: str) -> None:
        self.script = list(script)
        self.requests: list[tuple[list[int], int, SampleParams]] = []

    async def sample(
        self, prompt_T: Sequence[int], num_samples: int, params: SampleParams
    ) -> list[Completion]:
        text = self.script[len(self.requests)]
        self.requests.append((list(prompt_T), num_samples, params))
        eos = text.endswith("<eos>")
        tokens = TOK.encode(text.removesuffix("<eos>")) + ([EOS] if eos else [])
        tokens = tokens[: params.max_tokens]
        completion = Completion(tuple(tokens), tuple(-0.25 for _ in tokens))
        return [completion] * num_samples

    async def logprobs(self, tokens_T: Sequence[int]) -> list[float]:
        return [-0.25] * (len(tokens_T) - 1)


class Guess:
    """Guess a secret digit; after a miss the environment says higher or lower."""

    name = "guess"
    max_tokens = 8
    max_turns = 3
    stop = ("\n",)

    def __init__(self) -> None:
        self.feedback_calls: list[tuple[str, ...]] = []
        self.reward_calls: list[str] = []

    def build_dataset(self, seed: int, step: int, size: int) -> list[int]:
        rng = random.Random(f"guess/{seed}/{step}")
        return [rng.randint(0, 9) for _ in range(size)]

    def make_prompt(self, problem: int) -> str:
        return "Guess my digit: "

    def feedback(self, problem: int, responses: Sequence[Response]) -> Feedback:
        self.feedback_calls.append(tuple(responses))
        guess = responses[-1].strip()
        if guess == str(problem):
            return Feedback(None, {"found": 0.5})
        return Feedback("higher: " if guess < str(problem) else "lower: ", {"miss": -0.1})

    def compute_reward(self, completion: str, problem: int) -> float:
        self.reward_calls.append(completion)
        return 1.0 if completion.strip() == str(problem) else 0.0

    def reference_completion(self, problem: int) -> str:
        return f"{problem}\n"

    def evaluate(self, rewards: Sequence[float]) -> float:
        return sum(r >= 1.0 for r in rewards) / len(rewards) if rewards else 0.0


def play(
    task: Task[Any],
    sampler: Scripted,
    problem: object,
    size: int = 1,
    params: SampleParams = PARAMS,
    workers: Workers | None = None,
) -> list[Episode]:
    prompt = task.adapter.make_prompt(problem)
    prompt_T = TOK.encode(prompt) if isinstance(prompt, str) else TOK.render_chat(prompt, {})

    async def go() -> list[Episode]:
        player = Player(TOK, sampler, task, workers or Workers(size=0))
        return await player.group(problem, prompt, prompt_T, size, params)

    return asyncio.run(go())


def test_an_episode_goes_on_until_the_environment_stops_replying() -> None:
    guess = Guess()
    sampler = Scripted("3\n", "7\n", "5\n")
    (episode,) = play(as_task(guess), sampler, 5)
    assert [str(t.response) for t in episode.turns] == ["3\n", "7\n", "5\n"]
    assert [t.response.turn for t in episode.turns] == [1, 2, 3]
    assert [t.reply for t in episode.turns] == ["higher: ", "lower: ", None]
    # Each request's prompt is the last one's, plus what was sampled, plus the reply:
    # tokens as sampled and replies as encoded, never decoded and encoded again.
    prompts = [request[0] for request in sampler.requests]
    assert prompts[1] == prompts[0] + TOK.encode("3\n") + TOK.encode("higher: ")
    assert prompts[2] == prompts[1] + TOK.encode("7\n") + TOK.encode("lower: ")
    # Later turns are one sample each, seeded per member and turn.
    assert [(n, p.seed) for _, n, p in sampler.requests[1:]] == [
        (1, turn_seed(7, 0, 2)),
        (1, turn_seed(7, 0, 3)),
    ]
    # Reward: the feedback's parts plus compute_reward's on the last turn.
    # miss -0.1 twice, found 0.5, and 1.0 for the final answer: 1.3 in all.
    # A plain number has no name: the named parts are the feedback's.
    assert episode.reward == pytest.approx(1.3)
    assert episode.parts == pytest.approx({"miss": -0.2, "found": 0.5})
    assert episode.final.turn == 3
    assert guess.reward_calls == ["5\n"]  # compute_reward sees only the final turn
    assert [len(history) for history in guess.feedback_calls] == [1, 2, 3]
    assert episode.sampled_tokens == 6


def test_an_episodes_datum_trains_the_models_tokens_only() -> None:
    sampler = Scripted("3\n", "5\n")
    (episode,) = play(as_task(Guess()), sampler, 5)
    prompt_T = sampler.requests[0][0]
    datum = episode.datum(prompt_T, 0.75)
    replies = [list(t.reply_T) for t in episode.turns[:-1]]
    assert replies == [TOK.encode("higher: ")]
    turns = [list(t.completion.tokens) for t in episode.turns]
    logprobs = [list(t.completion.logprobs) for t in episode.turns]
    assert datum == episode_datum(prompt_T, turns, logprobs, replies, 0.75)
    assert datum is not None
    # The last request's prompt plus the last turn is the datum's whole sequence.
    assert [*datum.model_input, datum.target_tokens[-1]] == sampler.requests[-1][0] + turns[-1]


def test_max_turns_ends_an_episode_the_environment_would_go_on_with() -> None:
    sampler = Scripted("1\n", "2\n", "3\n", "4\n")
    (episode,) = play(as_task(Guess()), sampler, 9)
    assert len(episode.turns) == 3 == len(sampler.requests)
    assert episode.turns[-1].reply is None  # the environment's reply to the last turn is dropped
    assert episode.reward == pytest.approx(-0.3)  # three misses, a wrong final answer


def test_the_episode_token_budget_ends_an_episode_and_caps_later_turns() -> None:
    guess = Guess()
    guess.episode_tokens = 14  # type: ignore[attr-defined]  # declared on this instance only
    sampler = Scripted("1\n", "22222222", "3\n")
    (episode,) = play(as_task(guess), sampler, 9)
    # Turn 1: 2 tokens, reply "higher: " 8 tokens -> 10 used, 4 left for turn 2.
    assert sampler.requests[1][2].max_tokens == 4
    # Turn 2 takes all 4: 14 used, and no reply fits: the episode ends there.
    assert [str(t.response) for t in episode.turns] == ["1\n", "2222"]
    assert episode.final.ended == "length"
    assert len(sampler.requests) == 2


@pytest.mark.parametrize(("budget", "turns"), [(10, 1), (11, 2)])
def test_a_reply_that_fills_the_budget_ends_the_episode(budget: int, turns: int) -> None:
    # Turn 1: 2 tokens and the reply's 8 make 10: with 10 in all, no token is left for a
    # turn 2, and the episode ends; with 11, turn 2 has 1.
    guess = Guess()
    guess.episode_tokens = budget  # type: ignore[attr-defined]  # declared on this instance only
    (episode,) = play(as_task(guess), Scripted("1\n", "5\n"), 5)
    assert len(episode.turns) == turns


def test_later_turns_of_an_unseeded_request_are_seeded_as_of_seed_0() -> None:
    sampler = Scripted("3\n", "5\n")
    play(as_task(Guess()), sampler, 5, params=replace(PARAMS, seed=None))
    assert [p.seed for _, _, p in sampler.requests] == [None, turn_seed(0, 0, 2)]


class Unpaid(Guess):
    def __init__(self, **said: Any) -> None:
        super().__init__()
        self.said = said

    def feedback(self, problem: int, responses: Sequence[Response]) -> Feedback:
        return replace(super().feedback(problem, responses), **self.said)


@pytest.mark.parametrize(
    ("said", "message"),
    [
        ({"reward": math.nan}, "a reward must be finite: a number or named numbers (got nan)"),
        ({"metrics": {"tries": "one"}}, "metrics must be a mapping of names to finite numbers "
                                        "(got {'tries': 'one'})"),
    ],
)  # fmt: skip
def test_a_feedbacks_reward_or_metrics_that_are_not_numbers_are_named_with_the_turn(
    said: dict[str, Any], message: str
) -> None:
    with pytest.raises(TaskError) as excinfo:
        play(as_task(Unpaid(**said)), Scripted("3\n"), 5)
    assert str(excinfo.value) == (
        f"task 'guess' failed: feedback broke the contract: {message} (on the model's turn 1: "
        "'3\\n')"
    )


def test_the_default_budget_is_two_turns_of_tokens_a_turn() -> None:
    task = as_task(Guess())
    assert task.episode_budget(8) == 2 * 3 * 8
    assert replace(task, episode_tokens=5).episode_budget(8) == 5


class ChatGuess(Guess):
    episode_tokens = 200  # the template's messages are long next to the fake's tokens

    def make_prompt(self, problem: int) -> list[Message]:  # type: ignore[override]  # chat, not text
        return [{"role": "user", "content": "Guess my digit."}]


def test_a_chat_reply_is_the_templates_next_message_and_mends_a_cut_off_turn() -> None:
    sampler = Scripted("3<eos>", "00000000", "5<eos>")
    params = replace(PARAMS, stop=(), end_of_turn=True)
    (episode,) = play(as_task(ChatGuess()), sampler, 5, params=params)
    user = TOK.render_reply({"role": "user", "content": "higher: "}, {})
    prompts = [request[0] for request in sampler.requests]
    # Turn 1 ended with the end-of-turn token: the next message follows it directly.
    assert prompts[1] == prompts[0] + TOK.encode("3") + [EOS] + user
    # Turn 2 ran out of tokens: the reply closes the turn first with an end-of-turn token.
    assert prompts[2] == prompts[1] + TOK.encode("00000000") + [EOS] + user
    assert [t.response.ended for t in episode.turns] == ["end_of_turn", "length", "end_of_turn"]
    assert str(episode.final) == "5"


def test_identical_histories_in_a_group_share_their_feedback_and_reward() -> None:
    guess = Guess()
    # One request for the group's four first turns (all "3\n"), then one per member.
    sampler = Scripted("3\n", "5\n", "5\n", "4\n", "5\n", "5\n")
    episodes = play(as_task(guess), sampler, 5, size=4)
    assert sampler.requests[0][1] == 4
    assert len(sampler.requests) == 6
    # Four identical first turns: one feedback call. Second turns: "5" three times, "4"
    # once: two calls. Then member 2's third turn: one more.
    assert sorted(len(h) for h in guess.feedback_calls) == [1, 2, 2, 3]
    assert sorted(guess.reward_calls) == ["5\n", "5\n"]  # "5\n" once at turn 2, once at turn 3
    assert [len(e.turns) for e in episodes] == [2, 2, 3, 2]


class Judged(Guess):
    """Guess, scored as a group: a member earns 1 for each other member it beat to it."""

    def compute_group_rewards(self, responses: Sequence[Response], problem: int) -> list[float]:
        return [float(sum(r.turn < other.turn for other in responses)) for r in responses]


class JudgedByItsProblem(Guess):
    def compute_group_rewards(self, responses: Sequence[Response], problem: int) -> list[float]:
        return [float(problem)] * len(responses)


def test_a_group_reward_of_episodes_is_given_their_problem() -> None:
    episodes = play(as_task(JudgedByItsProblem()), Scripted("5\n", "5\n"), 5, size=2)
    assert [e.reward for e in episodes] == [5.0 + 0.5] * 2  # the judge's 5, the feedback's 0.5


def test_a_group_reward_scores_the_final_turns_together() -> None:
    sampler = Scripted("3\n", "5\n", "4\n", "5\n")
    episodes = play(as_task(Judged()), sampler, 5, size=2)
    assert [e.final.turn for e in episodes] == [2, 3]
    # Member 0 found it at turn 2, member 1 at turn 3: group rewards 1 and 0, plus
    # the feedback's parts (one miss and a find; two misses and a find).
    assert [e.reward for e in episodes] == pytest.approx([1.0 - 0.1 + 0.5, 0.0 - 0.2 + 0.5])


class Rude(Guess):
    def feedback(self, problem: int, responses: Sequence[Response]) -> Feedback:
        return "try again"  # type: ignore[return-value]  # the mistake under test


class Broken(Guess):
    def feedback(self, problem: int, responses: Sequence[Response]) -> Feedback:
        raise KeyError(problem)


def test_a_feedback_that_fails_or_returns_the_wrong_thing_is_a_task_error() -> None:
    with pytest.raises(
        TaskError,
        match=r"^task 'guess' failed: feedback broke the contract: it must return a "
        r"Feedback\(reply=text or None, reward=\.\.\.\) \(got 'try again'\) "
        r"\(on the model's turn 1: '3\\n'\)$",
    ):
        play(as_task(Rude()), Scripted("3\n"), 5)
    with pytest.raises(TaskError, match="KeyError"):
        play(as_task(Broken()), Scripted("3\n"), 5)


class Measured(Guess):
    """Guess, reporting the guesses so far and the first guess at each turn, and the turn
    the digit was found on (only when it was)."""

    def __init__(self) -> None:
        super().__init__()
        self.metric_calls: list[str] = []

    def feedback(self, problem: int, responses: Sequence[Response]) -> Feedback:
        said = super().feedback(problem, responses)
        first = {"first_guess": float(responses[0].strip())} if len(responses) == 1 else {}
        return replace(said, metrics={"guesses": len(responses), **first})

    def metrics(self, completion: Response, problem: int) -> Mapping[str, float]:
        self.metric_calls.append(str(completion))
        return {"found_on_turn": completion.turn} if completion.strip() == str(problem) else {}


def test_each_episode_of_a_group_has_its_own_last_turns_metrics() -> None:
    # Member 0 finds 5 at turn 2; member 1 at turn 3 (requests: both firsts, then each turn).
    episodes = play(as_task(Measured()), Scripted("3\n", "5\n", "4\n", "5\n"), 5, size=2)
    assert [e.metrics.get("found_on_turn") for e in episodes] == [2.0, 3.0]


class LateAtTheEnd(Guess):
    """Its end reward, or its metrics, take 0.3 s."""

    def __init__(self, method: str) -> None:
        super().__init__()
        self.method = method

    def compute_reward(self, completion: str, problem: int) -> float:
        time.sleep(0.3 if self.method == "compute_reward" else 0.0)
        return super().compute_reward(completion, problem)

    def metrics(self, completion: Response, problem: int) -> Mapping[str, float]:
        time.sleep(0.3 if self.method == "metrics" else 0.0)
        return {}


@pytest.mark.parametrize("method", ["compute_reward", "metrics"])
def test_an_episodes_late_end_reward_or_metrics_name_its_last_turn(method: str) -> None:
    with Workers(size=1, timeout=0.05) as workers, pytest.raises(TaskError) as excinfo:
        play(as_task(LateAtTheEnd(method)), Scripted("3\n", "5\n"), 5, workers=workers)
    assert str(excinfo.value) == (
        f"task 'guess' failed: {method} did not return within 0.05 s (on the model's turn 2: "
        "'5\\n')"
    )


def test_an_episodes_metrics_are_each_names_latest_and_the_tasks_own_on_its_last_turn() -> None:
    measured = Measured()
    (episode,) = play(as_task(measured), Scripted("3\n", "7\n", "5\n"), 5)
    # guesses: 1, 2, then 3 (the latest); first_guess only at turn 1; found on turn 3.
    assert episode.metrics == {"guesses": 3.0, "first_guess": 3.0, "found_on_turn": 3.0}
    assert measured.metric_calls == ["5\n"]  # the task's metrics see only the last turn
    # A group of identical episodes: one metrics call, shared.
    shared = Measured()
    episodes = play(as_task(shared), Scripted("5\n"), 5, size=3)
    assert [e.metrics for e in episodes] == [{"guesses": 1.0, "first_guess": 5.0,
                                              "found_on_turn": 1.0}] * 3  # fmt: skip
    assert shared.metric_calls == ["5\n"]
    # Without metrics of its own, an episode keeps what its feedback said.
    plain = Measured()
    plain.metrics = None  # type: ignore[assignment,method-assign]  # no metrics method
    (episode,) = play(as_task(plain), Scripted("3\n", "5\n"), 5)
    assert episode.metrics == {"guesses": 2.0, "first_guess": 3.0}


class MeasuresBadly(Guess):
    def feedback(self, problem: int, responses: Sequence[Response]) -> Feedback:
        return Feedback("again: ", 0.0, metrics={"guesses": float("nan")})


def test_feedback_metrics_that_are_not_finite_are_a_task_error() -> None:
    with pytest.raises(
        TaskError, match=r"feedback broke the contract: metrics must be a mapping of names to "
    ):
        play(as_task(MeasuresBadly()), Scripted("3\n"), 5)


@given(st_.completion_metrics, st_.completion_metrics.map(lambda m: m[0] if m else {}))
def test_an_episodes_metrics_keep_each_names_latest_value(
    said: list[dict[str, float]], end: dict[str, float]
) -> None:
    metrics = episode_metrics(said, end)
    assert set(metrics) == {name for named in [*said, end] for name in named}
    for name, value in metrics.items():
        assert value == [named[name] for named in [*said, end] if name in named][-1]


def test_episode_metrics_worked_example() -> None:
    # guesses 1 then 2 (the latest wins); the task's own metrics win over the feedback's.
    said = [{"guesses": 1.0, "hint": 0.0}, {"guesses": 2.0}]
    assert episode_metrics(said, {"hint": 1.0}) == {"guesses": 2.0, "hint": 1.0}
    assert episode_metrics([], {}) == {}


class BrokenLater(Guess):
    def feedback(self, problem: int, responses: Sequence[Response]) -> Feedback:
        if len(responses) == 2:
            raise KeyError(problem)
        return super().feedback(problem, responses)


def test_a_feedback_failure_names_the_models_turn() -> None:
    # The first guess is answered; the environment fails on the second, and says so.
    with pytest.raises(TaskError) as raised:
        play(as_task(BrokenLater()), Scripted("3\n", "7\n"), 5)
    assert str(raised.value) == (
        "task 'guess' failed: feedback raised KeyError: 5 (on the model's turn 2: '7\\n')"
    )


class Stuck(Guess):
    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    def feedback(self, problem: int, responses: Sequence[Response]) -> Feedback:
        self.release.wait(10)
        return Feedback(None)


def test_a_feedback_past_the_timeout_is_a_task_error() -> None:
    stuck = Stuck()
    workers = Workers(size=1, timeout=0.05)
    try:
        with pytest.raises(TaskError, match=r"feedback.*did not return within 0\.05 s"):
            play(as_task(stuck), Scripted("3\n"), 5, workers=workers)
    finally:
        stuck.release.set()
        workers.close()


def test_a_task_without_feedback_plays_one_turn_episodes() -> None:
    class OneTurn(Guess):
        max_turns = 1
        feedback = None  # type: ignore[assignment]  # no environment

    (episode,) = play(as_task(OneTurn()), Scripted("5\n"), 5)
    assert len(episode.turns) == 1
    assert (episode.reward, episode.parts) == (1.0, {})


def test_several_turns_need_feedback() -> None:
    class NoFeedback(Guess):
        feedback = None  # type: ignore[assignment]  # the mistake under test

    with pytest.raises(AdapterError, match="max_turns is 3 but NoFeedback has no feedback"):
        as_task(NoFeedback())
    for bad in (0, 101, 2.5, True):
        guess = Guess()
        guess.max_turns = bad  # type: ignore[assignment]  # the mistake under test
        with pytest.raises(AdapterError, match=r"max_turns must be an integer from 1 to 100"):
            as_task(guess)
    guess = Guess()
    guess.episode_tokens = 0  # type: ignore[attr-defined]  # the mistake under test
    with pytest.raises(AdapterError, match=r"episode_tokens must be an integer >= 1 \(got 0\)"):
        as_task(guess)


@given(st_.seeds, st.integers(0, 63), st.integers(2, 100))
def test_turn_seeds_are_stable_and_vary_with_member_and_turn(
    seed: int, member: int, turn: int
) -> None:
    value = turn_seed(seed, member, turn)
    assert value == turn_seed(seed, member, turn)
    assert 0 <= value < 2**31
    assert {value, turn_seed(seed, member + 1, turn), turn_seed(seed, member, turn + 1)} != {value}


def test_turn_seeds_worked_example() -> None:
    # The first 4 bytes of blake2b("0/0/2"), little-endian, less the top bit. A run's later
    # turns are sampled with these: another rule would change every multi-turn run's samples.
    assert turn_seed(0, 0, 2) == 2077799758
    assert turn_seed(12345, 3, 4) == 742787193


@given(st.lists(st.tuples(st_.rewards, st_.reward_parts), max_size=5))
def test_add_scores_adds_totals_and_parts(scores: list[tuple[float, dict[str, float]]]) -> None:
    total, parts = add_scores(scores)
    assert total == pytest.approx(sum(t for t, _ in scores), abs=1e-6)
    assert set(parts) == {name for _, named in scores for name in named}
    for name, value in parts.items():
        assert value == pytest.approx(sum(n.get(name, 0.0) for _, n in scores), abs=1e-6)


def test_add_scores_worked_example() -> None:
    # (-0.1, miss), (0.5, found), (1.0, reward) -> 1.4; miss and found and reward kept apart.
    total, parts = add_scores([(-0.1, {"miss": -0.1}), (0.5, {"found": 0.5}), (1.0, {"r": 1.0})])
    assert total == pytest.approx(1.4)
    assert parts == {"miss": -0.1, "found": 0.5, "r": 1.0}


def test_an_episode_of_one_turn_is_a_completion() -> None:
    completion = Completion((1, 2), (-0.5, -0.5))
    episode = Episode((Turn(completion, Response("ab")),))
    assert episode.datum([9], 1.0) == episode_datum([9], [[1, 2]], [[-0.5, -0.5]], [], 1.0)
    assert episode.sampled_tokens == 2


class GuessInProcesses(Guess):
    work_in_processes = True


def test_a_task_may_run_its_work_in_processes() -> None:
    guess = GuessInProcesses()
    with Workers(size=2) as workers:
        (episode,) = play(as_task(guess), Scripted("3\n", "5\n"), 5, workers=workers)
    # The same episode as on threads; the calls ran in copies of this process.
    assert episode.reward == pytest.approx(-0.1 + 0.5 + 1.0)
    assert (guess.feedback_calls, guess.reward_calls) == ([], [])
    # Inline (a virtual clock's), they run on the loop itself.
    inline = GuessInProcesses()
    play(as_task(inline), Scripted("3\n", "5\n"), 5)
    assert len(inline.feedback_calls) == 2


class BrokenInProcesses(GuessInProcesses):
    def feedback(self, problem: int, responses: Sequence[Response]) -> Feedback:
        raise KeyError(problem)


class DiesInProcesses(GuessInProcesses):
    def compute_reward(self, completion: str, problem: int) -> float:
        os._exit(9)


def test_a_failure_in_a_work_process_is_a_task_error() -> None:
    with Workers(size=1) as workers, pytest.raises(TaskError, match=r"feedback raised KeyError"):
        play(as_task(BrokenInProcesses()), Scripted("3\n"), 5, workers=workers)
    with (
        Workers(size=1) as workers,
        pytest.raises(TaskError, match=r"compute_reward raised WorkerDied: its process ended "),
    ):
        play(as_task(DiesInProcesses()), Scripted("5\n"), 5, workers=workers)


def test_work_in_processes_is_a_switch() -> None:
    guess = Guess()
    guess.work_in_processes = "yes"  # type: ignore[attr-defined]  # the mistake under test
    with pytest.raises(AdapterError, match=r"work_in_processes must be True or False"):
        as_task(guess)


class ChatGame(Guess):
    """The guessing game as a conversation, its replies as the user's messages."""

    name = "chat-game"
    stop = ()  # type: ignore[assignment]  # a conversation's turn ends at end-of-turn
    episode_tokens = 200

    def build_dataset(self, seed: int, step: int, size: int) -> list[int]:
        rng = random.Random(f"chat-game/{seed}/{step}")
        return [rng.randint(0, 9) * 1000 + rng.randint(0, 999) for _ in range(size)]

    def make_prompt(self, problem: int) -> list[Message]:  # type: ignore[override]  # chat, not text
        return [{"role": "user", "content": f"Game {problem % 1000}: guess my digit."}]

    def feedback(self, problem: int, responses: Sequence[Response]) -> Feedback:
        return super().feedback(problem // 1000, responses)

    def compute_reward(self, completion: str, problem: int) -> float:
        return super().compute_reward(completion, problem // 1000)

    def reference_completion(self, problem: int) -> str:
        return str(problem // 1000)


def test_a_conversation_game_learns_its_later_turns_on_the_fake(tmp_path: Path) -> None:
    config = TrainConfig(steps=12, batch=8, group=4)
    backend = FakeBackend.for_run(
        ChatGame(), run_problems(ChatGame(), config), checkpoint_dir=tmp_path
    )
    observer = Everything()
    result = run_grpo(backend, ChatGame(), config, observer)
    assert all(m.datums > 0 for m in result.steps[:3])
    # Early on, some episodes take a second or third turn, each a chat reply.
    logged = [s for g in observer.samples if g.step <= 3 for s in g.samples]
    later = [s for s in logged if s.earlier]
    assert later
    assert all(reply.startswith(("higher: ", "lower: ")) for s in later for _, reply in s.earlier)
    rewards = [m.mean_reward for m in result.steps]
    assert sum(rewards[-3:]) / 3 > sum(rewards[:3]) / 3


def test_all_or_none_cancels_the_rest_at_the_first_failure() -> None:
    async def go() -> asyncio.Task[None]:
        waiting = asyncio.ensure_future(asyncio.sleep(30))

        async def fail() -> None:
            raise KeyError("first")

        with pytest.raises(KeyError):
            await all_or_none([waiting, fail()])
        await asyncio.sleep(0)
        return waiting

    assert asyncio.run(go()).cancelled()


class WithBos(ByteTokenizer):
    """Adds a beginning-of-text token (255) to every text, as a Llama tokenizer does."""

    def encode(self, text: str) -> list[int]:
        return [255, *super().encode(text)]


def test_a_reply_in_mid_sequence_has_no_beginning_of_text_token() -> None:
    # "hi" is [104, 105]; encoded alone it is [255, 104, 105]; a reply is just [104, 105].
    assert text_tokens(WithBos(), "hi") == [104, 105]
    assert text_tokens(ByteTokenizer(), "hi") == [104, 105]
    # A reference's length counts no beginning-of-text token either: "hi" and "\n" is 3,
    # "hi" and one end-of-sequence token is 3 too.
    assert ended_tokens(WithBos(), "hi", ("\n",)) == 3
    assert ended_tokens(WithBos(), "hi", ()) == 3


class EmptyReply(Guess):
    def feedback(self, problem: int, responses: Sequence[Response]) -> Feedback:
        return Feedback("" if len(responses) < 2 else None)


def test_an_empty_reply_lets_the_model_go_on() -> None:
    sampler = Scripted("3\n", "5\n")
    (episode,) = play(as_task(EmptyReply()), sampler, 5)
    assert len(episode.turns) == 2
    assert sampler.requests[1][0] == sampler.requests[0][0] + TOK.encode("3\n")


def test_the_first_turn_keeps_to_the_episode_budget() -> None:
    guess = Guess()
    guess.episode_tokens = 3  # type: ignore[attr-defined]  # fewer than max_tokens (8)
    sampler = Scripted("1234567\n")
    play(as_task(guess), sampler, 5)
    assert sampler.requests[0][2].max_tokens == 3


class NoReplies(ByteTokenizer):
    def render_reply(
        self, message: Mapping[str, str] | Sequence[Mapping[str, str]], options: Mapping[str, Any]
    ) -> list[int]:
        assert isinstance(message, Mapping)  # one reply: one message
        raise ValueError(f"this template has no {message['role']!r} role")


def test_a_reply_the_template_cannot_render_is_a_task_error() -> None:
    task = as_task(ChatGuess())

    async def go() -> list[Episode]:
        player = Player(NoReplies(), Scripted("3<eos>"), task, Workers(size=0))
        params = replace(PARAMS, stop=(), end_of_turn=True)
        return await player.group(5, task.adapter.make_prompt(5), [1, 2], 1, params)

    with pytest.raises(TaskError, match=r"feedback raised ValueError: this template has no 'user'"):
        asyncio.run(go())


class SlowJudge(Guess):
    async def compute_group_rewards(
        self, responses: Sequence[Response], problem: int
    ) -> list[float]:
        await asyncio.sleep(30)
        return [0.0] * len(responses)


class JudgeTimesOut(Guess):
    async def compute_group_rewards(
        self, responses: Sequence[Response], problem: int
    ) -> list[float]:
        raise TimeoutError("the judge's own service timed out")


def test_an_async_judge_has_the_pools_time_and_its_own_timeouts_are_its_errors() -> None:
    with Workers(size=1, timeout=0.05) as workers:
        with pytest.raises(TaskError, match=r"compute_group_rewards did not return within 0\.05"):
            play(as_task(SlowJudge()), Scripted("5\n"), 5, workers=workers)
        with pytest.raises(TaskError, match=r"raised TimeoutError: the judge's own service"):
            play(as_task(JudgeTimesOut()), Scripted("5\n"), 5, workers=workers)


class BriefJudge(Guess):
    async def compute_group_rewards(
        self, responses: Sequence[Response], problem: int
    ) -> list[float]:
        await asyncio.sleep(0.2)
        return [1.0] * len(responses)


def test_an_async_judge_without_a_pool_has_no_time_limit() -> None:
    # With no worker threads (every call on the event loop), the pool's timeout is not the
    # judge's: a judge that takes 0.2 s answers, though the pool would give it 0.05 s.
    (episode,) = play(as_task(BriefJudge()), Scripted("5\n"), 5, workers=Workers(0, timeout=0.05))
    assert episode.reward == 1.0 + 0.5  # its reward, and the feedback's "found"


class SlowFeedback(Guess):
    def feedback(self, problem: int, responses: Sequence[Response]) -> Feedback:
        time.sleep(0.2)
        return super().feedback(problem, responses)


def test_a_late_feedback_is_named_with_the_turn_it_answers() -> None:
    with Workers(size=1, timeout=0.05) as workers, pytest.raises(TaskError) as excinfo:
        play(as_task(SlowFeedback()), Scripted("3\n"), 5, workers=workers)
    assert str(excinfo.value) == (
        "task 'guess' failed: feedback did not return within 0.05 s (on the model's turn 1: '3\\n')"
    )


class Relay(Guess):
    """After a miss, the next guess ends with ";" and has 3 tokens; then the task's again."""

    def feedback(self, problem: int, responses: Sequence[Response]) -> Feedback:
        said = super().feedback(problem, responses)
        if len(responses) == 1 and said.reply is not None:
            return replace(said, stop=(";",), max_tokens=3)
        return said


def test_feedback_sets_the_next_turns_stop_and_budget_for_that_turn_only() -> None:
    sampler = Scripted("3\n", "4;", "5\n")
    (episode,) = play(as_task(Relay()), sampler, 5)
    limits = [(p.stop, p.max_tokens) for _, _, p in sampler.requests]
    # Turn 1: the task's stop and the run's 8. Turn 2: what turn 1's feedback set. Turn 3:
    # the defaults again, within what is left of 2 * 3 * 8 = 48: 2 + 8 + 2 + 8 = 20 used.
    assert limits == [(("\n",), 8), ((";",), 3), (("\n",), 8)]
    # Each turn's Response reports the stop that ended it, read with that turn's stops.
    assert [(t.response.ended, t.response.stop) for t in episode.turns] == [
        ("stop", "\n"),
        ("stop", ";"),
        ("stop", "\n"),
    ]
    assert episode.turns[1].response.text == "4"


def test_a_turn_that_runs_past_the_budget_its_feedback_set_is_cut_off() -> None:
    sampler = Scripted("3\n", "444;", "5\n")
    (episode,) = play(as_task(Relay()), sampler, 5)
    second = episode.turns[1].response
    assert (str(second), second.ended, second.stop) == ("444", "length", None)


def test_the_budget_a_feedback_sets_is_capped_by_what_is_left_of_the_episode() -> None:
    relay = Relay()
    relay.episode_tokens = 12  # type: ignore[attr-defined]  # declared on this instance only
    sampler = Scripted("3\n", "4;")
    play(as_task(relay), sampler, 5)
    # Turn 1: 2 tokens, reply "higher: " 8: 10 used, so turn 2 gets min(3, 12 - 10) = 2.
    assert sampler.requests[1][2].max_tokens == 2


@given(st_.sample_params, st_.turn_stops, st_.turn_budgets, st.integers(1, 4096), st_.seeds)
def test_a_turns_params_are_the_episodes_with_the_limits_its_feedback_sets(
    params: SampleParams, stop: tuple[str, ...] | None, budget: int | None, left: int, seed: int
) -> None:
    said = Feedback("reply", stop=stop, max_tokens=budget)
    assert limits_error(said) is None
    later = next_turn_params(params, said, left, seed)
    assert later.stop == (params.stop if stop is None else stop)
    assert later.max_tokens == min(params.max_tokens if budget is None else budget, left)
    assert 1 <= later.max_tokens <= left
    assert later.seed == seed
    assert (later.temperature, later.end_of_turn) == (params.temperature, params.end_of_turn)


@given(st.booleans(), st.data())
def test_an_invalid_limit_is_named_with_what_it_got(bad_stop: bool, data: st.DataObject) -> None:
    stop = data.draw(st_.bad_turn_stops if bad_stop else st_.turn_stops)
    budget = data.draw(st_.turn_budgets if bad_stop else st_.bad_turn_budgets)
    # What a task's untyped code may hand back: the mistakes under test.
    wrong = limits_error(Feedback("reply", stop=stop, max_tokens=budget))  # type: ignore[arg-type]
    field, value = ("stop", stop) if bad_stop else ("max_tokens", budget)
    assert wrong is not None
    assert wrong.startswith(f"Feedback.{field} must be ")
    assert wrong.endswith(f"(got {shown(value)})")


def test_the_smallest_budget_a_feedback_may_set_is_one_token() -> None:
    # The edge, pinned without a random draw: 1 is a budget (an integer >= 1), 0 is not.
    assert limits_error(Feedback("reply", max_tokens=1)) is None
    assert limits_error(Feedback("reply", max_tokens=0)) == (
        "Feedback.max_tokens must be an integer >= 1, or None for the run's max_tokens (got 0)"
    )


def test_a_feedback_setting_a_list_of_stops_is_read_as_a_tuple() -> None:
    # A list is what a task author may well write; the request holds a tuple.
    said = Feedback("r", stop=[";", "."])  # type: ignore[arg-type]  # a list, as written
    assert limits_error(said) is None
    assert next_turn_params(PARAMS, said, 5, 1).stop == (";", ".")


class SetsLimits(Guess):
    def __init__(self, **limits: Any) -> None:
        super().__init__()
        self.limits = limits

    def feedback(self, problem: int, responses: Sequence[Response]) -> Feedback:
        return replace(super().feedback(problem, responses), **self.limits)


@pytest.mark.parametrize(
    ("limits", "expected"),
    [
        ({"max_tokens": 0}, r"Feedback\.max_tokens must be an integer >= 1, or None for the "
            r"run's max_tokens \(got 0\)"),
        ({"max_tokens": True}, r"Feedback\.max_tokens must be .* \(got True\)"),
        ({"stop": "\n"}, r"Feedback\.stop must be a tuple of non-empty strings, e\.g\. "
            r"\('\\n',\), or None for the task's stop \(got '\\n'\)"),
        ({"stop": ("",)}, r"Feedback\.stop must be .* \(got \(''\,\)\)"),
    ],
)  # fmt: skip
def test_a_feedback_that_sets_invalid_limits_ends_the_run_naming_the_task_and_turn(
    limits: dict[str, Any], expected: str
) -> None:
    with pytest.raises(TaskError) as excinfo:
        play(as_task(SetsLimits(**limits)), Scripted("3\n"), 5)
    message = str(excinfo.value)
    assert message.startswith("task 'guess' failed: feedback broke the contract: after turn 1, ")
    assert message.endswith(" (on the model's turn 1: '3\\n')")
    assert re.search(expected, message), message
    assert "\n" not in message


class SumThenNext(MathAdapter):
    """Two turns: the sum, ended by the task's newline; then the sum plus one, ended by the
    ";" the feedback sets for that turn, within the 5 tokens it sets (" 199;" at most), fewer
    than the task's 8. Each right turn pays 0.5; the second only if it ended at ";"."""

    name = "sum-then-next"
    max_turns = 2

    def feedback(self, problem: AdditionProblem, responses: Sequence[Response]) -> Feedback:
        if len(responses) > 1:
            return Feedback(None)
        right = super().compute_reward(responses[-1], problem) == 1.0
        return Feedback(" Plus one: ", 0.5 if right else 0.0, stop=(";",), max_tokens=5)

    def compute_reward(self, completion: str, problem: AdditionProblem) -> float:
        last = completion if isinstance(completion, Response) else Response(completion)
        right = reward(last.text, problem.answer + 1) == 1.0
        return 0.5 if right and last.turn == 2 and last.stop == ";" else 0.0

    def reference_turn(self, problem: AdditionProblem, responses: Sequence[Response]) -> str:
        return f" {problem.answer + 1}"

    def evaluate(self, rewards: Sequence[float]) -> float:
        return sum(r >= 1.0 for r in rewards) / len(rewards) if rewards else 0.0


def test_a_game_whose_second_turn_has_its_own_stop_and_budget_learns_on_the_fake(
    tmp_path: Path,
) -> None:
    checks_passed(SumThenNext())  # its limits fit: the check of them passes
    config = TrainConfig(steps=16, batch=8, group=4, eval_every=8, eval_problems=16)
    backend = RecordingBackend(
        FakeBackend.for_run(
            SumThenNext(), run_problems(SumThenNext(), config), checkpoint_dir=tmp_path
        )
    )
    observer = Everything()
    result = run_grpo(backend, SumThenNext(), config, observer)
    # Each group's first turns with the task's limits, then each episode's second turn
    # with those its feedback set, in training and in evaluation (greedy); the fake keeps
    # to them.
    firsts = [call for call in backend.samples if call.params.stop == ("\n",)]
    seconds = [call for call in backend.samples if call.params.stop == (";",)]
    assert {c.params.max_tokens for c in firsts} == {8}
    assert {c.params.max_tokens for c in seconds} == {5}
    assert len(firsts) + len(seconds) == len(backend.samples)
    assert len(seconds) == sum(len(c.completions_G) for c in firsts)
    assert {c.params.temperature for c in seconds} == {0.0, 1.0}
    assert all(len(c.tokens) <= 5 for call in seconds for c in call.completions_G)
    # The run read each second turn with its own stops: it ended at ";", never the newline.
    finals = [s for g in observer.samples for s in g.samples]
    assert all(s.earlier and s.stop in (";", None) for s in finals)
    assert any(s.stop == ";" for s in finals)
    rewards = [m.mean_reward for m in result.steps]
    assert sum(rewards[-3:]) / 3 > sum(rewards[:3]) / 3 + 0.2
    assert result.evaluations[-1].accuracy > result.evaluations[0].accuracy
