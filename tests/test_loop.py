"""The GRPO loop on the fake: skipping, learning, counting, and a serial twin."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import strategies as st_
from mathrl.config import Config
from mathrl.grpo import Datum, build_datum, group_advantages
from mathrl.loop import checkpoint_name, request_seed, run_grpo, sample_params
from mathrl.math_task import AdditionProblem, MathAdapter
from mathrl_fakes import FakeBackend, RecordingBackend

FakeFactory = Callable[..., FakeBackend]


class ConstantRewardAdapter(MathAdapter):
    """Every completion earns 0.5, so every group is constant."""

    def compute_reward(self, completion: str, problem: AdditionProblem) -> float:
        return 0.5


def test_constant_rewards_give_no_datums_and_no_training(fake_backend_factory: FakeFactory) -> None:
    backend = fake_backend_factory()
    result = run_grpo(backend, ConstantRewardAdapter(), Config(steps=3, backend="fake"))
    assert [m.datums for m in result.steps] == [0, 0, 0]
    assert [m.constant_groups for m in result.steps] == [10, 10, 10]
    assert all(m.loss is None for m in result.steps)
    assert backend.log.count("forward_backward") == 0
    assert backend.log.count("optim_step") == 0
    # Only the initial weights were ever saved, and they are the final path.
    assert result.saved_path.endswith(checkpoint_name(Config(), 0) + ".json")


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_run_learns_at_the_cli_defaults(fake_backend_factory: FakeFactory, seed: int) -> None:
    config = Config(steps=20, seed=seed, backend="fake")
    result = run_grpo(fake_backend_factory(seed=seed), MathAdapter(), config)
    accuracy = [m.accuracy for m in result.steps]
    assert accuracy[0] <= 0.70
    assert sum(accuracy[15:]) / 5 >= sum(accuracy[:5]) / 5 + 0.20
    assert all(m.loss is not None for m in result.steps if m.datums)


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(config=st_.small_configs())
def test_datums_are_the_non_empty_completions_of_non_constant_groups(
    fake_backend_factory: FakeFactory, config: Config
) -> None:
    seed, batch = config.seed, config.batch
    recorder = RecordingBackend(fake_backend_factory(seed=seed))
    adapter = MathAdapter()
    result = run_grpo(recorder, adapter, config)
    trained = iter(recorder.trained)
    for m, step in zip(result.steps, range(1, 3), strict=True):
        problems = adapter.build_dataset(seed, step, batch)
        groups = [c.completions_G for c in recorder.samples[(step - 1) * batch : step * batch]]
        expected = 0
        for problem, completions_G in zip(problems, groups, strict=True):
            rewards_G = [
                adapter.compute_reward(recorder.tokenizer.decode(c.tokens), problem)
                for c in completions_G
            ]
            if len(set(rewards_G)) > 1:
                expected += sum(1 for c in completions_G if c.tokens)
        assert m.datums == expected
        assert m.groups == batch
        if expected:
            assert len(next(trained)) == expected


async def serial_reference_run(backend: FakeBackend, config: Config) -> list[list[Datum]]:
    """The loop as the seed writes it: every call awaited in turn, nothing overlapped."""
    adapter = MathAdapter()
    tok = backend.tokenizer
    datums_by_step: list[list[Datum]] = []
    path = await (await backend.submit_save_for_sampler(checkpoint_name(config, 0)))
    for step in range(1, config.steps + 1):
        sampler = await backend.create_sampler(path)
        datums: list[Datum] = []
        for i, problem in enumerate(adapter.build_dataset(config.seed, step, config.batch)):
            prompt = tok.encode(adapter.make_prompt(problem))
            params = sample_params(config, request_seed(config.seed, step, i))
            completions = await sampler.sample(prompt, config.group, params)
            rewards = [adapter.compute_reward(tok.decode(c.tokens), problem) for c in completions]
            if all(r == rewards[0] for r in rewards):
                continue
            for c, adv in zip(completions, group_advantages(rewards), strict=True):
                datum = build_datum(prompt, c.tokens, c.logprobs, adv)
                if datum is not None:
                    datums.append(datum)
        datums_by_step.append(datums)
        if datums:
            await (await backend.submit_train_step(datums, config.lr))
            path = await (await backend.submit_save_for_sampler(checkpoint_name(config, step)))
    return datums_by_step


@pytest.mark.parametrize("seed", [0, 7])
def test_the_loop_matches_a_serial_reference_loop(
    fake_backend_factory: FakeFactory, seed: int
) -> None:
    config = Config(steps=6, seed=seed, batch=8, group=4)
    recorder = RecordingBackend(fake_backend_factory(seed=seed))
    run_grpo(recorder, MathAdapter(), config)
    reference = asyncio.run(serial_reference_run(fake_backend_factory(seed=seed), config))
    assert [d for d in reference if d] == recorder.trained
    assert sum(map(len, reference)) > 0


@given(st_.seeds, st_.steps, st.integers(0, 10_000))
def test_request_seeds_are_stable_and_fit_31_bits(seed: int, step: int, problem: int) -> None:
    value = request_seed(seed, step, problem)
    assert value == request_seed(seed, step, problem)
    assert 0 <= value < 2**31


def test_request_seeds_differ_between_the_problems_of_a_step() -> None:
    assert len({request_seed(0, 1, i) for i in range(256)}) == 256


@given(st_.configs)
def test_sample_params_follow_the_config(config: Config) -> None:
    params = sample_params(config, seed=5)
    assert (params.max_tokens, params.temperature, params.seed) == (
        config.max_tokens, config.temperature, 5
    )  # fmt: skip
    assert params.stop == (("\n",) if config.stop_at_newline else ())


@given(st_.configs, st_.configs, st.integers(0, 100))
def test_checkpoint_names_change_with_training_settings(a: Config, b: Config, step: int) -> None:
    # Same settings (whatever the step count), same name; any change, another name.
    assert checkpoint_name(a, step) == checkpoint_name(replace(a, steps=a.steps + 1), step)
    same = replace(b, steps=a.steps, backend=a.backend) == a
    assert (checkpoint_name(a, step) == checkpoint_name(b, step)) == same
