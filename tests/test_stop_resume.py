"""Stopping a run in process, and resuming one from a saved state."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from mathrl.checkpoints import Resume, checkpoint_name
from mathrl.config import TrainConfig
from mathrl.loop import run_grpo_async
from mathrl.report import Checkpoint, RunResult
from mathrl.resolved import as_task
from mathrl.tasks.addition import MathAdapter
from mathrl_fakes import FakeBackend, RecordingBackend
from observing import Everything
from virtual_clock import INLINE, run_virtual

FakeFactory = Callable[..., FakeBackend]
TASK = as_task(MathAdapter())


class StopAt(Everything):
    """Sets `stop` when the loop reports `phase` of `step`."""

    def __init__(self, step: int, phase: str) -> None:
        super().__init__()
        self.at = step, phase
        self.stop = asyncio.Event()

    def on_phase(self, step: int, phase: str) -> None:
        super().on_phase(step, phase)
        if (step, phase) == self.at:
            self.stop.set()


def stopped_run(
    backend: FakeBackend, config: TrainConfig, step: int, phase: str
) -> tuple[RunResult, StopAt]:
    observer = StopAt(step, phase)

    async def go() -> RunResult:
        run = run_grpo_async(backend, TASK, config, observer, stop=observer.stop, workers=INLINE)
        return await within_an_hour(run)

    return run_virtual(go())[0], observer


async def within_an_hour(run: Awaitable[RunResult]) -> RunResult:
    """`run`, or TimeoutError: on the virtual clock an hour passes at once, so a run that
    waited for a stop before its time fails here rather than hangs."""
    return await asyncio.wait_for(run, timeout=3600)


@pytest.mark.parametrize("off_policy", [0, pytest.param(1, marks=pytest.mark.slow)])
def test_a_stop_that_never_comes_changes_nothing(
    fake_backend_factory: FakeFactory, off_policy: int
) -> None:
    config = TrainConfig(steps=3, batch=4, group=3, max_steps_off_policy=off_policy)

    def run(stop: asyncio.Event | None) -> RunResult:
        backend = fake_backend_factory()
        return run_virtual(
            within_an_hour(run_grpo_async(backend, TASK, config, stop=stop, workers=INLINE))
        )[0]

    never, plain = run(asyncio.Event()), run(None)
    assert (never.last_step, never.stopped) == (3, False)
    assert [m.datums for m in never.steps] == [m.datums for m in plain.steps]


@pytest.mark.parametrize("off_policy", [0, 1])
def test_a_stop_while_a_step_samples_ends_the_run_before_it(
    fake_backend_factory: FakeFactory, off_policy: int
) -> None:
    config = TrainConfig(steps=5, batch=4, save_every=10, max_steps_off_policy=off_policy)
    # Off-policy, step 3 samples while step 2 trains: the stop comes after step 2's
    # training was submitted, so step 2 completes either way.
    result, observer = stopped_run(fake_backend_factory(latency=1.0), config, 3, "sampling")
    assert [m.step for m in observer.steps] == [1, 2]
    assert (result.last_step, result.stopped) == (2, True)
    # What was trained is kept: a state save of step 2, off the save cadence.
    state = checkpoint_name(TASK, config, 2, "state")
    assert observer.checkpoints[-1] == Checkpoint(2, "state", result.state_path)
    assert result.state_path.endswith(f"/{state}.json")
    assert result.saved_path == [c.path for c in observer.checkpoints if c.kind == "sampler"][-1]
    assert result.steps == observer.steps


def test_a_stop_while_a_step_trains_ends_the_run_after_it(
    fake_backend_factory: FakeFactory,
) -> None:
    config = TrainConfig(steps=5, batch=4, save_every=3)
    result, observer = stopped_run(fake_backend_factory(latency=1.0), config, 3, "training")
    assert [m.step for m in observer.steps] == [1, 2, 3]
    assert (result.last_step, result.stopped) == (3, True)
    # Step 3 is on the cadence: its state save is the last, and is not repeated.
    assert [(c.step, c.kind) for c in observer.checkpoints if c.kind == "state"] == [
        (0, "state"), (3, "state"),
    ]  # fmt: skip


def test_a_stop_before_the_first_samples_return_trains_and_saves_nothing_more(
    fake_backend_factory: FakeFactory,
) -> None:
    config = TrainConfig(steps=5, batch=4)
    result, observer = stopped_run(fake_backend_factory(latency=1.0), config, 1, "sampling")
    assert (result.steps, result.last_step, result.stopped) == ([], 0, True)
    assert [(c.step, c.kind) for c in observer.checkpoints] == [(0, "sampler"), (0, "state")]
    assert result.state_path == observer.checkpoints[1].path
    assert result.state_path.endswith(f"/{checkpoint_name(TASK, config, 0, 'state')}.json")
    assert result.saved_path.endswith(f"/{checkpoint_name(TASK, config, 0)}.json")


def test_a_fresh_run_saves_step_0_then_each_step_in_order(
    fake_backend_factory: FakeFactory,
) -> None:
    config = TrainConfig(steps=4, batch=4, save_every=2)
    observer = Everything()
    result = run_virtual(
        run_grpo_async(fake_backend_factory(), TASK, config, observer, workers=INLINE)
    )[0]
    names = [(c.step, c.kind, c.path.rsplit("/", 1)[-1]) for c in observer.checkpoints]
    expected = [(0, "sampler"), (0, "state"), (1, "sampler"), (2, "sampler"), (2, "state")]
    expected += [(3, "sampler"), (4, "sampler"), (4, "state")]
    assert names == [
        (s, k, checkpoint_name(TASK, config, s, "state" if k == "state" else "sampler") + ".json")
        for s, k in expected
    ]
    assert (result.last_step, result.stopped) == (4, False)
    assert result.state_path == observer.checkpoints[-1].path
    # Each step samples from the weights the step before it saved.
    samplers = [c.path for c in observer.checkpoints if c.kind == "sampler"]
    assert [m.sampler_path for m in result.steps] == samplers[:4]


@pytest.mark.parametrize("off_policy", [0, 1])
def test_a_resumed_run_trains_on_exactly_what_an_uninterrupted_one_does(
    fake_backend_factory: FakeFactory, off_policy: int, tmp_path: Path
) -> None:
    config = TrainConfig(steps=4, batch=6, save_every=1, max_steps_off_policy=off_policy)
    folder = tmp_path / "checkpoints"  # one folder, so that both runs name saves alike
    whole, observer = RecordingBackend(fake_backend_factory(checkpoint_dir=folder)), Everything()
    run_virtual(run_grpo_async(whole, TASK, config, observer, workers=INLINE))
    samplers = {c.step: c.path for c in observer.checkpoints if c.kind == "sampler"}
    states = {c.step: c.path for c in observer.checkpoints if c.kind == "state"}
    assert set(samplers) == set(states) == {0, 1, 2, 3, 4}  # every step trained here

    resume = Resume(2, states[2], samplers[2], samplers[1])
    part, resumed = RecordingBackend(fake_backend_factory(checkpoint_dir=folder)), Everything()
    # A new fake starts from the initial weights: only the state load brings step 2's.
    result = run_virtual(
        run_grpo_async(part, TASK, config, resumed, resume=resume, workers=INLINE)
    )[0]
    assert [m.step for m in result.steps] == [3, 4]
    assert part.trained == whole.trained[2:]
    assert [m.sampler_path for m in result.steps] == [m.sampler_path for m in observer.steps[2:]]
    # Off-policy, step 3 samples from step 1's weights, on-policy from step 2's.
    assert {c.path for c in part.samples if c.params.temperature} == {
        samplers[2 - off_policy],
        samplers[3 - off_policy],
    }
    assert (result.state_path, result.last_step) == (states[4], 4)
