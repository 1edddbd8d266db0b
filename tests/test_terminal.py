"""What a person sees in a real terminal: a run in tmux, its screen read with capture-pane.

stdout and stderr are both the screen here, as in most terminals: the seed's
lines (stdout) must all stay on screen, with the live bar (stderr) drawn
below them while the run goes, and gone at the end.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from cli_process import run_cli, user_env

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


def screen(tmux: list[str]) -> list[str]:
    shown = subprocess.run(
        [*tmux, "capture-pane", "-p", "-t", "run"], capture_output=True, text=True, check=True
    )
    return [line.rstrip() for line in shown.stdout.splitlines()]


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
    assert shown == [*expected, "EXIT=0"]
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
