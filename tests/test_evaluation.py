"""Evaluation inside a run: when it happens, what it reports, and what it costs in time."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from mathrl.adapter import Response
from mathrl.checkpoints import checkpoint_name
from mathrl.config import TrainConfig
from mathrl.evaluation import Evaluation, Samples, _answers, evaluate
from mathrl.loop import run_grpo, run_grpo_async
from mathrl.report import Checkpoint, StepMetrics
from mathrl.resolved import as_task
from mathrl.rewards import TaskError
from mathrl.rollout import run_problems
from mathrl.tasks.addition import MathAdapter
from mathrl.workers import Workers
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


# -- naming answers (maj@k) -----------------------------------------------------------------


class ProcessNames(MathAdapter):
    """Names each response's answer by the process it was named in."""

    work_in_processes = False

    def final_answer(self, response: str) -> str | None:
        return str(os.getpid())


class InProcesses(ProcessNames):
    work_in_processes = True


class Slow(ProcessNames):
    def final_answer(self, response: str) -> str | None:
        time.sleep(0.25)  # under the pool's 0.45 s a call; two calls are 0.5 s, under 0.9 s
        return None


class SlowInProcesses(Slow):
    work_in_processes = True


class Numbers(ProcessNames):
    def final_answer(self, response: str) -> Any:
        return 5 if "bad" in response else super().final_answer(response)


class Raises(ProcessNames):
    def final_answer(self, response: str) -> str | None:
        raise ValueError("no answer here")


class Hangs(InProcesses):
    """Writes its process's id to `where`, then never answers."""

    def __init__(self, where: Path) -> None:
        self.where = where

    def final_answer(self, response: str) -> str | None:
        self.where.write_text(str(os.getpid()))
        time.sleep(60)
        return None


TWO = [Response(" 12"), Response(" 13"), Response(" 12")]
"""Three responses, two distinct: two calls of final_answer."""


def answers(adapter: MathAdapter, responses: list[Response], pool: Workers) -> list[str | None]:
    return asyncio.run(_answers(as_task(adapter), responses, pool))


def test_a_task_that_works_in_processes_names_its_answers_in_another_process() -> None:
    here = str(os.getpid())
    assert answers(ProcessNames(), TWO, Workers(1)) == [here] * 3
    named = answers(InProcesses(), TWO, Workers(1))
    assert len(set(named)) == 1
    assert named[0] != here
    # With no worker threads, a task's work stays in this process.
    assert answers(InProcesses(), TWO, Workers(0)) == [here] * 3


@pytest.mark.parametrize("adapter", [Slow(), SlowInProcesses()], ids=["thread", "process"])
def test_naming_answers_has_the_pools_timeout_for_each_distinct_response(
    adapter: MathAdapter,
) -> None:
    assert answers(adapter, TWO, Workers(1, timeout=0.45)) == [None] * 3
    late = r"^task 'addition' failed: final_answer did not return within 0\.3 s \(3 calls"
    with pytest.raises(TaskError, match=late):
        answers(adapter, TWO * 2 + [Response(" 14")], Workers(1, timeout=0.1))


def test_a_task_whose_answers_fail_is_named_with_the_response_it_failed_on() -> None:
    with pytest.raises(
        TaskError,
        match=r"^task 'addition' failed: final_answer broke the contract: it must return a str or "
        r"None \(got 5\) "
        r"\(on ' bad'\)$",
    ):
        answers(Numbers(), [Response(" 12"), Response(" bad")], Workers(1))
    with pytest.raises(
        TaskError,
        match=r"^task 'addition' failed: final_answer raised ValueError: no answer here "
        r"\(on ' 12'\)$",
    ):
        answers(Raises(), TWO, Workers(1))
    with pytest.raises(
        TaskError,
        match=r"^task 'addition' failed: final_answer did not return within 0\.2 s \(2 calls of up "
        r"to 0\.1 s each\) \(on \[' 12', ' 13', ' 12'\]\)$",
    ):
        answers(SlowInProcesses(), TWO, Workers(1, timeout=0.1))


def test_an_evaluation_reports_the_tasks_metrics_and_no_samples_of_no_problem() -> None:
    # Tokens 4 and 6: their mean 5, with pass@k asked for or not.
    greedy = Evaluation([Response(" 1"), Response(" 2")], [1.0, 0.0], [{}, {}], 0.5,
                        metrics_P=[{"tokens": 4.0}, {"tokens": 6.0}])  # fmt: skip
    assert greedy.metrics(3, "p", 0.0).metrics == {"tokens": 5.0}
    sampled = replace(greedy, samples=Samples(2, [[1.0, 0.0]] * 2, [[True, False]] * 2))
    assert sampled.metrics(3, "p", 0.0, ks=(1,)).metrics == {"tokens": 5.0}
    # Samples of no problem score 0 (nothing was right).
    none = Samples(4, [], [], [])
    assert (none.pass_at(1), none.majority_at(1), none.mean_reward) == (0.0, 0.0, 0.0)


def test_an_evaluation_keeps_each_greedy_episode(fake_backend_factory: FakeFactory) -> None:
    backend = fake_backend_factory()
    task, config = as_task(MathAdapter()), TrainConfig()
    problems = task.heldout(0, 3)

    async def go() -> Evaluation:
        path = await (await backend.submit_save_for_sampler(checkpoint_name(task, config, 0)))
        sampler = await backend.create_sampler(path)
        return await evaluate(backend.tokenizer, sampler, task, config, problems)

    done = asyncio.run(go())
    assert len(done.episodes_P) == 3
    assert [e.final for e in done.episodes_P] == done.responses_P


def test_a_late_answer_ends_the_process_it_was_named_in(tmp_path: Path) -> None:
    four = [Response(f" {n}") for n in range(4)]
    with pytest.raises(TaskError, match=r"final_answer did not return within 0\.8 s \(4 calls"):
        answers(Hangs(tmp_path / "pid"), four, Workers(1, timeout=0.2))
    # Its process is killed at the call's budget (4 x 0.2 s), not left to sleep on.
    pid, deadline = int((tmp_path / "pid").read_text()), time.monotonic() + 1.5
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not Path(f"/proc/{pid}").exists()
