"""Sampling, scoring and held-out evaluation, below the loop."""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from mathrl.adapter import EVAL_STEP, Message, Prompt, Response
from mathrl.backend import Completion
from mathrl.config import TrainConfig
from mathrl.episodes import Episode, Turn
from mathrl.evaluation import Evaluation, Samples, evaluate
from mathrl.report import EvalMetrics, Sample, SampleGroup
from mathrl.resolved import as_task
from mathrl.rewards import TaskError, response_of
from mathrl.rollout import (
    Rollout,
    RunProblems,
    datums_of,
    logged_groups,
    prompt_tokens,
    request_seed,
    run_problems,
    sample_params,
    step_metrics,
)
from mathrl.step import sample_and_score
from mathrl.tasks.addition import AdditionProblem, MathAdapter, heldout_problems, named_answer
from mathrl.tools import ToolCall
from mathrl.workers import Workers
from mathrl_fakes import ByteTokenizer, FakeBackend, RecordingBackend
from test_heldout import Hinted, hint
from virtual_clock import INLINE, run_virtual

FakeFactory = Callable[..., FakeBackend]
TASK = as_task(MathAdapter())
TOK = ByteTokenizer()
EOS = TOK.eos_token_id


class ChatAddition(MathAdapter):
    """The addition task asked as a conversation, with no stop: the end of the turn ends it."""

    name = "chat-addition"
    stop = None  # type: ignore[assignment]  # the default, where the addition task has "\n"

    def make_prompt(self, problem: AdditionProblem) -> list[Message]:  # type: ignore[override]
        return [{"role": "user", "content": super().make_prompt(problem)}]


class NoStop(MathAdapter):
    """The addition task with the default stop, which for a text prompt is a newline."""

    stop = None  # type: ignore[assignment]  # the default, where the addition task has "\n"


CHAT = as_task(ChatAddition())


def one_turn(completion: Completion) -> Episode:
    return Episode((Turn(completion, Response("")),))


def test_problems_prompts_groups_and_rewards_that_do_not_line_up_are_refused() -> None:
    one = one_turn(Completion((1,), (-0.5,)))
    with pytest.raises(ValueError, match="zip"):
        datums_of([[1]], [], [], [])
    # A group of two completions but one advantage, in a group that trains.
    with pytest.raises(ValueError, match="zip"):
        datums_of([[1]], [[one, one]], [[-0.5]], [[True, True]])
    # A logged group of three episodes but two advantages.
    with pytest.raises(ValueError, match="zip"):
        logged_groups(1, replace(known_batch(), advantages_P_G=[[0.0, 1.0], [0.0, 0.0]]))


def test_rollout_reports_each_requests_completions_as_it_returns(
    fake_backend_factory: FakeFactory,
) -> None:
    backend = RecordingBackend(fake_backend_factory())
    config = TrainConfig(batch=3, group=4)
    done: list[int] = []

    async def go() -> Rollout:
        path = await (await backend.submit_save_for_sampler("weights"))
        sampler = await backend.create_sampler(path)
        return await sample_and_score(
            backend.tokenizer, sampler, TASK, config, 1, None, done.append
        )

    batch = asyncio.run(go())
    assert done == [4, 4, 4]  # one call per problem, `group` completions each
    # Each response carries its token count: every token sampled, a cut-off one its budget.
    finals = [e.final for episodes_G in batch.episodes_P_G for e in episodes_G]
    sampled_T = [e.turns[-1].completion.tokens for g in batch.episodes_P_G for e in g]
    assert [r.tokens for r in finals] == [len(tokens_T) for tokens_T in sampled_T]
    budget = sample_params(TASK, config, "").max_tokens
    assert all(r.tokens == budget for r in finals if r.ended == "length")
    assert all(0 < r.tokens <= budget for r in finals)
    # Text prompts: the task's stop, and no end of turn.
    assert {(c.params.stop, c.params.end_of_turn) for c in backend.samples} == {(("\n",), False)}


# -- text prompts and conversations -------------------------------------------------------


def test_sampling_stops_a_text_at_a_newline_and_a_conversation_at_the_end_of_its_turn() -> None:
    config = TrainConfig()
    text = sample_params(as_task(NoStop()), config, "Q: 1 + 2?", seed=1)
    assert (text.stop, text.end_of_turn) == (("\n",), False)
    chat = sample_params(CHAT, config, [{"role": "user", "content": "1 + 2?"}], seed=1)
    assert (chat.stop, chat.end_of_turn) == ((), True)


