"""Progress on stderr, with rich: the step out of the total, the sampling bar, the last step.

For: a person watching a run in a terminal. It draws only when stderr is a
terminal and stdout is not a pipe; otherwise stderr gets no bar and no
carriage returns. (A pipe's reader, `| tee log` say, may write our stdout
lines onto the same screen at any moment, and a live bar cannot know where
they landed.) stdout never carries the bar: its lines, written through
`above`, are printed above it, so every one of them stays on screen.

The display, while the run trains (the bar columns never move; only the text
at the end of each line changes length):

    step  3/12 ━━━━━━━━━━━━━━╺━━━━━━━━━━━━━━━  2/12 0:00:02 eta 0:00:09 sampling
    samples    ━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━ 40/40  step 2: accuracy 45.0%, reward 0.450

the second line's text being the last finished step's accuracy and mean reward.

and during set-up one line, with what it waits on and for how long.

While the bar is up, every line for the user goes through it: `say` prints
above it, and so does anything else written to stderr (rich redirects it),
so nothing lands in the bar's rows, where the next redraw would erase it and
leave a stale bar behind. `close` takes the bar down and shows the cursor
again: a run that ends with `os._exit` (a second Ctrl-C) calls it first.
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Callable
from types import TracebackType
from typing import TextIO

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    Task,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Column
from rich.text import Text

from mathrl.report import Observer, StepMetrics

BAR_WIDTH = 24


def stdout_is_a_pipe() -> bool:
    """True when fd 1 is a pipe (its reader may echo it to our terminal)."""
    try:
        return stat.S_ISFIFO(os.fstat(sys.stdout.fileno()).st_mode)
    except (OSError, ValueError):
        return False


class _Clock(TimeRemainingColumn):
    """Elapsed time and an estimate of the time left, for the steps line only."""

    def __init__(self) -> None:
        super().__init__(table_column=Column(no_wrap=True))
        self._elapsed = TimeElapsedColumn()

    def render(self, task: Task) -> Text:
        if not task.fields.get("clock"):
            return Text("")
        return Text.assemble(
            self._elapsed.render(task), " eta ", super().render(task), style="progress.remaining"
        )


class ProgressBar(Observer):
    """A live display on stderr; a no-op unless stderr is a terminal (and stdout no pipe)."""

    def __init__(
        self,
        steps: int,
        first_step: int,
        per_step: int,
        stream: TextIO | None = None,
        *,
        stdout_piped: bool | None = None,
    ) -> None:
        self.console = Console(file=stream or sys.stderr, stderr=stream is None)
        piped = stdout_is_a_pipe() if stdout_piped is None else stdout_piped
        self.active = self.console.is_terminal and not piped
        width = max(len("setting up"), len(f"step {steps}/{steps}"))
        self._progress = Progress(
            TextColumn("{task.description}", table_column=Column(width=width, no_wrap=True)),
            BarColumn(bar_width=BAR_WIDTH),
            MofNCompleteColumn(table_column=Column(width=2 * len(str(max(steps, per_step))) + 1)),
            _Clock(),
            # The only column whose width follows the screen: long text here is cut short
            # rather than squeezing the bar.
            TextColumn(
                "{task.fields[status]}",
                table_column=Column(no_wrap=True, overflow="ellipsis", ratio=1),
            ),
            console=self.console,
            expand=True,
            transient=True,
        )
        self._progress.live = self._live()
        self._total = steps
        self._steps = self._progress.add_task(
            "setting up", total=steps, completed=first_step, status="", clock=True
        )
        self._sampling = self._progress.add_task(
            "samples", total=per_step, visible=False, status="", clock=False
        )
        self._started = False

    def __enter__(self) -> ProgressBar:
        if self.active:
            self._progress.start()
            self._started = True
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Take the bar down, now: its rows erased and the cursor shown again. Idempotent."""
        if self._started:
            self._progress.stop()
            self._started = False

    def say(self, line: str) -> None:
        """Write one line to stderr, above the bar when it is up."""
        if self.active:
            self.console.print(line, markup=False, highlight=False, soft_wrap=True)
        else:
            print(line, file=self.console.file, flush=True)

    def above(self, write: Callable[[], None]) -> None:
        """Run `write` (a stdout write) with the bar out of the way, then draw it again below.

        stdout is another stream than the bar's, so rich cannot place its
        lines; the bar is taken down (it is transient: that erases it),
        `write` prints where it stood, and the bar comes back under it.
        """
        if not self._started:
            write()
            return
        self._progress.stop()
        try:
            write()
        finally:
            # A new Live: the old one would first move up over the lines just written,
            # to where it last drew the bar.
            self._progress.live = self._live()
            self._progress.start()

    def _live(self) -> Live:
        return Live(
            console=self.console,
            transient=True,
            redirect_stdout=False,  # stdout is the seed's lines, never the bar's
            redirect_stderr=True,  # another's line on stderr goes above the bar, like `say`'s
            get_renderable=self._display,
        )

    def _display(self) -> RenderableType:
        # An empty row under the bar holds the cursor: the terminal echoes a Ctrl-C there
        # as `^C`. At the end of a full-width bar row, the echo would wrap onto a row the
        # display does not know of, and each redraw would then leave a copy of the bar.
        return Group(self._progress.get_renderable(), Text(""))

    def setting_up(self, status: str) -> None:
        """What set-up is waiting on now, e.g. the URL and its timeout."""
        self._progress.update(self._steps, status=status)

    def on_phase(self, step: int, phase: str) -> None:
        self._progress.update(
            self._steps,
            description=f"step {step:>{len(str(self._total))}}/{self._total}",
            status=phase,
        )
        if phase == "sampling":
            self._progress.update(self._sampling, completed=0, visible=True)

    def on_sampled(self, step: int, done: int, total: int) -> None:
        self._progress.update(self._sampling, completed=done, total=total)

    def on_step(self, metrics: StepMetrics) -> None:
        m = metrics
        last = f"step {m.step}: accuracy {m.accuracy:.1%}, reward {m.mean_reward:.3f}"
        self._progress.update(self._steps, completed=metrics.step)
        self._progress.update(self._sampling, status=last)
