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
    samples    ━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━ 40/40 step 2: accuracy 45.0%, reward 0.450

the second line's text being the last finished step's accuracy and mean reward;
and during set-up one line, with what it waits on and for how long. On a
narrow screen the least useful fields go first (`fields_for`): the elapsed
time, the reward, the counts, some of the bar, the estimate; at 60 columns

    step  3/12 ━━━━━━━━━━━━━━━╺━━━━━━━━ eta 0:00:09 sampling
    samples    ━━━━━━━━━━━━━━━━━━━━━━━━ step 2: accuracy 45.0%

While the bar is up, every line for the user goes through it: `say` prints
above it, and so does anything else written to stderr (rich redirects it),
so nothing lands in the bar's rows, where the next redraw would erase it and
leave a stale bar behind. A terminal made narrower wraps the bar's rows onto
more rows; the next redraw moves up over all of them (`_Reflowing`), so none
is left behind. `close` takes the bar down and shows the cursor again: a run
that ends with `os._exit` (a second Ctrl-C) calls it first.
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from types import TracebackType
from typing import TextIO

from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.control import Control
from rich.live import Live
from rich.live_render import LiveRender
from rich.progress import Progress, Task
from rich.progress_bar import ProgressBar as Bar
from rich.segment import Segment
from rich.table import Table
from rich.text import Text

from mathrl.report import Observer, StepMetrics

BAR_WIDTH = 24
NARROW_BAR = 12
"""The bar shrinks to this before the estimate of the time left goes."""
NARROWEST_BAR = 6
PHASES = ("sampling", "training", "evaluating")
"""What the first row says a step is doing (`Observer.on_phase`): its room is the longest's."""


@dataclass(frozen=True, slots=True)
class Fields:
    """What the rows show at one width: all of it, unless the screen is too narrow."""

    bar: int = BAR_WIDTH
    elapsed: bool = True
    reward: bool = True
    counts: bool = True
    eta: bool = True


def _choices() -> Iterator[Fields]:
    """Every Fields, the most useful first: each drops what helps least of what is left."""
    yield Fields()
    yield Fields(elapsed=False)
    yield Fields(elapsed=False, reward=False)
    for bar in range(BAR_WIDTH, NARROW_BAR - 1, -1):
        yield Fields(bar, elapsed=False, reward=False, counts=False)
    for bar in range(NARROW_BAR, NARROWEST_BAR - 1, -1):  # the bar never grows back
        yield Fields(bar, elapsed=False, reward=False, counts=False, eta=False)


def row_widths(
    fields: Fields,
    heading: int,
    counts: int,
    clock: tuple[int, int],
    phase: int,
    last: tuple[int, int],
) -> tuple[int, int]:
    """The widths of the two rows, one space between fields.

    Args:
        heading: the first column's width (`step 12/12`).
        counts: the M/N column's width.
        clock: the elapsed time's width and the estimate's (`eta 0:00:09`).
        phase: the first row's text's width.
        last: the second row's text's width, with and without its reward.
    """
    start = heading + 1 + fields.bar + (1 + counts if fields.counts else 0)
    times = (1 + clock[0] if fields.elapsed else 0) + (1 + clock[1] if fields.eta else 0)
    return start + times + 1 + phase, start + 1 + last[0 if fields.reward else 1]


def fields_for(
    room: int,
    heading: int,
    counts: int,
    clock: tuple[int, int],
    phase: int,
    last: tuple[int, int],
) -> Fields:
    """The most the rows can show in `room` columns (see `row_widths` for the rest), dropping
    the least useful first: the elapsed time, the last step's reward, the M/N counts, the
    bar down to NARROW_BAR, the estimate of the time left, the bar down to NARROWEST_BAR.
    Past that, the rows' text is cut short (with an ellipsis) to fit."""
    fits = None
    for fields in _choices():
        fits = fields
        if max(row_widths(fields, heading, counts, clock, phase, last)) <= room:
            break
    assert fits is not None
    return fits


def _time(seconds: float | None) -> str:
    """`h:mm:ss`, as rich shows a time; `-:--:--` when it is not known yet."""
    return "-:--:--" if seconds is None else str(timedelta(seconds=max(0, int(seconds))))


def stdout_is_a_pipe() -> bool:
    """True when fd 1 is a pipe (its reader may echo it to our terminal)."""
    try:
        return stat.S_ISFIFO(os.fstat(sys.stdout.fileno()).st_mode)
    except (OSError, ValueError):
        return False


