"""An Observer that keeps everything the loop reports, in order; a fake run observed so; and
`moves_toward_its_references`, the fast representative of a 20-step learning run."""

from __future__ import annotations

import asyncio
import math
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
from mathrl.resolved import as_task
from mathrl.rewards import text_tokens
from mathrl.rollout import prompt_tokens, run_problems
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


SHORT = TrainConfig(steps=3, batch=8, group=4)
"""A short run: the fast suite's stand-in for the slow suite's 20 steps."""


def moves_toward_its_references(
    task: Any, checkpoints: Path, config: TrainConfig = SHORT
) -> tuple[float, float]:
    """Run `task` for `config`'s few steps on the fake (told its problems); assert it trained,
    and that the mean logprob of step 1's problems' references (each ended as the task asks)
    rose from the step-0 weights to the last: the fast representative of a 20-step learning
    run, which the slow suite keeps. Returns (before, after)."""
    resolved = as_task(task)
    backend = FakeBackend.for_run(task, run_problems(task, config), checkpoint_dir=checkpoints)
    seen = Everything()
    result = run_grpo(backend, task, config, seen)
    assert sum(m.datums for m in result.steps) > 0, "nothing trained"
    (start,) = [c.path for c in seen.checkpoints if (c.step, c.kind) == (0, "sampler")]
    tok, adapter = backend.tokenizer, resolved.adapter
    sequences = []
    for problem in adapter.build_dataset(config.seed, 1, config.batch):
        prompt = adapter.make_prompt(problem)
        prompt_T = prompt_tokens(tok, resolved, prompt)
        stop = resolved.stop_for(prompt)
        end = tok.end_of_turn_id if not isinstance(prompt, str) else tok.eos_token_id
        reference = adapter.reference_completion(problem)
        tail = (
            text_tokens(tok, reference + stop[0]) if stop else [*text_tokens(tok, reference), end]
        )
        sequences.append((len(prompt_T), [*prompt_T, *tail]))

    async def mean_logprob(path: str) -> float:
        sampler = await backend.create_sampler(path)
        scored = [sum((await sampler.logprobs(s))[n - 1 :]) for n, s in sequences]
        return math.fsum(scored) / len(scored)

    before, after = asyncio.run(mean_logprob(start)), asyncio.run(mean_logprob(result.saved_path))
    assert after > before, f"the references' mean logprob went from {before:.4g} to {after:.4g}"
    return before, after