class KeepsOptions(ByteTokenizer):
    """The fake's tokenizer, keeping the chat template options of each conversation it renders."""

    def __init__(self) -> None:
        self.options: list[dict[str, Any]] = []

    def render_chat(
        self, messages: Sequence[Mapping[str, str]], options: Mapping[str, Any]
    ) -> list[int]:
        self.options.append(dict(options))
        return super().render_chat(messages, options)


def test_a_prompt_is_its_text_encoded_or_its_conversation_in_the_chat_template() -> None:
    tokenizer = KeepsOptions()
    task = replace(CHAT, chat_template_options={"enable_thinking": False})
    assert prompt_tokens(tokenizer, task, "hi") == list(b"hi")
    # The fake's template: role, newline, content, EOS; then the assistant's turn opens.
    conversation = [{"role": "user", "content": "hi"}]
    assert prompt_tokens(tokenizer, task, conversation) == [*b"user\nhi", EOS, *b"assistant\n"]
    assert tokenizer.options == [{"enable_thinking": False}]


def test_each_completion_is_read_against_its_own_prompt() -> None:
    # The same two completions of a text prompt and of a conversation (no stop of its own).
    newline, eos = (*b" 42\n",), (*b"42", EOS)
    group = [Completion(newline, (-0.5,) * 4), Completion(eos, (-0.5,) * 3)]
    prompts: list[Prompt] = ["Q: 40 + 2?", [{"role": "user", "content": "40 + 2?"}]]
    text, chat = (
        [
            response_of(TOK, c.tokens, sample_params(CHAT, TrainConfig(), prompt).stop, chat)
            for c in group
        ]
        for prompt, chat in zip(prompts, (False, True), strict=True)
    )
    assert [(str(r), r.ended, r.stop) for r in text] == [
        (" 42\n", "stop", "\n"), ("42", "end_of_sequence", None),
    ]  # fmt: skip
    # In a conversation a newline stops nothing: only the end of the turn or the limit.
    assert [(str(r), r.ended, r.stop) for r in chat] == [
        (" 42\n", "length", None), ("42", "end_of_turn", None),
    ]  # fmt: skip


def test_a_conversation_is_sampled_and_evaluated_in_the_chat_template(tmp_path: Path) -> None:
    config = TrainConfig(batch=2, group=3, eval_problems=2)
    recorder = RecordingBackend(
        FakeBackend.for_run(
            ChatAddition(), run_problems(ChatAddition(), config), checkpoint_dir=tmp_path
        )
    )
    problems = CHAT.heldout(config.seed, 2)

    async def go() -> None:
        path = await (await recorder.submit_save_for_sampler("weights"))
        sampler = await recorder.create_sampler(path)
        await sample_and_score(recorder.tokenizer, sampler, CHAT, config, 1)
        await evaluate(recorder.tokenizer, sampler, CHAT, config, problems)

    asyncio.run(go())
    asked = [*ChatAddition().build_dataset(config.seed, 1, 2), *problems]
    assert [c.prompt_T for c in recorder.samples] == [
        tuple(TOK.render_chat(ChatAddition().make_prompt(p), {})) for p in asked
    ]
    assert {(c.params.stop, c.params.end_of_turn) for c in recorder.samples} == {((), True)}


# -- masking -------------------------------------------------------------------------------


def test_a_masked_completion_leaves_only_itself_out_of_its_group() -> None:
    one = one_turn(Completion((1,), (-0.5,)))
    # Rewards 0, 1, 1: mean 2/3, advantages -2/3, 1/3, 1/3; the first is masked.
    datums = datums_of([[7]], [[one, one, one]], [[-2 / 3, 1 / 3, 1 / 3]], [[False, True, True]])
    assert len(datums) == 2


# -- what a step reports ---------------------------------------------------------------------


def sampled(tokens_T: Sequence[int]) -> Completion:
    return Completion(tuple(tokens_T), (-0.5,) * len(tokens_T))


def known_batch() -> Rollout:
    """Two groups: 0, 1, 0 (the first cut off at the limit and masked), and a constant 1, 1
    (not trained on: no KL penalty)."""
    cut, right, wrong = (
        Response(" 4", "length"),
        Response(" 42\n", "stop", "\n"),
        Response(" 7\n", "stop", "\n"),
    )
    five = Episode((Turn(sampled([*b"5", EOS]), Response("5")),), 1.0)
    return Rollout(
        prompts_P=["Q: 40 + 2?", "Q: 2 + 3?"],
        episodes_P_G=[
            [
                Episode((Turn(sampled(b" 4"), cut),), 0.0, {"correct": 0.0}),
                Episode((Turn(sampled(b" 42\n"), right),), 1.0, {"correct": 1.0}),
                Episode((Turn(sampled(b" 7\n"), wrong),), 0.0, {"correct": 0.0}),
            ],
            [five, five],
        ],
        rewards_P_G=[[0.0, 1.0, 0.0], [1.0, 1.0]],
        advantages_P_G=[[-1 / 3, 2 / 3, -1 / 3], [0.0, 0.0]],
        trained_P_G=[[False, True, True], [False, False]],
        datums_D=[],
        accuracy=0.6,
        constant_groups=1,
        sampler_path="weights",
        seconds=2.0,
    )


