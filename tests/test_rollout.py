"""Sampling, scoring and held-out evaluation, below the loop."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

import pytest

from mathrl.adapter import EVAL_STEP, Response
from mathrl.backend import Completion, SampleParams
from mathrl.config import TrainConfig
from mathrl.evaluation import Evaluation, evaluate
from mathrl.resolved import as_task
from mathrl.rewards import rewards_of
from mathrl.rollout import datums_of, request_seed, rollout, sample_all
from mathrl.tasks.addition import AdditionProblem, MathAdapter, heldout_problems
from mathrl_fakes import FakeBackend, RecordingBackend

FakeFactory = Callable[..., FakeBackend]
TASK = as_task(MathAdapter())


class Unused:
    """A sampler that must not be asked."""

    async def sample(
        self, prompt_T: Sequence[int], num_samples: int, params: SampleParams
    ) -> list[Completion]:
        raise AssertionError("not expected to sample")


def test_problems_prompts_groups_and_rewards_that_do_not_line_up_are_refused() -> None:
    one = Completion((1,), (-0.5,))
    with pytest.raises(ValueError, match="zip"):
        asyncio.run(rewards_of(TASK, [AdditionProblem(1, 2)], []))
    with pytest.raises(ValueError, match="zip"):
        datums_of([[1]], [], [], [])
    # A group of two completions but one advantage, in a group that trains.
    with pytest.raises(ValueError, match="zip"):
        datums_of([[1]], [[one, one]], [[0.0, 1.0]], [[-0.5]])
    params = SampleParams(8, 1.0, ("\n",), 0)
    with pytest.raises(ValueError, match="zip"):
        asyncio.run(sample_all(Unused(), [], 1, [params]))


def test_rollout_reports_each_requests_completions_as_it_returns(
    fake_backend_factory: FakeFactory,
) -> None:
    backend = fake_backend_factory()
    config = TrainConfig(batch=3, group=4)
    done: list[int] = []

    async def go() -> None:
        path = await (await backend.submit_save_for_sampler("weights"))
        sampler = await backend.create_sampler(path)
        await rollout(backend.tokenizer, sampler, TASK, config, 1, done.append)

    asyncio.run(go())
    assert done == [4, 4, 4]  # one call per problem, `group` completions each


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
    assert all(len(c.completions_G) == 1 for c in calls)
    assert result.texts_P == [decode(c.completions_G[0].tokens) for c in calls]
    assert result.rewards_P == [
        MathAdapter().compute_reward(Response(t), p)
        for t, p in zip(result.texts_P, problems, strict=True)
    ]
    assert result.accuracy == MathAdapter().evaluate(result.rewards_P)
