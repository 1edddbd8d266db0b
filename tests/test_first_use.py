"""What a new user meets first: a mistyped path, a lost checkpoint, a setting given twice.

Each test makes the mistake the way a person following the README would, on
the fake backend, and holds the command line to one clear line that says
what is wrong and what would work, with the exit code the README gives.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from cli_process import run_main
from mathrl.cli.run_folder import no_such_weights

FAKE = ("--backend", "fake")


@pytest.fixture
def two_runs(tmp_path: Path) -> Path:
    """A folder with two one-step runs in runs/: seed0 and demo."""
    for name in ("seed0", "demo"):
        done = run_main(tmp_path, *FAKE, "--steps", "1", "--log-dir", f"runs/{name}")
        assert done.returncode == 0, done.stderr
    return tmp_path


@pytest.mark.parametrize("command", ["sample", "eval"])
def test_a_mistyped_model_path_is_named_with_the_run_folders_nearby_and_needs_no_key(
    two_runs: Path, command: str
) -> None:
    done = run_main(two_runs, command, "--model-path", "runs/seed00")
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        "mathrl: error: --model-path 'runs/seed00': no such run folder or checkpoint file; did "
        "you mean runs/seed0? (run folders: runs/seed0, runs/demo)\n"
    )
    assert "MINT_API_KEY" not in done.stderr  # only a tinker:// path goes to the service


def test_a_missing_path_with_no_run_folder_nearby_says_so(tmp_path: Path) -> None:
    assert no_such_weights("runs/x", tmp_path / "runs") == (
        f"--model-path 'runs/x': no such run folder or checkpoint file; no run folder is beside "
        f"it or in {tmp_path / 'runs'}/"
    )
    assert no_such_weights("tinker://run/sampler_weights/x") is None  # the service's to know
    assert no_such_weights(str(tmp_path)) is None  # there: another check says what it is


def test_a_missing_path_far_from_any_run_folder_lists_them_without_a_guess(
    tmp_path: Path,
) -> None:
    runs = tmp_path / "runs"
    for n in range(7):
        (runs / f"run{n}").mkdir(parents=True)
        (runs / f"run{n}" / "config.json").write_text("{}")
    said = no_such_weights("elsewhere/zzz", runs)
    assert said is not None
    assert "did you mean" not in said
    assert said.endswith(f"(run folders: {', '.join(str(runs / f'run{n}') for n in range(5))} "
                         "and 2 more)")  # fmt: skip
