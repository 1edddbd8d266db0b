"""Every command the command line suggests runs as printed.

A message that ends in a command (`resume with: ...`, `check the task with: ...`,
`continue that run with ...`, `see ... --help`) is copied by a person into
their shell, so each is made to appear here the way a user meets it, and the
command it prints is run as it stands (parsed as a shell would). The places
that print one, and where each is run:

- `train.resume_command`: after a stop (`test_a_stopped_runs_resume_command_runs`,
  SIGINT once and twice), a failed run with or without a saved state
  (`test_a_failed_tasks_check_and_resume_commands_run_as_printed`,
  `test_a_run_that_saved_no_state_starts_over_as_printed`), a W&B mirror that
  cannot start on resume (`test_wandb.py`), and the `--from-step` command of a
  state that cannot be loaded (`mathrl.cli.resume`, here and `test_first_use.py`);
- `loader.check_command`: a task that fails in a run and in `sample`;
- `run_folder.check_new`: a `--log-dir` that holds a run already;
- `Parser.error`: `see 'python -m mathrl COMMAND --help'`;
- `extras.install_command` and `as_installed`: the pip commands for an extra,
  which need the network to run, so each is checked against the project's
  extras and this checkout instead.
"""

from __future__ import annotations

import re
import shlex
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

import mathrl.tasks.math.task
from cli_process import run_main, user_env
from mathrl.cli.extras import as_installed, install_command

ROOT = Path(__file__).resolve().parents[1]
FLAKY_TASK = '''
import os
import random


class Flaky:
    """Subtraction, whose reward raises at step `fail_at` while a file named `broken` exists."""

    name = "flaky"

    def __init__(self, fail_at: int = 0) -> None:
        self.fail_at = fail_at
        self.options = {"fail_at": fail_at} if fail_at else {}

    def build_dataset(self, seed, step, size):
        rng = random.Random(f"flaky/{seed}/{step}")
        return [(rng.randrange(100), rng.randrange(100), step) for _ in range(size)]

    def heldout_dataset(self, seed, size):
        return [(a, 3, 0) for a in range(size)]

    def make_prompt(self, problem):
        return f"Q: What is 9 - 12?\\nA: -3\\n\\nQ: What is {problem[0]} - {problem[1]}?\\nA:"

    def compute_reward(self, completion, problem):
        if problem[2] == self.fail_at and os.path.exists("broken"):
            raise RuntimeError("broken")
        if completion.ended == "length":
            return 0.0
        return 1.0 if completion.strip() == str(problem[0] - problem[1]) else 0.0

    def reference_completion(self, problem):
        return f" {problem[0] - problem[1]}"

    def evaluate(self, rewards):
        return sum(r == 1.0 for r in rewards) / len(rewards) if rewards else 0.0
'''


def suggested(line: str, after: str = " with: ") -> list[str]:
    """The `python -m mathrl` command at the end of `line`, as argv for `main`."""
    command = shlex.split(line.rsplit(after, 1)[1].strip().strip("`"))
    assert command[:3] == ["python", "-m", "mathrl"], line
    return command[3:]


def line_with(stderr: str, words: str) -> str:
    (line,) = [line for line in stderr.splitlines() if words in line]
    return line


@pytest.fixture
def flaky(tmp_path: Path) -> Path:
    """A folder holding tasks/flaky.py, broken (its reward raises at step `fail_at`)."""
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "flaky.py").write_text(FLAKY_TASK)
    (tmp_path / "broken").write_text("")
    return tmp_path


def test_a_failed_tasks_check_and_resume_commands_run_as_printed(flaky: Path) -> None:
    failed = run_main(flaky, "--backend", "fake", "--steps", "3", "--log-dir", "R",
                      "--adapter", "tasks/flaky.py:Flaky", "--task-arg", "fail_at=2")  # fmt: skip
    assert failed.returncode == 1
    check = line_with(failed.stderr, "check the task with: ")
    # The file's path and the option, as given: `flaky:Flaky` would not import from here.
    assert check.endswith(
        "python -m mathrl check-adapter tasks/flaky.py:Flaky --task-arg fail_at=2"
    )
    resume = line_with(failed.stderr, "resume with: ")
    assert (
        resume == "mathrl: the last saved state is step 1; resume with: python -m mathrl --resume R"
    )
    (flaky / "broken").unlink()  # the task fixed
    checked = run_main(flaky, *suggested(check))
    assert checked.returncode == 0, checked.stderr
    assert checked.stdout.startswith("check-adapter: task 'flaky' (flaky:Flaky) passed ")
    resumed = run_main(flaky, *suggested(resume))
    assert resumed.returncode == 0, resumed.stderr
    assert [line.split(":")[0] for line in resumed.stdout.splitlines()] == [
        "Model", "Step 2", "Step 3", "Saved"
    ]  # fmt: skip


