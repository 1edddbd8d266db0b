"""The step schedule: round trips per step, and one-step off-policy sampling.

Timing is read from a virtual clock (`virtual_clock.py`) with a latency of
1.0 per round trip, so every time below is an exact count of round trips,
independent of how busy the machine is. Nothing here measures wall time.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from mathrl.checkpoints import checkpoint_name
from mathrl.config import TrainConfig
from mathrl.loop import run_grpo, run_grpo_async
from mathrl.report import RunResult
from mathrl.resolved import as_task
from mathrl.rollout import request_seed
from mathrl.tasks.addition import MathAdapter
from mathrl_fakes import CallRecord, FakeBackend, RecordingBackend
from observing import SHORT, moves_toward_its_references
from virtual_clock import INLINE, run_virtual

FakeFactory = Callable[..., FakeBackend]

TRAINING_KINDS = ["forward_backward", "optim_step", "save_weights_for_sampler"]


def mean(xs: Sequence[float]) -> float:
    return math.fsum(xs) / len(xs)


def accuracies(result: RunResult) -> list[float]:
    return [m.accuracy for m in result.steps]


# -- learning ----------------------------------------------------------------------


def test_a_short_off_policy_run_moves_toward_the_references(tmp_path: Path) -> None:
    moves_toward_its_references(MathAdapter(), tmp_path, replace(SHORT, max_steps_off_policy=1))


@pytest.mark.slow  # 20-step learning runs; the fast suite's representative is above
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_off_policy_learns_and_ends_near_on_policy(
    fake_backend_factory: FakeFactory, seed: int
) -> None:
    on_config = TrainConfig(steps=20, seed=seed)
    off_config = TrainConfig(steps=20, seed=seed, max_steps_off_policy=1)
    on = accuracies(run_grpo(fake_backend_factory(seed=seed), MathAdapter(), on_config))
    off = accuracies(run_grpo(fake_backend_factory(seed=seed), MathAdapter(), off_config))
    # "Ends" is the mean of steps 16-20, "starts" the mean of steps 1-5.
    assert mean(off[15:]) - mean(off[:5]) >= 0.20, off
    assert abs(mean(off[15:]) - mean(on[15:])) <= 0.10, (on, off)


# -- which weights each step samples from -------------------------------------------


@pytest.mark.parametrize("max_steps_off_policy", [0, 1])
def test_step_k_plus_1_samples_from_the_weights_before_step_k_trains(
    fake_backend_factory: FakeFactory, max_steps_off_policy: int
) -> None:
    config = TrainConfig(steps=6, seed=4, max_steps_off_policy=max_steps_off_policy)
    seed_to_step = {
        request_seed(config.seed, step, i): step
        for step in range(1, config.steps + 1)
        for i in range(config.batch)
    }
    spy = RecordingBackend(fake_backend_factory(seed=4))
    result = run_grpo(spy, MathAdapter(), config)
    sampled_from: dict[int, set[str]] = {}
    for call in spy.samples:
        assert call.params.seed is not None
        sampled_from.setdefault(seed_to_step[call.params.seed], set()).add(call.path)
    assert all(m.datums > 0 for m in result.steps)  # so every step saved new weights

    def checkpoint(step: int) -> str:
        return checkpoint_name(as_task(MathAdapter()), config, step) + ".json"

    # Off-policy, step k + 1 is sampled while step k trains, from the weights
    # step k itself was sampled from (step 1 and 2: the initial weights).
    lag = 1 + max_steps_off_policy
    for step in range(1, config.steps + 1):
        (path,) = sampled_from[step]
        assert path.endswith(checkpoint(max(step - lag, 0))), (step, path)


@pytest.mark.parametrize("max_steps_off_policy", [0, 1])
def test_dros_anchor_asks_the_weights_being_trained_not_those_sampled_from(
    fake_backend_factory: FakeFactory, max_steps_off_policy: int
) -> None:
    # The fake's prompt positions have no weights, so its logprobs there are the same from
    # every checkpoint: which one the anchor asked is read from the requests themselves.
    config = TrainConfig(steps=4, seed=4, loss="dro", max_steps_off_policy=max_steps_off_policy)
    spy = RecordingBackend(fake_backend_factory(seed=4))
    result = run_grpo(spy, MathAdapter(), config)
    assert all(m.datums > 0 for m in result.steps)  # so every step saved new weights

    def checkpoint(step: int) -> str:
        return checkpoint_name(as_task(MathAdapter()), config, step) + ".json"

    # Step k trains the weights step k - 1 left, whichever step k sampled from (off-policy,
    # those before step k - 1 trained): its datums' anchors ask that checkpoint, one a datum.
    asked = iter(spy.scored)
    for m in result.steps:
        (path,) = {path for path, _ in itertools.islice(asked, m.datums)}
        assert path.endswith(checkpoint(m.step - 1)), (m.step, path)
        lagged = max(m.step - 1 - max_steps_off_policy, 0)
        assert m.sampler_path.endswith(checkpoint(lagged))
    assert next(asked, None) is None


# -- round trips --------------------------------------------------------------------


def calls_at(calls: Sequence[CallRecord], kind: str) -> dict[float, list[CallRecord]]:
    """Calls of `kind`, grouped by the (virtual) time they were submitted."""
    groups: dict[float, list[CallRecord]] = {}
    for call in calls:
        if call.kind == kind:
            groups.setdefault(call.submitted, []).append(call)
    return groups


@pytest.mark.parametrize(("batch", "group", "steps"), [(10, 4, 4), (7, 3, 2), (3, 2, 1)])
def test_an_on_policy_step_costs_three_round_trips(
    fake_backend_factory: FakeFactory, batch: int, group: int, steps: int
) -> None:
    backend = fake_backend_factory(seed=1, latency=1.0)
    config = TrainConfig(steps=steps, batch=batch, group=group, seed=1)
    result, elapsed = run_virtual(run_grpo_async(backend, MathAdapter(), config, workers=INLINE))
    assert all(m.datums > 0 for m in result.steps)

    # The initial saves and sampler, then per step: every sample request, the
    # training calls back to back, and the next step's sampler. The last step
    # saves the full state too.
    step_kinds = ["sample"] * batch + TRAINING_KINDS
    expected = ["save_weights_for_sampler", "save_state", "create_sampler"]
    expected += [*step_kinds, "create_sampler"] * (steps - 1) + [*step_kinds, "save_state"]
    assert backend.log.kinds() == expected

    calls = backend.log.calls
    sample_waves = calls_at(calls, "sample")
    assert len(sample_waves) == steps
    for start, wave in sample_waves.items():
        assert len(wave) == batch
        assert {c.finished for c in wave} == {start + 1.0}  # one round trip for all
    assert backend.log.max_in_flight >= batch
    for step in range(steps):
        trio = calls[3 + step * (batch + 4) + batch :][:3]
        assert [c.kind for c in trio] == TRAINING_KINDS
        # Submitted together, done together: one round trip for all three.
        assert len({c.submitted for c in trio}) == 1
        assert {c.finished for c in trio} == {trio[0].submitted + 1.0}
    # Save + sampler once, then sample, train, sampler: 3 per step (the last
    # step needs no next sampler).
    assert elapsed == 2 + 3 * steps - 1


@pytest.mark.parametrize(("batch", "steps"), [(10, 5), (4, 2)])
def test_an_off_policy_step_costs_two_round_trips_and_samples_while_training(
    fake_backend_factory: FakeFactory, batch: int, steps: int
) -> None:
    backend = fake_backend_factory(seed=2, latency=1.0)
    config = TrainConfig(steps=steps, batch=batch, seed=2, max_steps_off_policy=1)
    result, elapsed = run_virtual(run_grpo_async(backend, MathAdapter(), config, workers=INLINE))
    assert all(m.datums > 0 for m in result.steps)

    calls = backend.log.calls
    trainings = calls_at(calls, "forward_backward")
    sample_waves = calls_at(calls, "sample")
    assert len(trainings) == steps
    # Steps 1 and 2 both sample from the first weights, at once; step k + 2 samples as
    # soon as the weights after step k exist, in the round trip step k + 1 trains.
    train_times = sorted(trainings)
    sample_times = sorted(sample_waves)
    assert [len(sample_waves[t]) for t in sample_times] == [2 * batch] + [batch] * (steps - 2)
    assert backend.log.max_in_flight >= 2 * batch
    assert sample_times[1:] == train_times[1:-1]
    assert train_times == [train_times[0] + 2.0 * k for k in range(steps)]
    # Save + sampler, the first samples, then train + sampler per step (the
    # last step needs no next sampler).
    assert elapsed == 3 + 2 * steps - 1


# -- round trips with the algorithm choices -----------------------------------------


@pytest.mark.parametrize(
    ("choice", "extra"),
    [
        ({"substeps": 3, "loss": "ppo"}, 0),  # the minibatches go back to back: no wait
        ({"scale_rewards": "batch"}, 0),
        ({"kl_coef": 0.1}, 1),  # the base model's logprobs: one round trip more
        ({"loss": "dro"}, 1),  # the trained weights' own logprobs, for DRO's anchor: as KL's
        ({"loss": "dro", "kl_coef": 0.1}, 1),  # both in the same round trip
    ],
)
def test_the_algorithm_choices_cost_what_they_say_in_round_trips(
    fake_backend_factory: FakeFactory, choice: dict[str, Any], extra: int
) -> None:
    steps = 3
    backend = fake_backend_factory(seed=1, latency=1.0)
    config = TrainConfig(steps=steps, batch=6, group=4, seed=1, **choice)
    result, elapsed = run_virtual(run_grpo_async(backend, MathAdapter(), config, workers=INLINE))
    assert all(m.datums > 0 for m in result.steps)
    assert elapsed == 2 + (3 + extra) * steps - 1  # as without them, plus `extra` a step
    waves = calls_at(backend.log.calls, "compute_logprobs")
    assert len(waves) == (steps if extra else 0)  # every datum's logprobs at once
    if extra:
        asked = 2 if "kl_coef" in choice and "loss" in choice else 1  # the base and the policy
        assert [len(w) for w in waves.values()] == [asked * m.datums for m in result.steps]


# -- the sampler against the learner ---------------------------------------------------


@pytest.mark.parametrize(
    ("setting", "divergent"),
    [
        ({}, False),  # on-policy at temperature 1: the learner scores what the sampler drew
        ({"max_steps_off_policy": 1}, True),  # step k+1 drawn by the weights before step k
        ({"temperature": 0.7}, True),  # q is the tempered distribution's, lp is not
        ({"substeps": 2}, True),  # the second minibatch meets weights the first moved
    ],
)
def test_a_step_reports_the_samplers_entropy_and_its_divergence_from_the_learner(
    fake_backend_factory: Callable[..., FakeBackend], setting: dict[str, Any], divergent: bool
) -> None:
    config = TrainConfig(steps=4, **setting)
    steps = run_grpo(fake_backend_factory(), MathAdapter(), config).steps
    trained = [m for m in steps if m.datums]
    assert trained
    assert all(m.approx_kl is not None for m in trained)
    assert all(m.approx_kl is None for m in steps if not m.datums)
    kls = [m.approx_kl or 0.0 for m in trained]
    if not divergent:  # the same weights' logprobs, computed apart: equal to rounding
        assert max(kls) < 1e-12
    elif setting.get("max_steps_off_policy"):  # step 1 is on-policy; the others lag
        assert kls[0] < 1e-12
        assert min(kls[1:]) > 1e-6
    else:
        assert min(kls) > 1e-6
    # Every step sampled: 2 to 4 nats a token on the fake, whose rare noise tokens (one of
    # 255, each at logprob about -10) weigh most of it; at most log 257 = 5.5 in expectation.
    assert all(m.entropy is not None and 1.0 < m.entropy < 8.0 for m in steps)


@pytest.mark.slow
def test_the_readmes_divergence_figures_hold(
    fake_backend_factory: Callable[..., FakeBackend],
) -> None:
    # "on the fake 0 on-policy, 7e-4 a step one step off-policy, 0.02 at --temperature 0.7":
    # the mean over 20 steps of addition (mathrl.grpo.approx_kl's docstring has the ranges).
    def mean_kl(**setting: Any) -> float:
        steps = run_grpo(fake_backend_factory(), MathAdapter(), TrainConfig(steps=20, **setting))
        kls = [m.approx_kl for m in steps.steps if m.approx_kl is not None]
        return sum(kls) / len(kls)

    assert mean_kl() < 1e-12
    assert 5e-4 <= mean_kl(max_steps_off_policy=1) <= 9e-4
    assert 0.015 <= mean_kl(temperature=0.7) <= 0.03
