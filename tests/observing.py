"""An Observer that keeps everything the loop reports, in order; a fake run observed so."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mathrl.config import TrainConfig
from mathrl.loop import run_grpo
from mathrl.report import (
    Checkpoint,
    EvalMetrics,
    Observer,
    SampleGroup,
    StepMetrics,
    TemperedRatio,
)
from mathrl.rollout import run_problems
from mathrl_fakes import FakeBackend


class Everything(Observer):
    """Keeps every report; `events` holds them all in the order they came."""

    def __init__(self) -> None:
        self.steps: list[StepMetrics] = []
        self.evals: list[EvalMetrics] = []
        self.checkpoints: list[Checkpoint] = []
        self.phases: list[tuple[int, str]] = []
        self.sampled: list[tuple[int, int, int]] = []
        self.warnings: list[str] = []
        self.notes: list[TemperedRatio] = []
        self.samples: list[SampleGroup] = []
        self.events: list[object] = []

    def on_step(self, metrics: StepMetrics) -> None:
        self.steps.append(metrics)
        self.events.append(metrics)

    def on_eval(self, metrics: EvalMetrics) -> None:
        self.evals.append(metrics)
        self.events.append(metrics)

    def on_checkpoint(self, checkpoint: Checkpoint) -> None:
        self.checkpoints.append(checkpoint)
        self.events.append(checkpoint)

    def on_phase(self, step: int, phase: str) -> None:
        self.phases.append((step, phase))
        self.events.append((step, phase))

    def on_sampled(self, step: int, done: int, total: int) -> None:
        self.sampled.append((step, done, total))

    def on_warning(self, message: str) -> None:
        self.warnings.append(message)

    def on_tempered_ratio(self, note: TemperedRatio) -> None:
        self.notes.append(note)

    def on_samples(self, groups: Sequence[SampleGroup]) -> None:
        self.samples.extend(groups)


def observed_run(task: Any, config: TrainConfig, checkpoints: Path) -> Everything:
    """Everything a run of `task` on the fake (told its problems) reports, its checkpoints
    in `checkpoints`."""
    backend = FakeBackend.for_run(task, run_problems(task, config), checkpoint_dir=checkpoints)
    seen = Everything()
    run_grpo(backend, task, config, seen)
    return seen
