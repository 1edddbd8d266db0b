"""The GRPO loop on the fake: skipping, learning, counting (its one-file twin: test_plain.py)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import strategies as st_
from cli_process import fresh_interpreters
from conftest import examples
from mathrl.adapter import EVAL_STEP
from mathrl.backend import BackendError, TrainResult
from mathrl.checkpoints import checkpoint_name, task_of_checkpoint
from mathrl.config import TrainConfig
from mathrl.grpo import build_datum
from mathrl.loop import run_grpo, run_grpo_async
from mathrl.resolved import as_task
from mathrl.rollout import Rollout, request_seed, run_problems, sample_params
from mathrl.step import (
    StepOutcome,
    Update,
    grpo_step,
    sample_and_score,
    submit_update,
    train_and_save,
)
from mathrl.tasks.addition import AdditionProblem, MathAdapter
from mathrl.workers import Workers
from mathrl_fakes import FakeBackend, RecordingBackend
from observing import SHORT, Everything, moves_toward_its_references
from test_rollout import ChatAddition
from test_task_failures import Masked
from virtual_clock import INLINE, run_virtual

FakeFactory = Callable[..., FakeBackend]


class ConstantRewardAdapter(MathAdapter):
    """Every completion earns 0.5, so every group is constant."""

    def compute_reward(self, completion: str, problem: AdditionProblem) -> float:
        return 0.5


def test_constant_rewards_give_no_datums_and_no_training(fake_backend_factory: FakeFactory) -> None:
    backend = fake_backend_factory()
    result = run_grpo(backend, ConstantRewardAdapter(), TrainConfig(steps=3))
    assert [m.datums for m in result.steps] == [0, 0, 0]
    assert [m.constant_groups for m in result.steps] == [10, 10, 10]
    assert all(m.loss is None for m in result.steps)
    assert backend.log.count("forward_backward") == 0
    assert backend.log.count("optim_step") == 0
    # Only the initial weights were ever saved, and they are the final path.
    task = as_task(ConstantRewardAdapter())
    assert result.saved_path.endswith(checkpoint_name(task, TrainConfig(), 0) + ".json")


def test_a_short_run_at_the_cli_defaults_moves_toward_the_references(tmp_path: Path) -> None:
    moves_toward_its_references(MathAdapter(), tmp_path, replace(SHORT, batch=10))


@pytest.mark.slow  # 20-step learning runs; the fast suite's representative is above
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_run_learns_at_the_cli_defaults(fake_backend_factory: FakeFactory, seed: int) -> None:
    config = TrainConfig(steps=20, seed=seed)
    result = run_grpo(fake_backend_factory(seed=seed), MathAdapter(), config)
    accuracy = [m.accuracy for m in result.steps]
    assert accuracy[0] <= 0.70
    assert sum(accuracy[15:]) / 5 >= sum(accuracy[:5]) / 5 + 0.20
    assert all(m.loss is not None for m in result.steps if m.datums)


@settings(
    max_examples=examples(3, 15),  # a 2-step training run each
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(config=st_.small_configs())
def test_datums_are_the_non_empty_completions_of_non_constant_groups(
    fake_backend_factory: FakeFactory, config: TrainConfig
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


@pytest.mark.parametrize("adapter", [Masked(), ChatAddition()])
def test_grpo_step_trains_on_the_datums_of_a_rollout_from_its_sampler(
    tmp_path: Path, adapter: MathAdapter
) -> None:
    # Three tokens hold " 42" but not its "\n": many completions run into the limit.
    config = TrainConfig(batch=8, group=4, max_tokens=3)
    task = as_task(adapter)

    async def go() -> tuple[Rollout, StepOutcome]:
        backend = FakeBackend.for_run(
            adapter, run_problems(adapter, config), checkpoint_dir=tmp_path
        )
        path = await (await backend.submit_save_for_sampler(checkpoint_name(task, config, 0)))
        sampler = await backend.create_sampler(path)
        batch = await sample_and_score(backend.tokenizer, sampler, task, config, 1)
        return batch, await grpo_step(backend, sampler, task, config, 1)

    batch, outcome = asyncio.run(go())
    assert outcome.rewards_P_G == batch.rewards_P_G
    assert outcome.datums_D == batch.datums_D
    assert outcome.datums_D
    if task.mask_truncated:  # some completion of a group that trains was left out
        assert any(
            not all(trained_G)
            for trained_G, rewards_G in zip(batch.trained_P_G, batch.rewards_P_G, strict=True)
            if len(set(rewards_G)) > 1
        )


def test_a_step_of_constant_groups_trains_and_saves_nothing(
    fake_backend_factory: FakeFactory,
) -> None:
    backend = fake_backend_factory()
    task, config = as_task(ConstantRewardAdapter()), TrainConfig()

    async def go() -> StepOutcome:
        path = await (await backend.submit_save_for_sampler(checkpoint_name(task, config, 0)))
        return await grpo_step(backend, await backend.create_sampler(path), task, config, 1)

    outcome = asyncio.run(go())
    assert outcome.rewards_P_G == [[0.5] * config.group] * config.batch
    assert outcome.datums_D == []
    assert outcome.result is None
    assert outcome.sampler_path is None
    assert backend.log.count("forward_backward") == 0
    assert backend.log.count("save_weights_for_sampler") == 1  # step 0's, before the step


def test_with_a_kl_penalty_a_step_of_constant_groups_trains_on_the_penalty_alone(
    fake_backend_factory: FakeFactory,
) -> None:
    # Every reward 0.5: 10 constant groups of 4, every advantage 0. Without a penalty nothing
    # trains (above); with kl_coef 0.1 each of the 40 completions is trained on, its tokens'
    # advantages the penalty's alone, and the step's KL is measured over all of them.
    backend = fake_backend_factory()
    task, config = as_task(ConstantRewardAdapter()), TrainConfig(kl_coef=0.1)

    async def go() -> StepOutcome:
        path = await (await backend.submit_save_for_sampler(checkpoint_name(task, config, 0)))
        sampler = await backend.create_sampler(path)
        return await grpo_step(backend, sampler, task, config, 1, base=sampler)

    outcome = asyncio.run(go())
    assert len(outcome.datums_D) == config.batch * config.group
    assert outcome.result is not None
    assert outcome.sampler_path is not None
    # Step 1 samples the base weights themselves: q - b = 0 on every token (to rounding), so
    # the penalty is coef * (0 - 0) = 0 and the advantages stay 0 (a later step's do not).
    assert max(abs(a) for d in outcome.datums_D for a in d.advantages) < 1e-12
    seen = Everything()
    result = run_grpo(fake_backend_factory(), ConstantRewardAdapter(), replace(config, steps=3),
                      seen)  # fmt: skip
    assert [m.datums for m in result.steps] == [config.batch * config.group] * 3
    assert all(m.kl is not None and m.loss is not None for m in result.steps)
    assert result.steps[2].kl != 0.0  # the weights moved, on the penalty alone
    assert all(s.trained for group in seen.samples for s in group.samples)


def test_a_step_with_the_dro_loss_refuses_to_train_without_the_trained_weights_sampler(
    fake_backend_factory: FakeFactory,
) -> None:
    backend = fake_backend_factory()
    task, config = as_task(MathAdapter()), TrainConfig(loss="dro")

    async def go() -> None:
        path = await (await backend.submit_save_for_sampler(checkpoint_name(task, config, 0)))
        batch = await sample_and_score(
            backend.tokenizer, await backend.create_sampler(path), task, config, 1
        )
        await train_and_save(backend, task, config, 1, batch.datums_D)

    with pytest.raises(ValueError, match=r"^the dro loss needs the trained weights' sampler$"):
        asyncio.run(go())
    assert backend.log.count("forward_backward") == 0


def test_a_step_with_a_kl_penalty_refuses_to_run_without_the_base_model(
    fake_backend_factory: FakeFactory,
) -> None:
    backend = fake_backend_factory()
    task, config = as_task(MathAdapter()), TrainConfig(kl_coef=0.1)

    async def go() -> StepOutcome:
        path = await (await backend.submit_save_for_sampler(checkpoint_name(task, config, 0)))
        return await grpo_step(backend, await backend.create_sampler(path), task, config, 1)

    with pytest.raises(ValueError, match=r"^kl_coef > 0 needs the base model's sampler \(base=\)$"):
        asyncio.run(go())
    assert backend.log.kinds() == ["save_weights_for_sampler", "create_sampler"]  # none sampled


PINNED_REQUEST_SEEDS = {
    (0, 1, 0): 306_705_043,
    (0, 1, 1): 1_657_745_063,
    (7, 3, 2): 2_095_679_606,
    (-5, 10_000, 9_999): 934_479_950,
}
"""request_seed's values when they were pinned: a change would change every run's samples."""


def test_request_seeds_are_stable_across_processes() -> None:
    # A hash() of the key would differ between interpreters (PYTHONHASHSEED); blake2b does not.
    code = (
        "from mathrl.rollout import request_seed\n"
        f"print([request_seed(*key) for key in {list(PINNED_REQUEST_SEEDS)!r}])\n"
    )
    assert fresh_interpreters(code) == {f"{list(PINNED_REQUEST_SEEDS.values())}\n"}
    assert {key: request_seed(*key) for key in PINNED_REQUEST_SEEDS} == PINNED_REQUEST_SEEDS


def test_request_seeds_differ_between_the_problems_of_a_step() -> None:
    assert len({request_seed(0, 1, i) for i in range(256)}) == 256


def test_request_seeds_differ_across_problems_steps_and_run_seeds() -> None:
    # 128 problems of each of steps 1-20 and the evaluation's step, in runs seeded -2 to 2,
    # and keys that only the separators tell apart ((1, 12, 3) and (11, 2, 3), say): no two
    # requests share a seed, so no two draw the same samples. (31-bit seeds could collide
    # somewhere; not here, and a key that lost a part would collide at once.)
    keys = {
        (seed, step, problem)
        for seed in range(-2, 3)
        for step in (EVAL_STEP, *range(1, 21))
        for problem in range(128)
    } | {(1, 12, 3), (11, 2, 3), (1, 1, 23), (12, 3, 4), (1, 23, 4)}
    assert len({request_seed(*key) for key in keys}) == len(keys)


@given(st_.configs)
def test_sample_params_follow_the_config_and_the_task(config: TrainConfig) -> None:
    task = as_task(MathAdapter())
    params = sample_params(task, config, "Q: What is 1 + 2?\nA:", seed=5)
    expected_tokens = config.max_tokens if config.max_tokens is not None else task.max_tokens
    assert (params.max_tokens, params.temperature, params.seed) == (
        expected_tokens, config.temperature, 5
    )  # fmt: skip
    assert params.stop == ("\n",) == task.stop
    assert not params.end_of_turn
    assert sample_params(task, config, "Q:", greedy=True).temperature == 0.0


def training_part(config: TrainConfig) -> TrainConfig:
    """The settings that change the weights (the task's max_tokens, 8, filled in)."""
    return replace(
        config,
        steps=1,
        eval_every=0,
        eval_problems=1,
        save_every=1,
        max_tokens=config.max_tokens or 8,
    )


@given(st_.configs, st_.configs, st.integers(0, 100))
def test_the_same_training_settings_give_the_same_name(
    config: TrainConfig, other: TrainConfig, step: int
) -> None:
    # One config, rebuilt equal, and again with only what does not train taken from another
    # (steps, evaluation and save cadence): the same name every time.
    task = as_task(MathAdapter())
    rebuilt = TrainConfig(**asdict(config))
    cadence = replace(
        config,
        steps=other.steps,
        eval_every=other.eval_every,
        eval_problems=other.eval_problems,
        save_every=other.save_every,
    )
    assert training_part(cadence) == training_part(config)
    name = checkpoint_name(task, config, step)
    assert checkpoint_name(task, rebuilt, step) == name
    assert checkpoint_name(task, cadence, step) == name
    if config.max_tokens is None:  # the task's own budget, spelled out: the same training
        assert checkpoint_name(task, replace(config, max_tokens=8), step) == name


@given(st_.configs, st_.configs, st.integers(0, 100))
def test_different_training_settings_give_different_names(
    a: TrainConfig, b: TrainConfig, step: int
) -> None:
    assume(training_part(a) != training_part(b))
    task = as_task(MathAdapter())
    assert checkpoint_name(task, a, step) != checkpoint_name(task, b, step)


@pytest.mark.parametrize(
    "change",
    [
        {"batch": 9}, {"group": 3}, {"lr": 1e-3}, {"max_tokens": 7}, {"temperature": 0.5},
        {"seed": 1}, {"max_steps_off_policy": 1},
    ],
)  # fmt: skip
def test_each_training_setting_is_in_the_name(change: dict[str, Any]) -> None:
    task = as_task(MathAdapter())
    base = TrainConfig()
    assert checkpoint_name(task, replace(base, **change), 5) != checkpoint_name(task, base, 5)


class Subtraction(MathAdapter):
    """Another task with the same settings: it must get names of its own."""

    name = "subtraction"


def test_checkpoint_names_carry_the_task_and_sort_by_step() -> None:
    config = TrainConfig()
    names = [checkpoint_name(as_task(MathAdapter()), config, s) for s in (0, 9, 10, 99_999)]
    assert names == sorted(names)
    assert names[1].startswith("addition-seed0-")
    assert names[1].endswith("-step0000009")
    other = checkpoint_name(as_task(Subtraction()), config, 9)
    assert other.startswith("subtraction-seed0-")
    assert other != names[1]
    assert task_of_checkpoint(f"tinker://run/sampler_weights/{other}") == "subtraction"
    assert task_of_checkpoint(f"/tmp/x/{names[1]}.json") == "addition"
    assert task_of_checkpoint("/tmp/mine.json") is None


@pytest.mark.parametrize("off_policy", [0, 1])
def test_a_run_reports_each_steps_phases_and_sampling_progress(
    fake_backend_factory: FakeFactory, off_policy: int
) -> None:
    config = TrainConfig(
        steps=3, batch=2, group=3, eval_every=2, eval_problems=4, max_steps_off_policy=off_policy
    )
    observer = Everything()
    backend = fake_backend_factory(latency=1.0)
    run_virtual(run_grpo_async(backend, MathAdapter(), config, observer, workers=INLINE))
    # Step 0's evaluation reports no phase (there is no step 0 to show).
    assert [[p for s, p in observer.phases if s == step] for step in (1, 2, 3)] == [
        ["sampling", "training"],
        ["sampling", "training", "evaluating"],
        ["sampling", "training", "evaluating"],
    ]
    # 2 problems x 3 samples: each request's 3 completions counted as they return.
    # (Off-policy, steps 1 and 2 sample at once, so their reports interleave.)
    for step in (1, 2, 3):
        assert [(n, total) for s, n, total in observer.sampled if s == step] == [(3, 6), (6, 6)]
    assert len(observer.sampled) == 6


def test_train_and_save_asks_the_base_model_only_with_a_kl_penalty(
    fake_backend_factory: FakeFactory,
) -> None:
    # Given the base model's sampler but no kl_coef: no logprobs asked, no KL reported.
    backend = fake_backend_factory()
    task, config = as_task(MathAdapter()), TrainConfig()

    async def go() -> tuple[Update, Update, Update]:
        path = await (await backend.submit_save_for_sampler(checkpoint_name(task, config, 0)))
        sampler = await backend.create_sampler(path)
        batch = await sample_and_score(backend.tokenizer, sampler, task, config, 1)
        assert batch.datums_D
        update = await train_and_save(backend, task, config, 1, batch.datums_D, sampler, sampler)
        await update.training  # type: ignore[misc]
        empty = await train_and_save(backend, task, config, 2, [], sampler, sampler)
        penalized = await train_and_save(
            backend, task, replace(config, kl_coef=0.1), 3, batch.datums_D, sampler, sampler
        )
        await penalized.training  # type: ignore[misc]
        return update, empty, penalized

    update, empty, penalized = asyncio.run(go())
    assert update.kl is None
    assert (empty.datums_D, empty.training, empty.saving, empty.kl) == ([], None, None, None)
    assert penalized.kl is not None
    # The base model's logprobs: asked once per datum, by the step with the penalty alone.
    assert backend.log.count("compute_logprobs") == len(penalized.datums_D)


def test_grpo_step_runs_the_tasks_work_in_the_pool_it_is_given(
    fake_backend_factory: FakeFactory,
) -> None:
    # A pool of none: every reward on the event loop's own thread, none in another's.
    threads: set[str] = set()

    class Where(MathAdapter):
        def compute_reward(self, completion: str, problem: AdditionProblem) -> float:
            threads.add(threading.current_thread().name)
            return super().compute_reward(completion, problem)

    backend = fake_backend_factory()
    task, config = as_task(Where()), TrainConfig()

    async def go() -> StepOutcome:
        path = await (await backend.submit_save_for_sampler(checkpoint_name(task, config, 0)))
        sampler = await backend.create_sampler(path)
        return await grpo_step(backend, sampler, task, config, 1, workers=Workers(0))

    asyncio.run(go())
    assert threads == {threading.current_thread().name}


def test_a_failed_minibatch_is_raised_only_once_every_other_one_is_done() -> None:
    # Two minibatches, each an update the test finishes by hand: the first fails at once,
    # the second is still training. Their combined outcome waits for the second.
    class Held:
        def __init__(self) -> None:
            self.updates: list[asyncio.Future[TrainResult]] = []

        async def submit_train_step(
            self, datums: Any, lr: float, loss_fn: Any
        ) -> asyncio.Future[TrainResult]:
            self.updates.append(asyncio.get_running_loop().create_future())
            return self.updates[-1]

    datum = build_datum([1, 2], [3], [-0.5], 1.0)
    assert datum is not None

    async def go() -> None:
        backend = Held()
        outcome = await submit_update(backend, [datum, datum], TrainConfig(substeps=2))  # type: ignore[arg-type]  # the one call it makes
        first, second = backend.updates
        first.set_exception(BackendError("the first minibatch failed"))
        for _ in range(5):
            await asyncio.sleep(0)
        assert not asyncio.ensure_future(outcome).done()  # the second is still training
        second.set_result(TrainResult(1.0, {"loss:sum": 1.0}))
        with pytest.raises(BackendError, match="the first minibatch failed"):
            await outcome

    asyncio.run(go())
