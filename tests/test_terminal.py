"""What a person sees in a real terminal: a run in tmux, its screen read with capture-pane.

stdout and stderr are both the screen here, as in most terminals: the seed's
lines (stdout) must all stay on screen, with the live bar (stderr) drawn
below them while the run goes, and gone at the end. A run stopped by one
Ctrl-C, two, SIGTERM, or Ctrl-C during set-up leaves the same: no bar, the
cursor shown, every stdout line in order, and the notice whole, at 120
columns and at 60.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from cli_process import run_cli, saved_names, user_env
from conftest import math_references
from doubles.fake_mint_http import FakeMintHTTP

pytestmark = pytest.mark.slow

RUN = ["--backend", "fake", "--steps", "12", "--fake-latency", "0.1", "--eval-every", "5"]


@pytest.fixture
def tmux(tmp_path: Path) -> Iterator[list[str]]:
    """A private tmux server (its own socket), killed afterwards."""
    if shutil.which("tmux") is None:
        if os.environ.get("CI"):
            pytest.fail("tmux is missing: .ci/run installs it (apt-get install tmux)")
        pytest.skip("tmux is not installed (apt-get install tmux)")
    command = ["tmux", "-L", f"mathrl-{uuid.uuid4().hex[:8]}"]
    yield command
    subprocess.run([*command, "kill-server"], capture_output=True, check=False)


def screen(tmux: list[str], *options: str) -> list[str]:
    """The pane's rows (`-J`: a row the terminal wrapped, joined again)."""
    shown = subprocess.run(
        [*tmux, "capture-pane", "-p", *options, "-t", "run"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return [line.rstrip() for line in shown.stdout.splitlines()]


def start_in_tmux(tmux: list[str], folder: Path, args: list[str], width: int, **env: str) -> Path:
    """`python -m mathrl ARGS` in a new tmux session `run`, `width` columns wide, in
    `folder`; then `EXIT=<its exit code>`. Returns the file its process id goes to."""
    pid = folder / "pid"
    # Not COLUMNS or LINES (pytest-xdist sets them): rich would believe them over the
    # terminal, as it would in a shell that exports them.
    exports = {
        k: v
        for k, v in user_env(folder, TERM="xterm-256color", **env).items()
        if k.isidentifier() and k not in ("COLUMNS", "LINES")
    }
    assignments = " ".join(f"{k}={shlex.quote(v)}" for k, v in exports.items())
    # `exec` keeps the shell's process id, written down first, for a SIGTERM.
    command = shlex.join([sys.executable, "-m", "mathrl", *args])
    program = f"echo $$ > {shlex.quote(str(pid))}; exec {command}"
    shell = (
        f"cd {shlex.quote(str(folder))} && env -i {assignments} sh -c {shlex.quote(program)}; "
        "echo EXIT=$?; sleep 600"
    )
    subprocess.run(
        [*tmux, "new-session", "-d", "-s", "run", "-x", str(width), "-y", "50", shell], check=True
    )
    return pid


def wait_for(tmux: list[str], seen: Callable[[list[str]], bool], seconds: float = 120) -> list[str]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        lines = screen(tmux, "-J")
        if seen(lines):
            return lines
        time.sleep(0.1)
    pytest.fail(f"not seen within {seconds} s; the screen was:\n{chr(10).join(lines)}")


def test_every_stdout_line_stays_on_screen_above_the_bar(tmp_path: Path, tmux: list[str]) -> None:
    expected = run_cli(tmp_path, *RUN).stdout.splitlines()  # piped: the lines themselves
    assert expected[0].startswith("Model: ")
    assert expected[-1].startswith("Saved: ")
    env = user_env(tmp_path, TERM="xterm-256color", COLUMNS="250")
    exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items() if k.isidentifier())
    program = shlex.join([sys.executable, "-m", "mathrl", *RUN])
    shell = (
        f"cd {shlex.quote(str(tmp_path))} && env -i {exports} {program}; echo EXIT=$?; sleep 600"
    )
    subprocess.run(
        [*tmux, "new-session", "-d", "-s", "run", "-x", "250", "-y", "50", shell], check=True
    )
    during: list[list[str]] = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        lines = screen(tmux)
        if any(line.startswith("EXIT=") for line in lines):
            break
        if any(line.startswith("samples") for line in lines):
            during.append(lines)
        time.sleep(0.2)
    else:
        pytest.fail(f"the run did not end within 120 s; the screen was:\n{chr(10).join(lines)}")

    # At the end: every stdout line, in order, then the exit status; no bar left over.
    shown = [line for line in lines if line and not line.startswith("mathrl: ")]
    assert saved_names("\n".join(shown)) == saved_names("\n".join([*expected, "EXIT=0"]))
    assert not any(line.startswith(("step ", "samples", "setting up")) for line in lines)

    # While it ran: the bar sat below every line printed so far.
    assert during, "the live bar was never seen"
    for snapshot in during:
        text = [line for line in snapshot if line]
        bar = [i for i, line in enumerate(text) if line.startswith(("step ", "samples"))]
        printed = [i for i, line in enumerate(text) if line in expected]
        assert bar, "\n".join(text)
        assert printed, "\n".join(text)
        assert max(printed) < min(bar), "\n".join(text)
        assert text[bar[0]].startswith("step ")
        assert "eta" in text[bar[0]]


BAR_ROWS = ("step ", "samples", "setting up")
NOTICE = {
    "one Ctrl-C": "mathrl: stopping after the current step (Ctrl-C again to abort)",
    "two Ctrl-Cs": "mathrl: stopping after the current step (Ctrl-C again to abort)",
    "SIGTERM": "mathrl: stopping after the current step (send it again to abort)",
}


@pytest.mark.parametrize("width", [120, 60])
@pytest.mark.parametrize("case", ["one Ctrl-C", "two Ctrl-Cs", "SIGTERM"])
def test_a_stopped_run_leaves_a_clean_screen_and_the_cursor_shown(
    tmp_path: Path, tmux: list[str], case: str, width: int
) -> None:
    expected = run_cli(tmp_path, *RUN).stdout.splitlines()  # piped: the lines themselves
    pid = start_in_tmux(tmux, tmp_path, [*RUN, "--log-dir", "X"], width)
    wait_for(tmux, lambda lines: "Step 2: accuracy" in "\n".join(lines))
    if case == "SIGTERM":
        os.kill(int(pid.read_text()), signal.SIGTERM)
    else:
        subprocess.run([*tmux, "send-keys", "-t", "run", "C-c"], check=True)
        if case == "two Ctrl-Cs":
            time.sleep(0.05)
            subprocess.run([*tmux, "send-keys", "-t", "run", "C-c"], check=True)
    lines = wait_for(tmux, lambda lines: any(line.startswith("EXIT=") for line in lines))
    cursor = subprocess.run(
        [*tmux, "display", "-p", "-t", "run", "#{cursor_flag}"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip

    text = [line.replace("^C", "") for line in lines if line]  # the terminal echoes a Ctrl-C
    assert cursor == "1", "the cursor was left hidden"
    assert not [line for line in text if line.startswith(BAR_ROWS)], "\n".join(text)
    assert text[-1] == ("EXIT=143" if case == "SIGTERM" else "EXIT=130")
    assert NOTICE[case] in text, "\n".join(text)
    # Every stdout line, in order: those of an unstopped run up to the stop, then `Saved:`.
    printed = [line for line in text[:-1] if not line.startswith("mathrl: ")]
    if case == "two Ctrl-Cs":  # aborted: no `Saved:` line, and what can be resumed
        assert printed == expected[: len(printed)], "\n".join(text)
        assert text[-3:-1] == [
            "mathrl: aborted",
            "mathrl: the last saved state is step 0; resume with: python -m mathrl --resume X",
        ]
    else:
        assert printed[:-1] == expected[: len(printed) - 1], "\n".join(text)
        assert printed[-1].startswith("Saved: "), "\n".join(text)
        stopped = printed[-2].split(":")[0]
        assert (
            text[-2] == f"mathrl: stopped after {stopped.lower()}; resume with: python -m "
            "mathrl --resume X"
        )
    assert len(printed) >= 4  # Model, Eval step 0, Step 1, Step 2 at least


@pytest.mark.parametrize("width", [120, 60])
def test_ctrl_c_during_set_up_leaves_a_clean_screen_and_says_what_happened(
    tmp_path: Path, tmux: list[str], width: int
) -> None:
    service = FakeMintHTTP(math_references(), tmp_path / "mint")
    service.outage("silent", 600)  # it takes every request and answers none
    try:
        start_in_tmux(tmux, tmp_path, ["--steps", "2"], width,
                      MINT_API_KEY="sk-test", MINT_BASE_URL=service.url)  # fmt: skip
        wait_for(tmux, lambda lines: any(line.startswith("setting up") for line in lines))
        wait_for(tmux, lambda _: bool(service.served), 60)  # it is waiting on the service now
        subprocess.run([*tmux, "send-keys", "-t", "run", "C-c"], check=True)
        lines = wait_for(tmux, lambda lines: any(line.startswith("EXIT=") for line in lines), 30)
    finally:
        service.close()
    cursor = subprocess.run(
        [*tmux, "display", "-p", "-t", "run", "#{cursor_flag}"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    text = [line.replace("^C", "") for line in lines if line]
    assert cursor == "1"
    assert text == ["mathrl: stopped during set-up; nothing was trained", "EXIT=130"]


def test_at_60_columns_the_bar_keeps_the_phase_and_the_accuracy(
    tmp_path: Path, tmux: list[str]
) -> None:
    start_in_tmux(tmux, tmp_path, [*RUN, "--log-dir", "X"], 60)
    seen = wait_for(
        tmux,
        lambda lines: any(line.startswith("samples") and "accuracy" in line for line in lines),
    )
    rows = [line for line in seen if line.startswith(("step ", "samples"))]
    assert len(rows) == 2, "\n".join(seen)
    steps, samples = rows
    # The least useful fields went (elapsed time, reward, counts); nothing is cut short.
    clock = r"eta [-\d]:[-\d]{2}:[-\d]{2}"  # -:--:-- until it can tell
    assert re.fullmatch(rf"step +\d+/12 [━╸╺]{{24}} {clock} (sampling|training|evaluating)",
                        steps), steps  # fmt: skip
    assert re.fullmatch(r"samples {4}[━╸╺]{24} step \d+: accuracy \d+\.\d%", samples), samples
    assert all(len(row) < 60 and "…" not in row for row in rows)
    lines = wait_for(tmux, lambda lines: any(line.startswith("EXIT=") for line in lines))
    assert not [line for line in lines if line.startswith(BAR_ROWS) or "━" in line]


def test_a_terminal_made_narrower_mid_run_leaves_no_stale_bar(
    tmp_path: Path, tmux: list[str]
) -> None:
    expected = run_cli(tmp_path, *RUN, "--log-dir", "piped").stdout.splitlines()
    start_in_tmux(tmux, tmp_path, [*RUN, "--log-dir", "X"], 120)
    wait_for(tmux, lambda lines: any(line.startswith("samples") for line in lines))
    wide = [line for line in screen(tmux) if line.startswith(("step ", "samples"))]
    assert max(map(len, wide)) > 60  # rows the narrower terminal wraps onto two
    subprocess.run([*tmux, "resize-window", "-t", "run", "-x", "60"], check=True)
    wait_for(tmux, lambda lines: any(line.startswith("EXIT=") for line in lines))
    # The whole history (`-S -`): a narrowed tmux keeps its bottom row in place, so each row
    # the narrowing wraps onto two pushes the screen's top line into the scrollback, as other
    # terminals do. How many depends on how wide the bar's rows were at that moment (a second
    # one, the sampling row, is wide once a step's line is in it): the lines are all there
    # for a person who scrolls up, and so must every stale bar be looked for there.
    text = [line for line in screen(tmux, "-J", "-S", "-") if line]
    assert not [line for line in text if line.startswith(BAR_ROWS) or "━" in line], "\n".join(text)
    printed = [line for line in text if not line.startswith(("mathrl: ", "EXIT="))]
    assert saved_names("\n".join(printed)) == saved_names("\n".join(expected))
