"""Evaluation inside a run: when it happens, what it reports, and what it costs in time."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from mathrl.config import TrainConfig
from mathrl.loop import run_grpo, run_grpo_async
from mathrl.report import Checkpoint, StepMetrics
from mathrl.rollout import run_problems
from mathrl.tasks.addition import MathAdapter
from mathrl_fakes import FakeBackend
from observing import Everything
from test_runs import OverlappingHeldout
from virtual_clock import INLINE, run_virtual

FakeFactory = Callable[..., FakeBackend]


def latest_sampler_at(checkpoints: list[Checkpoint], step: int) -> str:
    """The path of the latest sampler checkpoint saved at or before `step`."""
    return [c.path for c in checkpoints if c.kind == "sampler" and c.step <= step][-1]


def small_run(off_policy: int) -> TrainConfig:
    """4 steps of 2 problems x 3, an evaluation of 4 problems after each, a state every 2."""
    return TrainConfig(
        steps=4, batch=2, group=3, eval_every=1, eval_problems=4, save_every=2,
        max_steps_off_policy=off_policy,
    )  # fmt: skip


@pytest.mark.parametrize("off_policy", [0, 1])
def test_each_evaluation_reports_its_step_its_weights_and_its_score(
    fake_backend_factory: FakeFactory, off_policy: int
) -> None:
    config = small_run(off_policy)
    observer = Everything()
    run_grpo(fake_backend_factory(), MathAdapter(), config, observer)
    assert [m.step for m in observer.evals] == [0, 1, 2, 3, 4]
    for m in observer.evals:
        assert m.problems == 4
        # The weights after the step: its own sampler save, or the last one before it.
        assert m.sampler_path == latest_sampler_at(observer.checkpoints, m.step)
        # Exact-match rewards: the mean reward is the share correct.
        assert m.mean_reward == m.accuracy == m.correct / 4
    assert any(m.correct for m in observer.evals)


def test_a_run_reports_scores_that_add_up_on_a_known_run(fake_backend_factory: FakeFactory) -> None:
    config = TrainConfig(steps=3, batch=2, group=3, eval_every=2, eval_problems=4, save_every=2)
    observer = Everything()
    run_grpo(fake_backend_factory(), MathAdapter(), config, observer)
    # Seed 0: nothing right before step 3; then 1 of 4 held-out problems -> 0.25.
    assert [(m.step, m.correct, m.accuracy, m.mean_reward) for m in observer.evals] == [
        (0, 0, 0.0, 0.0), (2, 0, 0.0, 0.0), (3, 1, 0.25, 0.25),
    ]  # fmt: skip
    # Steps: 0, 1 and 2 right of 6 samples -> mean reward 0, 1/6 and 2/6.
    assert [m.mean_reward for m in observer.steps] == [0.0, 1 / 6, 2 / 6]
    assert [m.accuracy for m in observer.steps] == [0.0, 1 / 6, 2 / 6]


def test_a_run_whose_held_out_problems_all_train_evaluates_nothing(tmp_path: Path) -> None:
    # Held out: 0 and 1; step 2 trains on 10, 11, 0 and 1.
    config = TrainConfig(steps=2, batch=4, eval_every=1, eval_problems=2)
    observer = Everything()
    backend = FakeBackend.for_run(
        OverlappingHeldout(), run_problems(OverlappingHeldout(), config), checkpoint_dir=tmp_path
    )
    result = run_grpo(backend, OverlappingHeldout(), config, observer)
    assert result.last_step == 2
    assert observer.evals == []
    assert [p for _, p in observer.phases] == ["sampling", "training"] * 2
    assert [w.split(" held-out")[0] for w in observer.warnings] == ["2 of 2"]


@pytest.mark.parametrize(
    ("off_policy", "timings"),
    [
        # (step seconds, sampling, training) with every call one round trip (1 s):
        # step 1 trains nothing; steps 2-4 train (1 s); 3 and 4 wait for a new sampler.
        (0, [(1.0, 1.0, 0.0), (2.0, 1.0, 1.0), (3.0, 1.0, 1.0), (3.0, 1.0, 1.0)]),
        # Steps 2 and 3 train nothing: though they wait 1 s for the previous evaluation
        # between submitting and finishing, their training time is 0.
        (1, [(2.0, 1.0, 1.0), (2.0, 1.0, 0.0), (1.0, 1.0, 0.0), (1.0, 1.0, 1.0)]),
    ],
)
def test_steps_and_evaluations_report_the_time_they_took(
    fake_backend_factory: FakeFactory, off_policy: int, timings: list[tuple[float, ...]]
) -> None:
    config = small_run(off_policy)
    observer = Everything()
    backend = fake_backend_factory(latency=1.0)
    run_virtual(run_grpo_async(backend, MathAdapter(), config, observer, workers=INLINE))
    assert [(m.seconds, m.sampling_seconds, m.training_seconds) for m in observer.steps] == timings
    assert [m.datums > 0 for m in observer.steps] == [t[2] > 0 for t in timings]
    assert [m.seconds for m in observer.evals] == [1.0] * 5  # one round trip of samples


def without_times(m: StepMetrics) -> StepMetrics:
    """The step, less its timings and the folder of its weights (each run has its own)."""
    weights = Path(m.sampler_path).name
    return replace(m, seconds=0.0, sampling_seconds=0.0, training_seconds=0.0, sampler_path=weights)


@pytest.mark.parametrize("off_policy", [0, pytest.param(1, marks=pytest.mark.slow)])
def test_eval_k_adds_pass_at_k_to_each_evaluation_and_changes_nothing_else(
    fake_backend_factory: FakeFactory, off_policy: int
) -> None:
    plain, sampled = Everything(), Everything()
    config = small_run(off_policy)
    plain_backend, sampled_backend = fake_backend_factory(), fake_backend_factory()
    run_grpo(plain_backend, MathAdapter(), config, plain)
    run_grpo(sampled_backend, MathAdapter(), replace(config, eval_k=(4, 1)), sampled)
    # The samples cost one more request per held-out problem (5 evaluations of 4), and
    # none without eval_k.
    requests = sampled_backend.log.count("sample") - plain_backend.log.count("sample")
    assert requests == 5 * 4
    # Training is the same, step by step, and so are the checkpoints' names.
    assert list(map(without_times, sampled.steps)) == list(map(without_times, plain.steps))
    assert [c.path.rsplit("/", 1)[1] for c in sampled.checkpoints] == [
        c.path.rsplit("/", 1)[1] for c in plain.checkpoints
    ]
    # Each evaluation's greedy half is the same; 4 samples of each problem give the rest.
    greedy = [(m.step, m.accuracy, m.mean_reward, m.problems) for m in plain.evals]
    assert [(m.step, m.accuracy, m.mean_reward, m.problems) for m in sampled.evals] == greedy
    for m in sampled.evals:
        assert m.samples == 4
        assert list(m.pass_at_k) == list(m.majority_at_k) == [1, 4]
        assert m.pass_at_k[1] <= m.pass_at_k[4]
        assert m.pass_at_k[1] == m.sampled_mean_reward  # exact-match: reward 1 is correct
    assert all(m.samples == 0 and not m.pass_at_k for m in plain.evals)


def test_eval_k_still_costs_each_evaluation_one_round_trip(
    fake_backend_factory: FakeFactory,
) -> None:
    config = replace(small_run(0), eval_k=(1, 2, 8))
    observer = Everything()
    backend = fake_backend_factory(latency=1.0)
    run_virtual(run_grpo_async(backend, MathAdapter(), config, observer, workers=INLINE))
    # As without eval_k (see above): the samples ride with the greedy requests.
    expected = [(1.0, 1.0, 0.0), (2.0, 1.0, 1.0), (3.0, 1.0, 1.0), (3.0, 1.0, 1.0)]
    assert [(m.seconds, m.sampling_seconds, m.training_seconds) for m in observer.steps] == (
        expected
    )
    assert [m.seconds for m in observer.evals] == [1.0] * 5
