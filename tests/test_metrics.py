"""Metrics beside rewards: what a task reports about its completions that does not count in
the reward, from each completion to a step's means and the run's records.

The run folder, the plot and W&B are checked on a whole fake run in test_wandb; the
checker's part in test_testing and test_episode_checks; episodes' in test_episodes.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import given

import strategies as st_
from cli_process import run_main
from mathrl.adapter import Response
from mathrl.cli.records import eval_record, sample_record, step_record
from mathrl.config import TrainConfig
from mathrl.evaluation import Evaluation
from mathrl.loop import run_grpo
from mathrl.report import Sample, SampleGroup
from mathrl.resolved import as_task
from mathrl.rewards import TaskError, metric_values
from mathrl.rollout import metric_means, run_problems
from mathrl.tasks.addition import AdditionProblem, MathAdapter, parse_answer
from mathrl_fakes import FakeBackend
from observing import Everything, observed_run

BIGGEST = sys.float_info.max


class Counted(MathAdapter):
    """Addition, reporting each completion's length in tokens, whether it names a number,
    and, only when it does, how many digits."""

    name = "counted"

    def metrics(self, completion: Response, problem: AdditionProblem) -> Mapping[str, float]:
        answer = parse_answer(completion)
        named = {"digits": len(str(abs(answer)))} if answer is not None else {}
        return {"tokens": completion.tokens, "answered": answer is not None, **named}


# -- the means ------------------------------------------------------------------------------


def test_metric_means_worked_example() -> None:
    # tokens: (4 + 6 + 5) / 3 = 5; solved_on_turn: only the first reports it, so 2, not 2 / 3.
    metrics = [{"tokens": 4.0, "solved_on_turn": 2.0}, {"tokens": 6.0}, {"tokens": 5.0}]
    assert metric_means(metrics) == {"solved_on_turn": 2.0, "tokens": 5.0}
    assert metric_means([]) == metric_means([{}, {}]) == {}
    # Two of the largest finite float: their sum is not finite, their mean is.
    assert metric_means([{"x": BIGGEST}, {"x": BIGGEST}]) == {"x": BIGGEST}
    # 1.7e308 and 1.0e308: their sum overflows, their mean is 1.35e308, halfway between.
    assert metric_means([{"x": 1.7e308}, {"x": 1.0e308}]) == {"x": pytest.approx(1.35e308)}


@given(st_.completion_metrics)
def test_each_metric_is_averaged_over_the_completions_that_report_it(
    metrics: list[dict[str, float]],
) -> None:
    means = metric_means(metrics)
    assert list(means) == sorted({name for named in metrics for name in named})
    for name, mean in means.items():
        reported = [named[name] for named in metrics if name in named]
        exact = sum(map(Fraction, reported)) / len(reported)
        assert math.isfinite(mean)
        assert min(reported) <= mean <= max(reported)
        assert mean == pytest.approx(float(exact), rel=1e-12, abs=1e-12 * max(map(abs, reported)))
    assert metric_means(metrics[::-1]) == means  # the completions' order does not matter


def test_metric_values_worked_examples() -> None:
    # True and False count 1 and 0; ints become floats.
    assert metric_values({"solved": True, "tokens": 37, "share": 0.5}) == {
        "solved": 1.0, "tokens": 37.0, "share": 0.5
    }  # fmt: skip
    assert metric_values({}) == {}
    for not_metrics in (
        [("tokens", 1.0)],
        {"tokens": math.nan},
        {"tokens": -math.inf},
        {"tokens": 10**400},  # an int past the largest float
        {"tokens": "37"},
        {"": 1.0},
        {1: 1.0},
        None,
    ):
        assert metric_values(not_metrics) is None, not_metrics


@given(st_.completion_metrics)
def test_metrics_are_names_to_the_numbers_given(metrics: list[dict[str, float]]) -> None:
    for named in metrics:
        assert metric_values(named) == {name: float(value) for name, value in named.items()}
        assert metric_values({**named, "broken": math.inf}) is None


# -- a step and an evaluation -----------------------------------------------------------------


def test_a_run_reports_each_completions_metrics_and_their_means(tmp_path: Path) -> None:
    config = TrainConfig(steps=2, batch=3, group=4, eval_every=2, eval_problems=5)
    seen = observed_run(Counted(), config, tmp_path)
    for step in seen.steps:
        samples = [s for g in seen.samples if g.step == step.step for s in g.samples]
        assert len(samples) == 12  # every group logged: the step's means are theirs
        # Each completion's tokens: its budget when cut off at it; their mean, the step's.
        budget = as_task(Counted()).max_tokens
        assert all(1 <= s.metrics["tokens"] <= budget for s in samples)
        assert all(s.metrics["tokens"] == budget for s in samples if s.ended == "length")
        assert step.metrics["tokens"] == pytest.approx(step.mean_completion_tokens)
        answered = [s.metrics["answered"] for s in samples]
        assert step.metrics["answered"] == pytest.approx(sum(answered) / 12)
        digits = [s.metrics["digits"] for s in samples if "digits" in s.metrics]
        assert len(digits) == sum(answered)
        if digits:
            assert step.metrics["digits"] == pytest.approx(sum(digits) / len(digits))
        else:
            assert "digits" not in step.metrics
    for evaluation in seen.evals:
        assert set(evaluation.metrics) >= {"tokens", "answered"}
        assert 1.0 <= evaluation.metrics["tokens"] <= as_task(Counted()).max_tokens


def test_metrics_are_reported_only_by_a_task_that_has_them_and_change_no_training(
    tmp_path: Path,
) -> None:
    config = TrainConfig(steps=2, batch=2, group=2, eval_every=1, eval_problems=3)
    plain = observed_run(MathAdapter(), config, tmp_path / "plain")
    # The same class, given Counted's metrics: the same run name, so the same samples.
    measured = MathAdapter()
    setattr(measured, "metrics", Counted().metrics)  # noqa: B010  # an instance's, for mypy
    counted = observed_run(measured, config, tmp_path / "counted")
    # Without metrics: none, on any step, evaluation or sample.
    assert [m.metrics for m in plain.steps] + [m.metrics for m in plain.evals] == [{}] * 5
    assert all(not s.metrics for g in plain.samples for s in g.samples)
    # With them: on every step, evaluation and sample...
    assert all({"tokens", "answered"} <= set(m.metrics) for m in counted.steps)
    assert all({"tokens", "answered"} <= set(e.metrics) for e in counted.evals)
    assert all({"tokens", "answered"} <= set(s.metrics) for g in counted.samples for s in g.samples)

    # ...and the same run otherwise, sample for sample: metrics train nothing.
    def trained(seen: Everything) -> list[tuple[object, ...]]:
        return [
            *[(m.accuracy, m.mean_reward, m.datums, m.loss, m.approx_kl) for m in seen.steps],
            *[(m.accuracy, m.mean_reward) for m in seen.evals],
            *[(s.text, s.reward, s.advantage, s.trained) for g in seen.samples for s in g.samples],
        ]

    assert trained(counted) == trained(plain)


def test_an_evaluations_metrics_worked_example() -> None:
    responses = [Response(" 42\n", "stop", "\n", tokens=4), Response(" 7", "length", tokens=2)]
    metrics = [{"tokens": 4.0, "digits": 2.0}, {"tokens": 2.0}]
    evaluation = Evaluation(responses, [1.0, 0.0], [{}, {}], 0.5, None, metrics)
    # tokens (4 + 2) / 2 = 3; digits reported by the first only: 2.
    assert evaluation.metrics(3, "w", 1.0).metrics == {"digits": 2.0, "tokens": 3.0}
    record = eval_record(evaluation.metrics(3, "w", 1.0))
    assert (record["metric/tokens"], record["metric/digits"]) == (3.0, 2.0)
    assert "metrics" not in record


# -- records ---------------------------------------------------------------------------------


def test_records_gain_metric_keys_only_for_a_task_that_reports_metrics(tmp_path: Path) -> None:
    config = TrainConfig(steps=1, batch=2, group=2)
    for adapter, reports in ((MathAdapter(), False), (Counted(), True)):
        seen = observed_run(adapter, config, tmp_path / adapter.name)
        (step,) = seen.steps
        record = step_record(step)
        keys = {key for key in record if key.startswith("metric/")}
        assert keys == {f"metric/{name}" for name in step.metrics}
        assert ({"metric/tokens", "metric/answered"} <= keys) == reports
        assert bool(keys) == reports
        completions = sample_record(seen.samples[0])["completions"]
        assert all(("metrics" in c) == reports for c in completions)


def test_a_completions_metrics_are_in_its_sample_record() -> None:
    sample = Sample(" 42\n", "stop", "\n", 1.0, {}, 0.5, True, metrics={"tokens": 4.0})
    (completion,) = sample_record(SampleGroup(1, 0, "Q: 40 + 2?", (sample,)))["completions"]
    assert completion["metrics"] == {"tokens": 4.0}


# -- failures ----------------------------------------------------------------------------------


class Raising(MathAdapter):
    name = "raising"

    def metrics(self, completion: Response, problem: AdditionProblem) -> Mapping[str, float]:
        return {"value": int(completion)}  # the bug: int() of model output


class Infinite(MathAdapter):
    name = "infinite"

    def metrics(self, completion: Response, problem: AdditionProblem) -> Mapping[str, float]:
        return {"ratio": math.inf}


@pytest.mark.parametrize(
    ("adapter", "message"),
    [
        (Raising(), r"^task 'raising' failed: metrics raised ValueError: invalid literal for "
                    r"int\(\) with base 10: .* \(on .*\)$"),
        (Infinite(), r"^task 'infinite' failed: metrics broke the contract: metrics must be a "
                     r"mapping of names to finite numbers \(got \{'ratio': inf\}\) \(on .*\)$"),
    ],
)  # fmt: skip
def test_a_metric_that_fails_is_a_task_error_like_a_reward_that_does(
    tmp_path: Path, adapter: MathAdapter, message: str
) -> None:
    config = TrainConfig(steps=1, batch=2, group=2)
    backend = FakeBackend.for_run(adapter, run_problems(adapter, config), checkpoint_dir=tmp_path)
    with pytest.raises(TaskError, match=message) as raised:
        run_grpo(backend, adapter, config)
    assert raised.value.method == "metrics"


METRICS_RAISE = """
from mathrl.tasks.addition import MathAdapter

class Measured(MathAdapter):
    name = "measured"

    def metrics(self, completion, problem):
        return {"value": int(completion)}
"""


def test_a_metric_that_raises_ends_the_run_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "measured.py").write_text(METRICS_RAISE)
    failed = run_main(tmp_path, "--backend", "fake", "--adapter", "measured:Measured")
    assert failed.returncode == 1
    assert "Traceback" not in failed.stderr
    [error] = [line for line in failed.stderr.splitlines() if "error:" in line]
    assert error.startswith(
        "mathrl: error: task 'measured' failed: metrics raised ValueError: invalid literal"
    )
    assert "check the task with: python -m mathrl check-adapter measured:Measured" in (
        failed.stderr
    )


def test_a_metrics_member_that_is_not_a_method_is_refused() -> None:
    class NotAMethod(MathAdapter):
        metrics = "tokens"  # the mistake under test: a name, not the method

    with pytest.raises(TypeError, match=r"NotAMethod\.metrics must be a method"):
        as_task(NotAMethod())