def test_a_task_that_fails_in_sample_gives_a_check_command_that_runs(flaky: Path) -> None:
    trained = run_main(flaky, "--backend", "fake", "--steps", "1", "--log-dir", "R",
                       "--adapter", "tasks/flaky.py:Flaky")  # fmt: skip
    assert trained.returncode == 0, trained.stderr
    # Held-out problems are step 0's: a task that fails there fails `sample`.
    done = run_main(flaky, "sample", "--model-path", "R", "--adapter", "tasks/flaky.py:Flaky",
                    "--task-arg", "fail_at=0", "--problems", "2")  # fmt: skip
    assert done.returncode == 1
    check = line_with(done.stderr, "check the task with: ")
    # The run folder records the task's file absolute (so the command runs from anywhere).
    assert check.endswith(f"check-adapter {flaky}/tasks/flaky.py:Flaky --task-arg fail_at=0")
    (flaky / "broken").unlink()
    checked = run_main(flaky, *suggested(check))
    assert checked.returncode == 0, checked.stderr


def test_a_run_that_saved_no_state_starts_over_as_printed(tmp_path: Path) -> None:
    # Half the fake's calls fail, and nothing is retried: at this seed, step 0's saves fail.
    failed = run_main(tmp_path, "--backend", "fake", "--steps", "2", "--log-dir", "X",
                      "--fake-fault-rate", "0.5", "--retries", "0")  # fmt: skip
    assert failed.returncode == 1
    line = line_with(failed.stderr, "start the run over with: ")
    # The fault rate carries over, the retry limit does not: retried, the calls pass.
    again = run_main(tmp_path, *suggested(line), MINT_RL_RETRY_DELAY="0.01")
    assert again.returncode == 0, again.stderr
    assert "mathrl: starting X over: it saved no training state" in again.stderr


def test_a_log_dir_that_holds_a_run_names_the_command_that_continues_it(tmp_path: Path) -> None:
    assert run_main(tmp_path, "--backend", "fake", "--steps", "1", "--log-dir", "X").returncode == 0
    again = run_main(tmp_path, "--backend", "fake", "--steps", "1", "--log-dir", "X")
    assert again.returncode == 2
    continued = run_main(tmp_path, *suggested(again.stderr, "continue that run with "))
    assert continued.returncode == 0, continued.stderr
    assert "already finished all 1 steps" in continued.stderr


def test_a_state_that_cannot_be_loaded_gives_a_from_step_command_that_runs(tmp_path: Path) -> None:
    run_main(tmp_path, "--backend", "fake", "--steps", "2", "--save-every", "1", "--log-dir", "X")
    next((tmp_path / "X" / "checkpoints").glob("*state0000002.json")).unlink()
    done = run_main(tmp_path, "--resume", "X")
    assert done.returncode == 2
    again = run_main(tmp_path, *suggested(done.stderr))
    assert again.returncode == 0, again.stderr
    assert "resuming X from step 1 (of 2)" in again.stderr


@pytest.mark.parametrize("command", ["", "sample", "eval", "check-adapter", "plot", "tasks"])
def test_the_help_a_usage_error_points_at_runs(tmp_path: Path, command: str) -> None:
    done = run_main(tmp_path, *filter(None, [command]), "--no-such-flag")
    assert done.returncode == 2
    shown = re.search(r"\(see `(python -m mathrl[^`]*)`\)", done.stderr)
    assert shown is not None, done.stderr
    helped = run_main(tmp_path, *shlex.split(shown[1])[3:])
    assert helped.returncode == 0, helped.stderr
    assert helped.stdout.startswith(f"usage: python -m mathrl {command}".rstrip())


@pytest.mark.parametrize("presses", [1, pytest.param(2, marks=pytest.mark.slow)])
def test_a_stopped_runs_resume_command_runs(tmp_path: Path, presses: int) -> None:
    args = ["--backend", "fake", "--steps", "3", "--fake-latency", "0.1", "--log-dir", "X"]
    child = subprocess.Popen(
        [sys.executable, "-m", "mathrl", *args], cwd=tmp_path, env=user_env(tmp_path),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert child.stdout is not None
    while not child.stdout.readline().startswith("Step 1:"):
        pass
    for _ in range(presses):
        child.send_signal(signal.SIGINT)
        time.sleep(0.05)
    _, err = child.communicate(timeout=60)
    assert child.returncode == 130, err
    resume = line_with(err, "resume with: ")
    again = run_main(tmp_path, *suggested(resume))
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines()[-1].startswith("Saved: ")


def test_each_install_command_names_an_extra_of_this_checkout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    named = set()
    for source in (ROOT / "src" / "mathrl").rglob("*.py"):
        named |= set(re.findall(r"pip install '?mathrl\[([a-z-]+)\]", source.read_text()))
    assert {"math", "datasets", "reasoning-gym"} <= named
    for extra in sorted(named | {"plot", "wandb"}):
        assert extra in extras, extra
        command = install_command(extra)
        # pip takes this checkout from here by its folder (or `.`), never an index's 'mathrl'.
        assert command in (f"pip install '{ROOT}[{extra}]'", f"pip install '.[{extra}]'")
        assert as_installed(f"needs it: pip install 'mathrl[{extra}]' (or not)") == (
            f"needs it: {command} (or not)"
        )
    # As a user meets one: the math task's grader, with math-verify missing.
    monkeypatch.setattr(mathrl.tasks.math.task, "math_verify_version", lambda: None)
    done = run_main(tmp_path, "--backend", "fake", "--adapter", "math")
    assert done.returncode == 2
    monkeypatch.chdir(tmp_path)  # where that command ran: the checkout is not `.` there
    assert f"not installed: {install_command('math')} (or grader=exact" in done.stderr