def test_a_logged_group_shows_each_completion_and_whether_it_was_trained_on() -> None:
    # The masked completion and both of the constant group's are not trained on.
    assert logged_groups(3, known_batch()) == [
        SampleGroup(3, 0, "Q: 40 + 2?", (
            Sample(" 4", "length", None, 0.0, {"correct": 0.0}, -1 / 3, False),
            Sample(" 42\n", "stop", "\n", 1.0, {"correct": 1.0}, 2 / 3, True),
            Sample(" 7\n", "stop", "\n", 0.0, {"correct": 0.0}, -1 / 3, True),
        )),
        SampleGroup(3, 1, "Q: 2 + 3?", (
            Sample("5", "end_of_sequence", None, 1.0, {}, 0.0, False),
        ) * 2),
    ]  # fmt: skip


def test_a_steps_metrics_worked_example() -> None:
    m = step_metrics(TrainConfig(group=3), 3, known_batch(), None, 1.0)
    # Rewards 0, 1, 0, 1, 1: mean 3/5. Part "correct": 0, 1, 0 and two without it (0): 1/5.
    assert (m.mean_reward, m.reward_parts) == (3 / 5, {"correct": 1 / 5})
    # " 4" was cut off at the limit; 2 + 4 + 3 + 2 + 2 = 13 tokens sampled.
    assert (m.truncated, m.sampled_tokens, m.groups, m.constant_groups) == (1, 13, 2, 1)
    # Nothing trained: no loss and no training time.
    assert (m.datums, m.loss, m.training_seconds, m.sampling_seconds) == (0, None, 0.0, 2.0)
    # Trained on: " 42" (advantage 2/3) and " 7" (-1/3): mean |advantage| 1/2.
    assert m.mean_abs_advantage == pytest.approx(0.5)
    empty = Rollout([], [], [], [], [], [], 0.0, 0)
    m = step_metrics(TrainConfig(), 1, empty, None, 0.0)
    assert (m.mean_reward, m.reward_parts, m.truncated, m.mean_abs_advantage) == (0.0, {}, 0, 0.0)


def test_a_logged_episode_shows_its_earlier_turns_their_replies_and_calls() -> None:
    call = ToolCall("calculate", {"expression": "6 * 7"}, "42", False)
    turns = (
        Turn(sampled(b" a"), Response(" a"), "reply to a", calls=(call,)),
        Turn(sampled(b" b"), Response(" b")),  # no reply: the episode went on regardless
        Turn(sampled(b" c"), Response(" c")),
    )
    batch = replace(known_batch(), prompts_P=["Q"], episodes_P_G=[[Episode(turns, 1.0)]],
                    advantages_P_G=[[0.0]], trained_P_G=[[False]])  # fmt: skip
    (group,) = logged_groups(1, batch)
    (sample,) = group.samples
    assert (sample.text, sample.earlier, sample.calls) == (
        " c", ((" a", "reply to a"), (" b", "")), ((call,), ())
    )  # fmt: skip


def test_an_evaluations_metrics_worked_example() -> None:
    responses = [Response(" 42\n", "stop", "\n"), Response(" 7\n", "stop", "\n")]
    parts = [{"correct": 1.0, "format": 0.25}, {"correct": 0.0, "format": 0.25}]
    evaluation = Evaluation(responses, [1.25, 0.25], parts, accuracy=0.5)
    # 1 of 2 right; mean reward (1.25 + 0.25) / 2 = 0.75; parts (1 + 0) / 2 and 0.25.
    assert evaluation.metrics(3, "w", 2.0) == EvalMetrics(
        3, 0.5, 1, 2, 0.75, "w", 2.0, {"correct": 0.5, "format": 0.25}
    )
    nothing = Evaluation([], [], [], accuracy=0.0)
    assert nothing.metrics(0, "w", 0.0) == EvalMetrics(0, 0.0, 0, 0, 0.0, "w", 0.0, {})


