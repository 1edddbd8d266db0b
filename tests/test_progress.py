"""The progress rows on a narrow screen: which fields go first (`progress.fields_for`).

The screen itself, at 60 columns and as it narrows mid-run, is `test_terminal.py`'s.
"""

from __future__ import annotations

import io
from dataclasses import astuple

from hypothesis import given
from rich.text import Text

from mathrl.cli.progress import (
    BAR_WIDTH,
    NARROW_BAR,
    NARROWEST_BAR,
    Fields,
    ProgressBar,
    fields_for,
    row_widths,
)
from mathrl.report import StepMetrics
from strategies import progress_rooms, progress_texts

TYPICAL = (10, 5, (7, 11), 10, (37, 22))
"""`step 12/12`, `40/40`, `0:00:05` and `eta 0:00:07`, `evaluating`, and
`step 5: accuracy 45.0%, reward 0.450` (37) without its reward (22)."""


def test_at_60_columns_the_phase_and_accuracy_stay_and_the_least_useful_go() -> None:
    # 59 columns of room: 10 + 1 + 24 bar + 1 + 11 eta + 1 + 10 phase = 58 on the first row,
    # 10 + 1 + 24 + 1 + 22 = 58 on the second, once the elapsed time (8 more), the reward
    # (15) and the counts (6) are gone.
    assert fields_for(59, *TYPICAL) == Fields(BAR_WIDTH, elapsed=False, reward=False,
                                              counts=False)  # fmt: skip
    # 120 columns: everything (first row 10+1+24+6+8+12+1+10 = 72; second 10+1+24+6+1+37 = 79).
    assert fields_for(119, *TYPICAL) == Fields()
    assert row_widths(Fields(), *TYPICAL) == (72, 79)
    # 40 columns: the estimate goes too, and the bar shrinks to what is left.
    assert fields_for(39, *TYPICAL) == Fields(6, False, False, False, False)
    # Short texts (phase 8, no last step): the 12-column bar and the estimate take
    # 10+1+12+1+11+1+8 = 44 columns. One column less drops the estimate, and the bar stays at
    # 12 (it does not grow back to 23, which the column more would then take away).
    short = (10, 3, (7, 11), 8, (0, 0))
    assert fields_for(44, *short) == Fields(NARROW_BAR, False, False, False, True)
    assert fields_for(43, *short) == Fields(NARROW_BAR, False, False, False, False)


@given(progress_rooms, progress_texts())
def test_the_rows_fit_whenever_the_narrowest_fields_do(
    room: int, texts: tuple[int, int, tuple[int, int], int, tuple[int, int]]
) -> None:
    chosen = fields_for(room, *texts)
    narrowest = Fields(NARROWEST_BAR, False, False, False, False)
    if max(row_widths(narrowest, *texts)) <= room:
        assert max(row_widths(chosen, *texts)) <= room
    else:
        assert chosen == narrowest  # and the text is cut to fit


@given(progress_rooms, progress_rooms, progress_texts())
def test_more_room_never_shows_less(
    a: int, b: int, texts: tuple[int, int, tuple[int, int], int, tuple[int, int]]
) -> None:
    narrow, wide = fields_for(min(a, b), *texts), fields_for(max(a, b), *texts)
    shown = (astuple(narrow), astuple(wide))
    # Each field shown in the narrower room is shown in the wider one, the bar no shorter.
    assert all(w >= n for n, w in zip(*shown, strict=True)), shown


def test_a_drawn_row_never_reaches_the_last_column() -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    for width in (30, 60, 120):
        bar = ProgressBar(12, 0, 40, Terminal(), stdout_piped=False)
        bar.console.width = width
        bar.on_phase(3, "sampling")  # shows the samples row
        bar.on_phase(3, "evaluating")
        bar.on_sampled(3, 20, 40)
        bar.on_step(StepMetrics(2, 0.45, 0.45, 32, 10, 8, 2, 100, 0.1))
        with bar.console.capture() as captured:
            bar.console.print(bar._display())  # what the live display draws, drawn here
        rows = [Text.from_ansi(line).plain.rstrip() for line in captured.get().splitlines()]
        assert rows[0].startswith("step  3/12 ")
        assert rows[1].startswith("samples    ")
        assert max(map(len, rows)) < width, rows
        assert "evaluating" in rows[0]
        assert "step 2: accuracy 45.0%" in rows[1] or width < 40
