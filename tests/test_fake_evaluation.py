"""The fake's held-out evaluation tells a task's author something: for every built-in task,
and for a task whose references are long, the untrained fake's greedy held-out accuracy is at
most 70%, and 20 steps raise it by at least 20 points (the rule: `mathrl_fakes.policy`)."""

from __future__ import annotations

import importlib
import random
from collections.abc import Sequence
from typing import Any

import pytest

from conftest import BUILT_IN_ARGS, import_extra
from mathrl.adapter import Adapter, Response
from mathrl.config import TrainConfig
from mathrl.loop import run_grpo
from mathrl.report import EvalMetrics, Observer
from mathrl.rollout import run_problems
from mathrl.tasks import BUILT_IN
from mathrl_fakes import FakeBackend


class CountDown:
    """Count down twenty numbers: a reference of about 80 characters, ten times addition's."""

    name = "count-down"
    max_tokens = 128  # the reference is about 100 bytes, so 100 of the fake's tokens

    def build_dataset(self, seed: int, step: int, size: int) -> list[int]:
        rng = random.Random(f"count-down/{seed}/{step}")
        return [rng.randrange(100, 600) for _ in range(size)]

    def heldout_dataset(self, seed: int, size: int) -> list[int]:
        rng = random.Random(f"count-down/held-out/{seed}")
        return [rng.randrange(600, 1000) for _ in range(size)]

    def make_prompt(self, start: int) -> str:
        return f"Count down twenty numbers from {start}:"

    def compute_reward(self, completion: Response, start: int) -> float:
        return 1.0 if completion.strip() == self.reference_completion(start).strip() else 0.0

    def reference_completion(self, start: int) -> str:
        return " " + ", ".join(str(n) for n in range(start, start - 20, -1))

    def evaluate(self, rewards: Sequence[float]) -> float:
        return sum(r == 1.0 for r in rewards) / len(rewards) if rewards else 0.0


class Evals(Observer):
    def __init__(self) -> None:
        self.evals: list[EvalMetrics] = []

    def on_eval(self, metrics: EvalMetrics) -> None:
        self.evals.append(metrics)


def built_in(name: str) -> Adapter[Any]:
    module, _, cls = BUILT_IN[name][0].partition(":")
    made: Adapter[Any] = getattr(importlib.import_module(module), cls)(
        **BUILT_IN_ARGS.get(name, {})
    )
    return made


@pytest.mark.slow
@pytest.mark.parametrize("name", [*BUILT_IN, "a task whose references are long"])
def test_untrained_greedy_accuracy_is_at_most_70_percent_and_20_steps_raise_it_20_points(
    name: str,
) -> None:
    if name == "reasoning-gym":
        import_extra("reasoning_gym", "reasoning-gym")
    task: Adapter[Any] = CountDown() if name not in BUILT_IN else built_in(name)
    config = TrainConfig(steps=20, eval_every=20)
    evals = Evals()
    run_grpo(FakeBackend.for_run(task, run_problems(task, config)), task, config, evals)
    before, after = (m.accuracy for m in evals.evals)
    assert [m.step for m in evals.evals] == [0, 20]
    assert before <= 0.70, f"{name}: untrained greedy accuracy {before:.0%}"
    assert after >= before + 0.20, f"{name}: {before:.0%} -> {after:.0%}"