@pytest.mark.parametrize("greedy", [True, False])
def test_evaluation_asks_each_problem_once_with_its_own_seed_and_keeps_the_texts(
    fake_backend_factory: FakeFactory, greedy: bool
) -> None:
    recorder = RecordingBackend(fake_backend_factory())
    config = TrainConfig(seed=5, max_tokens=6)
    problems = heldout_problems(config.seed, 7)

    async def go() -> Evaluation:
        path = await (await recorder.submit_save_for_sampler("weights"))
        sampler = await recorder.create_sampler(path)
        return await evaluate(recorder.tokenizer, sampler, TASK, config, problems, greedy=greedy)

    result = asyncio.run(go())
    calls = recorder.samples
    decode = recorder.tokenizer.decode
    assert [decode(c.prompt_T) for c in calls] == [MathAdapter().make_prompt(p) for p in problems]
    assert [c.params.seed for c in calls] == [
        request_seed(config.seed, EVAL_STEP, i) for i in range(len(problems))
    ]
    assert {c.params.temperature for c in calls} == {0.0 if greedy else config.temperature}
    assert {c.params.max_tokens for c in calls} == {6}
    assert {(c.params.stop, c.params.end_of_turn) for c in calls} == {(("\n",), False)}
    assert all(len(c.completions_G) == 1 for c in calls)
    assert result.texts_P == [decode(c.completions_G[0].tokens) for c in calls]
    assert result.rewards_P == [
        MathAdapter().compute_reward(Response(t), p)
        for t, p in zip(result.texts_P, problems, strict=True)
    ]
    assert result.accuracy == MathAdapter().evaluate(result.rewards_P)


def test_evaluation_with_samples_sends_one_round_a_greedy_and_a_sampled_request_each(
    fake_backend_factory: FakeFactory,
) -> None:
    recorder = RecordingBackend(fake_backend_factory(latency=1.0))
    config = TrainConfig(seed=5, max_tokens=6, temperature=0.7)
    problems = heldout_problems(config.seed, 7)

    async def go() -> tuple[Evaluation, Evaluation, float]:
        path = await (await recorder.submit_save_for_sampler("weights"))
        sampler = await recorder.create_sampler(path)
        clock = asyncio.get_running_loop().time
        started = clock()
        given = (recorder.tokenizer, sampler, TASK, config, problems)
        sampled = await evaluate(*given, workers=INLINE, samples=4)
        took = clock() - started
        return sampled, await evaluate(*given, workers=INLINE), took

    (result, greedy_only, took), _ = run_virtual(go())
    assert took == 1.0  # every request in one round trip
    greedy, sampled = recorder.samples[:7], recorder.samples[7:14]
    # The greedy requests are those of an evaluation without samples; the sampled ones
    # follow them, with seeds of their own.
    assert [c.params for c in greedy] == [c.params for c in recorder.samples[14:]]
    assert result.texts_P == greedy_only.texts_P
    assert [c.params.seed for c in sampled] == [
        request_seed(config.seed, EVAL_STEP, 7 + i) for i in range(7)
    ]
    assert {c.params.temperature for c in sampled} == {0.7}
    assert [len(c.completions_G) for c in sampled] == [4] * 7
    drawn = result.samples
    assert drawn is not None
    texts_P_G = [[recorder.tokenizer.decode(c.tokens) for c in s.completions_G] for s in sampled]
    assert drawn.answers_P_G == [[named_answer(t) for t in texts] for texts in texts_P_G]
    assert drawn.correct_P_G == [[r == 1.0 for r in rewards] for rewards in drawn.rewards_P_G]
    assert drawn.pass_at(1) == sum(map(sum, drawn.correct_P_G)) / 28
    assert greedy_only.samples is None