class _Reflowing(LiveRender):
    """A LiveRender that remembers how wide each row it drew was, so that a redraw after the
    terminal narrowed (which wraps each wide row onto several) moves up over every row they
    take now, not only over as many as it drew; otherwise the rows above stay on screen."""

    def __init__(self, renderable: RenderableType, console: Console) -> None:
        super().__init__(renderable)
        self._console = console
        self._widths: list[int] = []

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        widths, width = [], 0
        for segment in super().__rich_console__(console, options):
            if segment == Segment.line():
                widths.append(width)
                width = 0
            elif isinstance(segment, Segment):
                width += segment.cell_length
            yield segment
        self._widths = [*widths, width]

    def _rows_now(self) -> None:
        """Make the height `position_cursor` and `restore_cursor` move over the rows the
        drawing takes at the terminal's width now."""
        if self._shape is not None and self._widths:
            columns = max(1, self._console.width)
            rows = sum(max(1, -(-width // columns)) for width in self._widths)
            self._shape = (self._shape[0], max(self._shape[1], rows))

    def position_cursor(self) -> Control:
        self._rows_now()
        return super().position_cursor()

    def restore_cursor(self) -> Control:
        self._rows_now()
        return super().restore_cursor()


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
        self._heading = max(len("setting up"), len(f"step {steps}/{steps}"))
        self._counts = 2 * len(str(max(steps, per_step))) + 1
        # The tasks' counts and times; the rows are drawn here (`_display`), field by field.
        self._progress = Progress(console=self.console, transient=True)
        self._last = ("", "")
        """The last finished step's line, with its reward and without."""
        self._total = steps
        self._steps = self._progress.add_task(
            "setting up", total=steps, completed=first_step, status=""
        )
        self._sampling = self._progress.add_task("samples", total=per_step, visible=False)
        self._progress.live = self._live()
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
        live = Live(
            console=self.console,
            transient=True,
            redirect_stdout=False,  # stdout is the seed's lines, never the bar's
            redirect_stderr=True,  # another's line on stderr goes above the bar, like `say`'s
            get_renderable=self._display,
        )
        # rich keeps the drawing it moves over here; this one knows what a narrower screen did.
        live._live_render = _Reflowing(live._live_render.renderable, self.console)
        return live

    def _display(self) -> RenderableType:
        # An empty row under the bar holds the cursor: the terminal echoes a Ctrl-C there
        # as `^C`. At the end of a full-width bar row, the echo would wrap onto a row the
        # display does not know of, and each redraw would then leave a copy of the bar:
        # so no row reaches the last column either.
        room = self.console.width - 1
        tasks = {task.id: task for task in self._progress.tasks}
        steps, sampling = tasks[self._steps], tasks[self._sampling]
        if steps.description == "setting up":
            return Group(self._row(steps, str(steps.fields["status"]), room), Text(""))
        elapsed, eta = _time(steps.elapsed), f"eta {_time(steps.time_remaining)}"
        phase = str(steps.fields["status"])
        fields = fields_for(
            room, self._heading, self._counts, (len(elapsed), len(eta)),
            max(len(phase), *map(len, PHASES)), (len(self._last[0]), len(self._last[1])),
        )  # fmt: skip
        clock = " ".join([elapsed] * fields.elapsed + [eta] * fields.eta)
        rows = [self._row(steps, phase, room, fields, clock)]
        if sampling.visible:
            rows.append(self._row(sampling, self._last[not fields.reward], room, fields))
        return Group(*rows, Text(""))

    def _row(
        self, task: Task, status: str, room: int, fields: Fields | None = None, clock: str = ""
    ) -> Table:
        """One row: the task's name, then (unless setting up) its bar, counts and clock, as
        `fields` has them; then `status`, cut with an ellipsis where the room ends."""
        grid = Table.grid(padding=(0, 1))
        cells: list[RenderableType] = [Text(task.description)]
        grid.add_column(width=self._heading, no_wrap=True)
        used = self._heading
        if fields is not None:
            grid.add_column(width=fields.bar, no_wrap=True)
            cells.append(Bar(total=task.total, completed=task.completed, width=fields.bar))
            used += 1 + fields.bar
            if fields.counts:
                total = f"{task.total:g}"
                count = f"{task.completed:{len(total)}g}/{total}"
                grid.add_column(width=self._counts, justify="right", no_wrap=True)
                cells.append(Text(count, style="progress.download"))
                used += 1 + self._counts
            if clock:
                grid.add_column(no_wrap=True)
                cells.append(Text(clock, style="progress.remaining"))
                used += 1 + len(clock)
        grid.add_column(no_wrap=True, overflow="ellipsis", max_width=max(1, room - used - 1))
        cells.append(Text(status))
        grid.add_row(*cells)
        return grid

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
        accuracy = f"step {m.step}: accuracy {m.accuracy:.1%}"
        self._last = (f"{accuracy}, reward {m.mean_reward:.3f}", accuracy)
        self._progress.update(self._steps, completed=metrics.step)
