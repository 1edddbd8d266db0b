"""Long runs: faults, resume, signals, a closed stdout, bad folders; no traceback anywhere."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cli_process import run_main, saved_names, user_env
from mathrl.cli.run_folder import RunFolder, read_run
from mathrl.config import TrainConfig
from mathrl.loop import run_grpo_async
from mathrl.report import Checkpoint, Observer, RunResult, StepMetrics
from mathrl.rollout import run_problems
from mathrl.tasks.addition import MathAdapter
from mathrl_fakes import FakeBackend
from test_cli_mint import SilentServer

# -- faults -----------------------------------------------------------------------------


@pytest.mark.slow
def test_a_run_with_a_fifth_of_its_calls_failing_prints_what_a_clean_run_prints(
    tmp_path: Path,
) -> None:
    args = ("--backend", "fake", "--steps", "20", "--retry-delay", "0")
    clean = run_main(tmp_path, *args, "--seed", "1")
    faulty = run_main(tmp_path, *args, "--seed", "1", "--fake-fault-rate", "0.2")
    assert faulty.returncode == 0, faulty.stderr
    assert saved_names(faulty.stdout) == saved_names(clean.stdout)  # in another run folder
    retries = [line for line in faulty.stderr.splitlines() if " retry " in line]
    assert len(retries) > 10
    assert any("forward_backward/optim_step" in line for line in retries)
    # A round's failed sample requests make one line between them.
    assert any(re.search(r"retry 1 of sample \(\d+ requests\)", line) for line in retries)


@pytest.mark.slow  # two more 20-step runs; the fast suite has the retry window's own tests
def test_a_run_whose_sample_request_fails_four_times_running_goes_on(tmp_path: Path) -> None:
    # At seed 0 one sample request fails four times running: the retry window carries it
    # (a count cap of 3, the old default, ended that run).
    args = ("--backend", "fake", "--steps", "20", "--retry-delay", "0")
    clean0 = run_main(tmp_path, *args)
    faulty0 = run_main(tmp_path, *args, "--fake-fault-rate", "0.2")
    assert (faulty0.returncode, saved_names(faulty0.stdout)) == (0, saved_names(clean0.stdout))


@pytest.mark.slow
def test_a_run_whose_every_call_fails_ends_after_the_retry_window(tmp_path: Path) -> None:
    started = time.monotonic()
    done = run_main(tmp_path, "--backend", "fake", "--fake-fault-rate", "1",
                    "--retry-delay", "0.05", "--retry-window", "2", "--log-dir", "X")  # fmt: skip
    # The run stops once the next pause would start past the window, so it may stop early.
    # Pause n is drawn from [c/2, c], c = 0.05 * 2**(n-1): pauses 1-5 take at least
    # 0.025 + 0.05 + 0.1 + 0.2 + 0.4 = 0.775 s, and only then can the sixth (up to 1.6 s)
    # cross the 2 s window (after four, at most 0.75 + 0.8 = 1.55 s < 2 s). The upper bound is
    # generous: room for the window and a loaded machine.
    assert 0.775 < time.monotonic() - started < 30
    assert done.returncode == 1
    lines = done.stderr.splitlines()
    retried = [line.split(" in ")[0] for line in lines if " retry " in line]
    # No count cap: retried with backoff (0.05 s, doubling) until the window is spent.
    assert "mathrl: retry 1 of save_weights_for_sampler" in retried
    assert "mathrl: retry 3 of save_weights_for_sampler" in retried
    # How long it kept failing is rounded wall time: the last retry starts within the window
    # and may end past it on a loaded machine.
    assert re.fullmatch(
        r"mathrl: error: save_weights_for_sampler kept failing for \d+ s \(\d+ failures\), and "
        r"the 2 s retry window is spent: save_weights_for_sampler: injected transient failure "
        r"(\(after applying\) )?\(MINT_RL_RETRY_WINDOW, --retry-window\)",
        lines[-2],
    ), lines[-2]
    assert lines[-1] == (
        "mathrl: no training state was saved; start the run over with: python -m mathrl --resume X"
    )
    assert "Traceback" not in done.stderr


def test_a_count_cap_still_ends_a_run_sooner(tmp_path: Path) -> None:
    done = run_main(tmp_path, "--backend", "fake", "--fake-fault-rate", "1",
                    "--retry-delay", "0.01", "--retries", "2")  # fmt: skip
    assert done.returncode == 1
    assert done.stderr.splitlines()[-2] == (
        "mathrl: error: save_weights_for_sampler failed 3 times in a row (2 retries): "
        "save_weights_for_sampler: injected transient failure (MINT_RL_RETRIES, --retries)"
    )


# -- stopping and resuming through the API -----------------------------------------------


class StopAfter(Observer):
    """Asks the run to stop after `step`, and records its checkpoints in `folder`."""

    def __init__(self, step: int, stop: asyncio.Event, folder: RunFolder) -> None:
        self.step, self.stop, self.folder = step, stop, folder

    def on_step(self, metrics: StepMetrics) -> None:
        if metrics.step == self.step:
            self.stop.set()

    def on_checkpoint(self, checkpoint: Checkpoint) -> None:
        self.folder.on_checkpoint(checkpoint)


def shown(result: RunResult) -> list[tuple[int, float, int, float | None]]:
    return [(m.step, m.accuracy, m.datums, m.loss) for m in result.steps]


@pytest.mark.parametrize(
    ("off_policy", "stop_after"), [(0, 5), pytest.param(0, 7, marks=pytest.mark.slow), (1, 7)]
)
def test_a_stopped_run_resumes_exactly_where_it_stopped(
    tmp_path: Path, off_policy: int, stop_after: int
) -> None:
    config = TrainConfig(steps=12, max_steps_off_policy=off_policy, save_every=5)

    def backend(name: str, first_step: int = 1) -> FakeBackend:
        return FakeBackend.for_run(
            MathAdapter(),
            run_problems(MathAdapter(), config, first_step),
            checkpoint_dir=tmp_path / name,
        )

    async def whole() -> RunResult:
        return await run_grpo_async(backend("whole"), MathAdapter(), config)

    folder = RunFolder(tmp_path / "run")
    folder.path.mkdir()
    folder.write_config({"settings": {}})

    async def first_part() -> RunResult:
        stop = asyncio.Event()
        observer = StopAfter(stop_after, stop, folder)
        return await run_grpo_async(backend("split"), MathAdapter(), config, observer, stop=stop)

    uninterrupted = asyncio.run(whole())
    stopped = asyncio.run(first_part())
    assert (stopped.stopped, stopped.last_step) == (True, stop_after)
    point = read_run(folder.path).resume_point()
    assert point is not None
    assert point.step == stop_after  # between saves (7), the state was saved on the way out

    async def rest() -> RunResult:
        resumed = backend("split", first_step=point.step + 1)
        return await run_grpo_async(resumed, MathAdapter(), config, resume=point)

    resumed = asyncio.run(rest())
    assert [m.step for m in resumed.steps] == list(range(stop_after + 1, 13))
    assert shown(stopped) + shown(resumed) == shown(uninterrupted)
    assert Path(resumed.saved_path).name == Path(uninterrupted.saved_path).name


class Events(Observer):
    def __init__(self) -> None:
        self.events: list[str] = []

    def on_step(self, metrics: StepMetrics) -> None:
        self.events.append(f"step {metrics.step}")

    def on_checkpoint(self, checkpoint: Checkpoint) -> None:
        self.events.append(f"{checkpoint.kind} {checkpoint.step}")


def test_a_state_is_recorded_only_after_the_steps_it_holds(tmp_path: Path) -> None:
    # A crash between the two must lose the checkpoint record, never the step's.
    config = TrainConfig(steps=4, save_every=2)
    events = Events()
    backend = FakeBackend.for_run(
        MathAdapter(), run_problems(MathAdapter(), config), checkpoint_dir=tmp_path
    )
    asyncio.run(run_grpo_async(backend, MathAdapter(), config, events))
    for step in (2, 4):
        assert events.events.index(f"step {step}") < events.events.index(f"state {step}")
    assert events.events[:2] == ["sampler 0", "state 0"]


# -- stopping and resuming from the command line --------------------------------------------


def start(tmp_path: Path, *args: str, **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "mathrl", *args],
        cwd=tmp_path,
        env=user_env(tmp_path, **env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def read_until(child: subprocess.Popen[str], prefix: str) -> list[str]:
    assert child.stdout is not None
    lines: list[str] = []
    while True:
        line = child.stdout.readline()
        assert line, f"ended before {prefix!r}: {lines}"
        lines.append(line.rstrip("\n"))
        if line.startswith(prefix):
            return lines


@pytest.mark.slow  # real processes, 4 s each; the fast suite keeps the second Ctrl-C one
@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_stops_the_run_cleanly_and_it_resumes_as_if_never_stopped(
    tmp_path: Path, signum: int, code: int
) -> None:
    args = ("--backend", "fake", "--steps", "12")
    whole = run_main(tmp_path, *args)
    with start(tmp_path, *args, "--log-dir", "X", "--fake-latency", "0.2") as child:
        lines = read_until(child, "Step 5:")
        child.send_signal(signum)
        out, err = child.communicate(timeout=60)
    assert child.returncode == code, err
    lines += out.splitlines()
    assert lines[-1].startswith("Saved: ")
    assert "Traceback" not in err
    assert err.splitlines()[-1].endswith("resume with: python -m mathrl --resume X")
    stopped_at = int(lines[-2].split(":")[0].removeprefix("Step "))
    assert stopped_at in (5, 6)  # step 6 finishes if its training was already on its way

    resumed = run_main(tmp_path, "--resume", "X")
    assert resumed.returncode == 0, resumed.stderr
    again = saved_names(resumed.stdout).splitlines()
    expected = saved_names(whole.stdout).splitlines()
    assert again[0] == expected[0]  # the Model line
    assert lines[1:-1] + again[1:] == expected[1:]
    assert again[1].startswith(f"Step {stopped_at + 1}:")
    # The run folder holds each step once, as if it had never stopped.
    steps = [r["step"] for r in read_run(tmp_path / "X").steps]
    assert steps == list(range(1, 13))


def test_a_second_ctrl_c_aborts_at_once(tmp_path: Path) -> None:
    with start(tmp_path, "--backend", "fake", "--steps", "50", "--fake-latency", "1") as child:
        read_until(child, "Model:")
        child.send_signal(signal.SIGINT)
        time.sleep(0.2)
        started = time.monotonic()
        child.send_signal(signal.SIGINT)
        _, err = child.communicate(timeout=60)
    assert child.returncode == 130
    assert time.monotonic() - started < 0.9  # before the step in flight (1 s a call) could end
    lines = err.splitlines()
    assert "mathrl: stopping after the current step (Ctrl-C again to abort)" in lines
    # So early, not even step 0's state had been saved: nothing to resume from.
    assert lines[-1] == "mathrl: aborted"


@pytest.mark.slow
def test_a_second_ctrl_c_after_a_saved_state_says_how_to_resume(tmp_path: Path) -> None:
    with start(tmp_path, "--backend", "fake", "--steps", "50", "--fake-latency", "0.5") as child:
        read_until(child, "Step 1:")  # step 0's state is saved by then
        child.send_signal(signal.SIGINT)
        time.sleep(0.2)
        child.send_signal(signal.SIGINT)
        _, err = child.communicate(timeout=60)
    assert child.returncode == 130
    lines = err.splitlines()
    folder = lines[0].split("run folder: ", 1)[1].split(" ")[0]
    assert lines[-2] == "mathrl: aborted"
    assert lines[-1] == (
        f"mathrl: the last saved state is step 0; resume with: python -m mathrl --resume {folder}"
    )


@pytest.mark.slow
def test_sigterm_is_named_as_itself_and_ctrl_c_during_set_up_ends_at_once(tmp_path: Path) -> None:
    with start(tmp_path, "--backend", "fake", "--steps", "50", "--fake-latency", "1") as child:
        read_until(child, "Model:")
        child.send_signal(signal.SIGTERM)
        _, err = child.communicate(timeout=60)
    assert child.returncode == 143
    assert "mathrl: stopping after the current step (send it again to abort)" in err.splitlines()
    # A service that never answers at set-up: Ctrl-C ends the wait at once, with 130.
    server = SilentServer()
    try:
        with start(tmp_path, MINT_API_KEY="sk-test", MINT_BASE_URL=server.url) as child:
            time.sleep(2.5)  # imports done, well into the 60-second connect deadline
            started = time.monotonic()
            child.send_signal(signal.SIGINT)
            _, err = child.communicate(timeout=60)
    finally:
        server.close()
    assert child.returncode == 130
    assert time.monotonic() - started < 5
    assert "mathrl: stopped during set-up; nothing was trained" in err.splitlines()


def test_resume_refuses_what_would_change_training(tmp_path: Path) -> None:
    run_main(tmp_path, "--backend", "fake", "--steps", "3", "--log-dir", "X")
    for args, message in [
        (
            ("--steps", "2"),
            "--steps with --resume must be at least the run's 3 (got 2): it "
            "extends a run, and cannot shorten one",
        ),
        (
            ("--backend", "mint"),
            "--backend mint cannot be given with --resume: X/config.json records --backend "
            "fake, and a resumed run trains as it started; leave it out, or start a new run",
        ),
        (
            ("--lr", "1e-3", "--seed", "2", "--batch", "10"),  # 10: the run's own batch
            "--lr 0.001, --seed 2 cannot be given with --resume: X/config.json records --lr "
            "0.0001, --seed 0, and a resumed run trains as it started; leave them out, or start "
            "a new run",
        ),
        (
            ("--max-tokens", "32"),
            "--max-tokens 32 cannot be given with --resume: X/config.json records --max-tokens "
            "unset (the task's), and a resumed run trains as it started; leave it out, or start "
            "a new run",
        ),
    ]:
        done = run_main(tmp_path, "--resume", "X", *args)
        assert (done.returncode, done.stderr) == (2, f"mathrl: error: {message}\n")
    # What the record says already is no change: the run goes on.
    same = (
        "--backend",
        "fake",
        "--adapter",
        "addition",
        "--lr",
        "0.0001",
        "--mask-truncated",
        "no",
    )
    extended = run_main(tmp_path, "--resume", "X", "--steps", "4", *same)
    assert extended.returncode == 0, extended.stderr
    assert extended.stdout.splitlines()[1].startswith("Step 4: ")
    nowhere = run_main(tmp_path, "--resume", "nowhere")
    assert nowhere.returncode == 2
    assert "--resume: nowhere is not a run folder" in nowhere.stderr
    finished = run_main(tmp_path, "--resume", "X", "--retries", "5")
    assert finished.returncode == 0
    assert finished.stdout.startswith("Saved: ")
    assert "already finished all 4 steps" in finished.stderr


def test_resume_with_more_steps_extends_a_finished_run_as_if_it_had_asked_for_them(
    tmp_path: Path,
) -> None:
    # 3 steps, then 3 more: the same lines as one 6-step run, the Model line aside.
    whole = run_main(tmp_path, "--backend", "fake", "--steps", "6", "--log-dir", "W")
    run_main(tmp_path, "--backend", "fake", "--steps", "3", "--log-dir", "X")
    more = run_main(tmp_path, "--resume", "X", "--steps", "6")
    assert more.returncode == 0, more.stderr
    assert "mathrl: resuming X from step 3 (of 6)" in more.stderr
    first = run_main(tmp_path, "--resume", "X")  # finished now, at its new length
    assert "already finished all 6 steps" in first.stderr
    steps = [line for line in whole.stdout.splitlines() if line.startswith("Step ")]
    assert [line for line in more.stdout.splitlines() if line.startswith("Step ")] == steps[3:]
    assert [r["step"] for r in read_run(tmp_path / "X").steps] == [1, 2, 3, 4, 5, 6]


@pytest.mark.slow
def test_a_closed_stdout_ends_the_run_quietly_and_resumably(tmp_path: Path) -> None:
    with start(tmp_path, "--backend", "fake", "--steps", "40", "--fake-latency", "0.05",
               "--log-dir", "X") as child:  # fmt: skip
        read_until(child, "Step 2:")
        assert child.stdout is not None
        assert child.stderr is not None
        child.stdout.close()
        err = child.stderr.read()
        child.wait(timeout=60)
    assert child.returncode == 141
    assert "Traceback" not in err
    assert "BrokenPipe" not in err
    assert err.splitlines()[-1].endswith("resume with: python -m mathrl --resume X")
    point = read_run(tmp_path / "X").resume_point()
    assert point is not None
    assert point.step >= 2


def test_stdout_that_cannot_be_written_ends_the_run_without_a_traceback(tmp_path: Path) -> None:
    with open("/dev/full", "w") as full:  # every write: "No space left on device"
        done = subprocess.run(
            [sys.executable, "-m", "mathrl", "--backend", "fake", "--steps", "3"],
            stdout=full, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
            env=user_env(tmp_path), timeout=120, check=False,
        )  # fmt: skip
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert done.stderr.splitlines()[-1] == (
        "mathrl: error: stdout could not be written (No space left on device)"
    )
    run_main(tmp_path, "--backend", "fake", "--steps", "1", "--log-dir", "X")
    with start(tmp_path, "--resume", "X") as child:  # a finished run: it only says where
        assert child.stdout is not None
        assert child.stderr is not None
        child.stdout.close()  # gone before it prints
        err = child.stderr.read()
        child.wait(timeout=60)
    assert child.returncode in (0, 141)  # 0 if it printed before the pipe went away
    assert "Traceback" not in err


# -- folders and files that are not what they should be ------------------------------------


def test_a_checkpoint_folder_that_cannot_be_written_is_one_line_before_anything(
    tmp_path: Path,
) -> None:
    (tmp_path / "mathrl-fake").write_text("a file where the folder should be")
    done = run_main(tmp_path, "--backend", "fake", "--steps", "1",
                    MINT_RL_FAKE_CHECKPOINTS=f"{tmp_path}/mathrl-fake")  # fmt: skip
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        f"mathrl: error: the fake's checkpoint folder {tmp_path}/mathrl-fake cannot be written "
        f"({tmp_path}/mathrl-fake is a file); choose another with --fake-checkpoints or "
        "MINT_RL_FAKE_CHECKPOINTS\n"
    )
    assert not (tmp_path / "runs").exists()


def test_a_hand_edited_checkpoint_is_refused_by_sample(tmp_path: Path) -> None:
    train = run_main(tmp_path, "--backend", "fake", "--steps", "1")
    saved = Path(train.stdout.splitlines()[-1].removeprefix("Saved: "))
    payload = json.loads(saved.read_text())
    saved.write_text(json.dumps({**payload, "theta": ["x"]}))
    done = run_main(tmp_path, "sample", "--backend", "fake", "--model-path", str(saved))
    assert done.returncode == 2
    (line,) = done.stderr.splitlines()
    assert "holds no usable weights" in line