def test_an_evaluations_pass_at_k_and_maj_at_k_worked_example() -> None:
    responses = [Response(" 42\n", "stop", "\n"), Response(" 7\n", "stop", "\n")]
    drawn = Samples(
        2, [[1.0, 0.0], [0.0, 0.0]], [[True, False], [False, False]], [["42", "41"], ["8", None]]
    )
    evaluation = Evaluation(responses, [1.0, 0.0], [{}, {}], 0.5, drawn)
    m = evaluation.metrics(3, "w", 2.0, ks=(1, 2))
    # pass@1: (1/2 + 0/2) / 2; pass@2: (1 + 0) / 2, the first problem's pair holds a right one.
    assert m.pass_at_k == {1: 0.25, 2: 0.5}
    # maj@2: 42 ties 41 (1/2), and 8 alone is wrong (0): 0.25; maj@1 = pass@1 here.
    assert m.majority_at_k == {1: 0.25, 2: 0.25}
    assert (m.samples, m.sampled_mean_reward) == (2, 0.25)
    # Greedily: 1 of 2 right, as without samples.
    assert (m.accuracy, m.correct, m.mean_reward) == (0.5, 1, 0.5)
    # Asked for no k, it reports as an evaluation without samples.
    plain = Evaluation(responses, [1.0, 0.0], [{}, {}], 0.5)
    assert evaluation.metrics(3, "w", 2.0) == plain.metrics(3, "w", 2.0)
    # A task that names no answers has no maj@k.
    unnamed = Evaluation(responses, [1.0, 0.0], [{}, {}], 0.5, replace(drawn, answers_P_G=None))
    assert unnamed.metrics(3, "w", 2.0, ks=(2,)).majority_at_k == {}


class NamesNothing(MathAdapter):
    """The addition task, naming no answers: its samples give pass@k but no maj@k."""

    final_answer = None  # type: ignore[assignment]  # the contract's default, said aloud


def test_samples_of_a_task_that_names_no_answers_give_no_maj_at_k(
    fake_backend_factory: FakeFactory,
) -> None:
    backend = fake_backend_factory()

    async def go() -> Evaluation:
        sampler = await backend.create_sampler(await (await backend.submit_save_for_sampler("w")))
        task, problems = as_task(NamesNothing()), heldout_problems(0, 3)
        return await evaluate(backend.tokenizer, sampler, task, TrainConfig(), problems, samples=2)

    result = asyncio.run(go())
    assert result.samples is not None
    assert result.samples.answers_P_G is None
    m = result.metrics(0, "w", 0.0, ks=(1, 2))
    assert (list(m.pass_at_k), m.majority_at_k) == ([1, 2], {})


class AnswerFails(MathAdapter):
    """Its final_answer fails on some text: the evaluation stops with a TaskError."""

    def __init__(self, answer: Callable[[str], Any]) -> None:
        self.answer = answer

    def final_answer(self, completion: str) -> Any:
        return self.answer(completion)


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (lambda text: 1 / 0, "final_answer raised ZeroDivisionError: division by zero"),
        (lambda text: 42, "final_answer broke the contract: it must return a str or None (got 42)"),
    ],
)
def test_a_final_answer_that_fails_is_a_task_error(
    fake_backend_factory: FakeFactory, answer: Callable[[str], Any], message: str
) -> None:
    backend = fake_backend_factory()
    task = as_task(AnswerFails(answer))

    async def go() -> Evaluation:
        sampler = await backend.create_sampler(await (await backend.submit_save_for_sampler("w")))
        problems = heldout_problems(0, 2)
        return await evaluate(backend.tokenizer, sampler, task, TrainConfig(), problems, samples=2)

    with pytest.raises(TaskError, match=f"task 'addition' failed: {re.escape(message)}"):
        asyncio.run(go())


class AnswerInItsProcess(MathAdapter):
    """Names its answers in a process of its own (`work_in_processes`), which one ends."""

    work_in_processes = True

    def final_answer(self, completion: str) -> str | None:
        if completion.strip() == "":
            os._exit(3)  # the child's end: the trainer's process lives on
        return named_answer(completion)


@pytest.mark.slow
def test_a_final_answer_whose_process_dies_is_a_task_error(
    fake_backend_factory: FakeFactory,
) -> None:
    backend = fake_backend_factory()
    task = as_task(AnswerInItsProcess())

    async def go(problems: list[AdditionProblem]) -> Evaluation:
        sampler = await backend.create_sampler(await (await backend.submit_save_for_sampler("w")))
        with Workers(2) as workers:
            return await evaluate(
                backend.tokenizer, sampler, task, TrainConfig(max_tokens=1), problems,
                workers=workers, samples=2,
            )  # fmt: skip

    # One token a completion: the untrained fake writes " ", the answer's first, now and then.
    problems = heldout_problems(0, 6)
    with pytest.raises(TaskError, match=r"final_answer raised WorkerDied: its process ended"):
        asyncio.run(go(problems))


def test_a_run_draws_problems_without_a_fingerprint_by_their_prompts() -> None:
    # Problems holding a function: told apart by their prompts, each step's drawn as before.
    run = RunProblems(as_task(Hinted()), TrainConfig(batch=4))
    problems = run.step(1)
    assert len(problems) == 4
    assert all(p[2] is hint for p in problems)
    assert run.step(1) == problems
