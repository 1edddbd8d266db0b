"""Progress on stderr, with rich: the step out of the total, the sampling bar, the phase.

For: a person watching a run in a terminal. It draws only when stderr is a
terminal; piped or redirected, stderr gets no bar and no carriage returns,
and stdout is never touched. Lines the CLI writes to stderr while the bar is
up go through `say`, so they print above it instead of through it.
"""

from __future__ import annotations

import sys
from types import TracebackType
from typing import TextIO

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from mathrl.report import Observer, StepMetrics


class ProgressBar(Observer):
    """A live two-line display on stderr; a no-op unless stderr is a terminal."""

    def __init__(self, steps: int, first_step: int, per_step: int, stream: TextIO | None = None):
        self.console = Console(file=stream or sys.stderr, stderr=stream is None)
        self.active = self.console.is_terminal
        self._progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=self.console,
            transient=True,
            redirect_stdout=False,  # stdout is the seed's lines, never the bar's
            redirect_stderr=False,
        )
        self._steps = self._progress.add_task("setting up", total=steps, completed=first_step)
        self._sampling = self._progress.add_task("samples", total=per_step)
        self._total = steps

    def __enter__(self) -> ProgressBar:
        if self.active:
            self._progress.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self.active:
            self._progress.stop()

    def say(self, line: str) -> None:
        """Write one line to stderr, above the bar when it is up."""
        if self.active:
            self.console.print(line, markup=False, highlight=False, soft_wrap=True)
        else:
            print(line, file=self.console.file, flush=True)

    def on_phase(self, step: int, phase: str) -> None:
        self._progress.update(self._steps, description=f"step {step}/{self._total}: {phase}")
        if phase == "sampling":
            self._progress.update(self._sampling, completed=0, description=f"step {step} samples")

    def on_sampled(self, step: int, done: int, total: int) -> None:
        self._progress.update(self._sampling, completed=done, total=total)

    def on_step(self, metrics: StepMetrics) -> None:
        self._progress.update(self._steps, completed=metrics.step)
