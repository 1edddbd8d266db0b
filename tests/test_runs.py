"""Seeing a run: the run folder, held-out evaluation, progress and plots."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import struct
import subprocess
import sys
import termios
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy
import pytest

import mathrl
from cli_process import run_main, user_env
from mathrl.cli.commands import main
from mathrl.cli.extras import install_command
from mathrl.cli.run_folder import read_jsonl, read_run
from mathrl.config import TrainConfig
from mathrl.evaluation import GUARDED_PROBLEMS, evaluation_set
from mathrl.loop import run_grpo, run_grpo_async
from mathrl.report import EvalMetrics, Observer
from mathrl.resolved import as_task
from mathrl.rollout import run_problems
from mathrl.tasks.addition import MathAdapter, pools
from mathrl_fakes import FakeBackend, RecordingBackend
from virtual_clock import INLINE, run_virtual

FakeFactory = Callable[..., FakeBackend]
STEP_LINE = re.compile(r"Step (\d+): accuracy=(\d+\.\d)%, datums=(\d+)")
EVAL_LINE = re.compile(r"Eval step (\d+): accuracy=(\d+\.\d)% \((\d+)/(\d+)\)")
KEY = "sk-test-SECRET123"


class Evals(Observer):
    def __init__(self) -> None:
        self.evals: list[EvalMetrics] = []

    def on_eval(self, metrics: EvalMetrics) -> None:
        self.evals.append(metrics)


# -- the run folder -------------------------------------------------------------------


def test_a_run_with_evaluation_leaves_a_folder_that_matches_its_output(tmp_path: Path) -> None:
    done = run_main(tmp_path, "--backend", "fake", "--steps", "20", "--eval-every", "5",
                   "--log-dir", "X", MINT_API_KEY=KEY)  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("Model: ")
    assert lines[-1].startswith("Saved: ")
    evals = [m for m in map(EVAL_LINE.fullmatch, lines) if m]
    steps = [m for m in map(STEP_LINE.fullmatch, lines) if m]
    assert [int(m[1]) for m in evals] == [0, 5, 10, 15, 20]
    assert [int(m[1]) for m in steps] == list(range(1, 21))
    assert len(lines) == 1 + 20 + 5 + 1
    # Each evaluation follows the step it evaluates; step 0 comes before training.
    assert lines[1].startswith("Eval step 0:")
    assert lines[lines.index(steps[4][0]) + 1].startswith("Eval step 5:")

    folder = tmp_path / "X"
    assert "mathrl: run folder: X (task addition)" in done.stderr
    records = read_jsonl(folder / "metrics.jsonl")
    step_records = [r for r in records if not r.get("eval")]
    eval_records = [r for r in records if r.get("eval")]
    assert [(f"{100 * r['accuracy']:.1f}", r["datums"]) for r in step_records] == [
        (m[2], int(m[3])) for m in steps
    ]
    assert [(r["step"], f"{100 * r['accuracy']:.1f}", r["correct"], r["problems"])
            for r in eval_records] == [
        (int(m[1]), m[2], int(m[3]), int(m[4])) for m in evals
    ]  # fmt: skip
    first = step_records[0]
    assert set(first) == {
        "step", "accuracy", "mean_reward", "datums", "groups", "groups_kept", "groups_dropped",
        "sampled_tokens", "mean_completion_tokens", "loss", "backend_metrics", "seconds",
        "sampling_seconds", "training_seconds", "sampler_path", "reward_parts", "truncated",
        "mean_abs_advantage", "kl", "approx_kl", "entropy",
    }  # fmt: skip
    assert first["groups_kept"] + first["groups_dropped"] == first["groups"] == 10
    assert first["reward_parts"] == {}  # the addition task's reward is a number

    # What the model wrote: the first 2 groups of each step, each completion scored.
    samples = read_jsonl(folder / "samples.jsonl")
    assert [(r["step"], r["problem"]) for r in samples] == [
        (step, p) for step in range(1, 21) for p in (0, 1)
    ]
    group = samples[0]
    assert group["prompt"].startswith("Q: What is 4 + 5?\nA: 9\n\nQ: What is ")
    assert len(group["completions"]) == 4
    for c in group["completions"]:
        assert set(c) == {"text", "ended", "stop", "reward", "parts", "advantage", "trained"}
        assert c["reward"] in (0.0, 1.0)
        assert c["ended"] in ("stop", "end_of_sequence", "length")
    rewards = [c["reward"] for c in group["completions"]]
    mean = sum(rewards) / 4
    assert [c["advantage"] for c in group["completions"]] == [r - mean for r in rewards]
    assert first["sampler_path"].endswith("step0000000.json")
    assert first["backend_metrics"] == {"loss:sum": first["loss"]}
    assert first["mean_completion_tokens"] == first["sampled_tokens"] / 40

    config = json.loads((folder / "config.json").read_text())
    assert config["task"] == "addition"
    assert config["settings"]["steps"] == 20
    assert config["settings"]["eval_every"] == 5
    assert config["settings"]["backend"] == "fake"
    assert config["mathrl_version"] == mathrl.__version__  # the installed one: 0.3.0.dev0
    checkpoints = read_jsonl(folder / "checkpoints.jsonl")
    assert {c["kind"] for c in checkpoints} == {"sampler", "state"}
    assert [c["step"] for c in checkpoints if c["kind"] == "state"] == [0, 5, 10, 15, 20]
    assert lines[-1] == f"Saved: {[c for c in checkpoints if c['kind'] == 'sampler'][-1]['path']}"
    # The key was in the environment; nothing of it is in the output or the folder.
    files = [p.read_text() for p in folder.rglob("*") if p.is_file()]  # checkpoints/ too
    for text in [done.stdout, done.stderr, *files]:
        assert KEY not in text
        assert "SECRET123" not in text


def test_the_default_run_folder_and_the_variable_that_moves_it(tmp_path: Path) -> None:
    run_main(tmp_path, "--backend", "fake", "--steps", "1")
    (folder,) = (tmp_path / "runs").iterdir()
    assert re.fullmatch(r"\d{8}T\d{6}Z-addition-[0-9a-f]{8}", folder.name)
    run_main(tmp_path, "--backend", "fake", "--steps", "1", MINT_RL_LOG_DIR="elsewhere/run")
    assert (tmp_path / "elsewhere" / "run" / "metrics.jsonl").is_file()
    assert len(list((tmp_path / "runs").iterdir())) == 2 - 1  # the second went elsewhere


def test_a_log_dir_that_holds_a_run_or_cannot_be_made_is_refused(tmp_path: Path) -> None:
    run_main(tmp_path, "--backend", "fake", "--steps", "1", "--log-dir", "X")
    again = run_main(tmp_path, "--backend", "fake", "--steps", "1", "--log-dir", "X")
    assert again.returncode == 2
    assert again.stderr.splitlines()[-1] == (
        "mathrl: error: --log-dir X already holds a run; choose another folder, or continue "
        "that run with `python -m mathrl --resume X`"
    )
    (tmp_path / "file").write_text("")
    blocked = run_main(tmp_path, "--backend", "fake", "--steps", "1", "--log-dir", "file/run")
    assert blocked.returncode == 2
    assert blocked.stderr == (
        "mathrl: error: the run folder file/run cannot be created (file is a file); choose "
        "another with --log-dir or MINT_RL_LOG_DIR\n"
    )  # before the `Model:` line
    assert blocked.stdout == ""


# -- held-out evaluation --------------------------------------------------------------


# Ten 20-step learning runs; the fast suite's representative is test_loop's short run.
@pytest.mark.slow
@pytest.mark.parametrize("seed", range(10))
def test_greedy_held_out_accuracy_starts_low_and_rises(
    fake_backend_factory: FakeFactory, seed: int
) -> None:
    config = TrainConfig(steps=20, seed=seed, eval_every=20)
    evals = Evals()
    run_grpo(fake_backend_factory(seed=seed), MathAdapter(), config, evals)
    before, after = (m.accuracy for m in evals.evals)
    assert [m.step for m in evals.evals] == [0, 20]
    assert before <= 0.70
    assert after >= before + 0.15


@pytest.mark.slow
def test_evaluation_asks_held_out_problems_greedily_and_adds_no_save(
    fake_backend_factory: FakeFactory,
) -> None:
    config = TrainConfig(steps=7, batch=4, eval_every=3, eval_problems=9)
    recorder = RecordingBackend(fake_backend_factory())
    evals = Evals()
    run_grpo(recorder, MathAdapter(), config, evals)
    assert [m.step for m in evals.evals] == [0, 3, 6, 7]
    assert all(m.problems == 9 for m in evals.evals)
    greedy = [c for c in recorder.samples if c.params.temperature == 0.0]
    assert len(greedy) == 4 * 9
    heldout_prompts = {MathAdapter().make_prompt(p) for p in pools()[1]}
    decode = recorder.tokenizer.decode
    assert {decode(c.prompt_T) for c in greedy} <= heldout_prompts
    plain = RecordingBackend(fake_backend_factory())
    run_grpo(plain, MathAdapter(), TrainConfig(steps=7, batch=4))
    assert recorder.samples[0].params.temperature == 1.0
    assert sum(1 for c in recorder.samples if c.params.temperature) == len(plain.samples)


@pytest.mark.parametrize("off_policy", [0, 1])
def test_evaluation_costs_no_round_trip_but_two_at_the_end(
    fake_backend_factory: FakeFactory, off_policy: int
) -> None:
    def elapsed(eval_every: int) -> float:
        backend = fake_backend_factory(latency=1.0)
        config = TrainConfig(
            steps=4, batch=4, eval_every=eval_every, max_steps_off_policy=off_policy
        )
        evals = Evals()
        _, seconds = run_virtual(
            run_grpo_async(backend, MathAdapter(), config, evals, workers=INLINE)
        )
        assert len(evals.evals) == (5 if eval_every else 0)
        return seconds

    # The final evaluation needs a sampler of the final weights, then its samples.
    assert elapsed(1) == elapsed(0) + 2


class OverlappingHeldout:
    """Five methods over 12 problems: the default held-out set repeats training ones."""

    def build_dataset(self, seed: int, step: int, size: int) -> list[int]:
        return [(seed + step * 5 + i) % 12 for i in range(size)]

    def make_prompt(self, problem: int) -> str:
        return f"{problem} + 1 ="

    def compute_reward(self, completion: str, problem: int) -> float:
        return float(completion.strip() == str(problem + 1))

    def reference_completion(self, problem: int) -> str:
        return f" {problem + 1}"

    def evaluate(self, rewards: Any) -> float:
        return sum(rewards) / len(rewards) if rewards else 0.0


def test_held_out_problems_that_training_draws_are_left_out_and_said(tmp_path: Path) -> None:
    config = TrainConfig(steps=2, batch=4, eval_every=2, eval_problems=6)
    warnings: list[str] = []

    class Warned(Evals):
        def on_warning(self, message: str) -> None:
            warnings.append(message)

    observer = Warned()
    backend = FakeBackend.for_run(
        OverlappingHeldout(), run_problems(OverlappingHeldout(), config), checkpoint_dir=tmp_path
    )
    run_grpo(backend, OverlappingHeldout(), config, observer)
    # Step 0's problems are 0..5; steps 1 and 2 train on 5..8 and 10, 11, 0, 1.
    assert observer.evals[0].problems == 3  # 2, 3 and 4
    (warning,) = warnings
    assert warning == (
        "3 of 6 held-out problems of task 'OverlappingHeldout' are also training problems of "
        "this run and were left out of evaluation; declare heldout_dataset on the task to "
        "avoid this"
    )


def test_the_held_out_set_keeps_only_problems_training_never_draws() -> None:
    config = TrainConfig(steps=2, batch=4, eval_every=2, eval_problems=6)
    # Held out: 0..5; training: 5..8, then 10, 11, 0, 1. Left out: 0, 1 and 5.
    kept, warnings = evaluation_set(as_task(OverlappingHeldout()), config)
    assert kept == [2, 3, 4]
    assert warnings[0].startswith("3 of 6 held-out problems of task 'OverlappingHeldout'")
    # Held out: 0..4; training: 5..8. Nothing to leave out, and nothing to say.
    apart = replace(config, steps=1, eval_problems=5)
    assert evaluation_set(as_task(OverlappingHeldout()), apart) == ([0, 1, 2, 3, 4], [])
    # A task with its own held-out set keeps it whole.
    math = as_task(MathAdapter())
    assert evaluation_set(math, config) == (math.heldout(config.seed, 6), [])


def test_the_held_out_guard_checks_at_least_the_first_step(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # With room for 4 problems at 4 a step, only step 1 (5..8) is compared: 5 is left out.
    monkeypatch.setattr("mathrl.evaluation.GUARDED_PROBLEMS", 4)
    config = TrainConfig(steps=2, batch=4, eval_every=2, eval_problems=6)
    kept, warnings = evaluation_set(as_task(OverlappingHeldout()), config)
    assert kept == [0, 1, 2, 3, 4]
    assert warnings[0].startswith("1 of 6 held-out problems")


def test_the_held_out_guard_draws_a_bounded_number_of_training_problems() -> None:
    # A million steps of 32,768: comparing them all with the held-out set would eat the machine.
    class Counting(OverlappingHeldout):
        drawn = 0

        def build_dataset(self, seed: int, step: int, size: int) -> list[int]:
            Counting.drawn += size
            return super().build_dataset(seed, step, size)

    config = TrainConfig(steps=1_000_000, batch=32_768, group=2, eval_every=1, eval_problems=5)
    kept, warnings = evaluation_set(as_task(Counting()), config)
    left_out = 5 - len(kept)
    expected = (
        f"{left_out} of 5 held-out problems of task 'Counting' are also training problems of "
        "this run and were left out of evaluation; declare heldout_dataset on the task to "
        "avoid this"
    )
    assert warnings[:1] == ([expected] if left_out else [])
    assert Counting.drawn <= GUARDED_PROBLEMS + 32_768 + 5


# -- progress -------------------------------------------------------------------------


def _run_on_a_terminal(tmp_path: Path, stdout: int) -> tuple[int, str]:
    """Run 3 fake steps with stderr on a pseudo-terminal; return the exit code and its screen."""
    controller, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    try:
        child = subprocess.run(
            [sys.executable, "-m", "mathrl", "--backend", "fake", "--steps", "3",
             "--fake-latency", "0.05"],
            stdout=stdout, stderr=terminal, cwd=tmp_path, env=user_env(tmp_path),
            timeout=120, check=False,
        )  # fmt: skip
        os.close(terminal)
        terminal = -1
        shown = b""
        while True:
            try:
                chunk = os.read(controller, 65536)
            except OSError:
                break
            if not chunk:
                break
            shown += chunk
    finally:
        os.close(controller)
        if terminal >= 0:
            os.close(terminal)
    return child.returncode, shown.decode(errors="replace")


def test_progress_shows_on_a_terminal_and_never_touches_stdout(tmp_path: Path) -> None:
    out = tmp_path / "stdout.txt"
    with out.open("wb") as stdout:
        code, text = _run_on_a_terminal(tmp_path, stdout.fileno())
    assert code == 0
    lines = out.read_text().splitlines()
    assert [line.split(":")[0] for line in lines] == [
        "Model",
        "Step 1",
        "Step 2",
        "Step 3",
        "Saved",
    ]
    assert "step 3/3" in text or "step 2/3" in text  # the live line, redrawn in place
    assert "samples" in text
    assert "eta" in text
    assert "step 2: accuracy" in text
    assert "run folder:" in text


@pytest.mark.slow
def test_no_bar_when_stdout_is_a_pipe_whose_reader_may_share_the_screen(tmp_path: Path) -> None:
    # `| tee log` writes our stdout lines onto the terminal whenever it likes: a live bar
    # there would draw over them, so there is none.
    code, text = _run_on_a_terminal(tmp_path, subprocess.PIPE)
    assert code == 0
    assert "samples" not in text
    assert "\x1b[" not in text  # no bar, no cursor movement
    assert "run folder:" in text


# -- plots ----------------------------------------------------------------------------


def test_plot_draws_one_run_and_compares_several(tmp_path: Path) -> None:
    for name, seed in (("A", "0"), ("B", "1")):
        done = run_main(tmp_path, "--backend", "fake", "--steps", "6", "--eval-every", "3",
                       "--seed", seed, "--log-dir", name)  # fmt: skip
        assert done.returncode == 0, done.stderr
    one = run_main(tmp_path, "plot", "A")
    assert one.returncode == 0, one.stderr
    assert one.stdout == "A/plot.png\n"
    png = (tmp_path / "A" / "plot.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    assert 10_000 < len(png) < 150_000
    both = run_main(tmp_path, "plot", "A", "B", "--out", "compare.png")
    assert (both.returncode, both.stdout) == (0, "compare.png\n")
    assert (tmp_path / "compare.png").stat().st_size > 10_000
    assert read_run(tmp_path / "A").config["task"] == "addition"


def data(values: object) -> list[float]:
    """A plotted line's x or y values, as a list."""
    return [float(v) for v in numpy.asarray(values).tolist()]


def test_plot_draws_the_held_out_mean_reward_and_a_panel_for_each_metric(tmp_path: Path) -> None:
    from matplotlib import pyplot

    from mathrl.cli.plot import figure_of
    from mathrl.cli.run_folder import RunRecord

    steps: list[dict[str, object]] = [
        {"step": k, "accuracy": 0.5, "mean_reward": 0.6, "datums": 8, "reward_parts": {},
         "metric/tokens": 10.0 - k, "entropy": 0.5 / k, "approx_kl": None if k == 1 else 0.01}
        for k in (1, 2)
    ]  # fmt: skip
    evals = [{"eval": True, "step": k, "accuracy": 0.5, "mean_reward": r, "metric/tokens": 9.0}
             for k, r in ((0, 0.25), (2, 0.75))]  # fmt: skip
    settings = {"base_model": "m", "seed": 0, "backend": "fake"}
    record = RunRecord(tmp_path / "A", {"task": "t", "settings": settings}, steps, evals, [])
    figure = figure_of([record])
    # Accuracy, reward, a panel for "tokens", the sampler, datums; the sampler's KL axis.
    _, reward, tokens, sampler, _, kl = figure.axes
    [held_out] = [line for line in reward.lines if str(line.get_label()).startswith("held-out")]
    assert held_out.get_label() == "held-out mean reward, greedy"
    assert (data(held_out.get_xdata()), data(held_out.get_ydata())) == ([0, 2], [0.25, 0.75])
    assert tokens.get_title(loc="left") == "the task's metric 'tokens' (held-out, greedy: points)"
    curve, points = tokens.lines
    assert (data(curve.get_ydata()), data(points.get_ydata())) == ([9.0, 8.0], [9.0, 9.0])
    [entropy] = sampler.lines
    assert (data(entropy.get_xdata()), data(entropy.get_ydata())) == ([1, 2], [0.5, 0.25])
    [divergence] = kl.lines  # a step that trained nothing has none
    assert (data(divergence.get_xdata()), data(divergence.get_ydata())) == ([2], [0.01])
    assert kl.get_ylim() == pytest.approx((0.0, 0.011))  # from 0, to a tenth past the top
    pyplot.close(figure)
    # Without metrics: accuracy, reward, the sampler (and its KL axis), datums. On-policy
    # rounding (1e-32) is drawn on an axis to 1e-4: a flat line at 0.
    unmeasured = [{k: v for k, v in row.items() if k != "metric/tokens"} for row in steps]
    on_policy = [{**row, "approx_kl": 1e-32} for row in unmeasured]
    plain = RunRecord(tmp_path / "B", record.config, on_policy, [], [])
    figure = figure_of([plain])
    assert len(figure.axes) == 5
    assert figure.axes[-1].get_ylim() == (0.0, 1e-4)
    pyplot.close(figure)


def test_plot_refuses_what_it_cannot_draw(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["plot", "nowhere"]) == 2
    assert "plot: nowhere is not a run folder" in capsys.readouterr().err
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "config.json").write_text('{"settings": {}}')
    (tmp_path / "run" / "metrics.jsonl").write_text('{"step": 1, "accuracy": 0.5, "datums": 4}\n')
    assert main(["plot", "run", "--out", "x.txt"]) == 2
    assert "--out must be a .png file (got 'x.txt')" in capsys.readouterr().err
    monkeypatch.setitem(sys.modules, "mathrl.cli.plot", None)  # as if matplotlib were missing
    assert main(["plot", "run"]) == 2
    assert capsys.readouterr().err == (
        f"mathrl: error: plot needs matplotlib, which is not installed: {install_command('plot')}\n"
    )


def test_a_run_from_python_reports_its_evaluations_and_can_keep_a_run_folder(
    tmp_path: Path,
) -> None:
    from mathrl.cli.plot import plot_runs
    from mathrl.cli.run_folder import RunFolder

    config = TrainConfig(steps=4, eval_every=2, eval_problems=20)
    folder = RunFolder.for_python(tmp_path / "py-run", MathAdapter(), config)
    backend = FakeBackend.for_run(
        MathAdapter(), run_problems(MathAdapter(), config), checkpoint_dir=tmp_path / "ckpt"
    )
    result = run_grpo(backend, MathAdapter(), config, folder)
    assert [e.step for e in result.evaluations] == [0, 2, 4]
    assert all(e.problems == 20 for e in result.evaluations)
    record = read_run(tmp_path / "py-run")
    assert record.config["settings"]["backend"] == "python"
    assert [r["step"] for r in record.steps] == [1, 2, 3, 4]
    assert [r["step"] for r in record.evals] == [0, 2, 4]
    assert plot_runs([record], tmp_path / "py.png").stat().st_size > 10_000


def test_resume_says_where_it_starts_and_keeps_the_fakes_knobs(tmp_path: Path) -> None:
    first = run_main(
        tmp_path, "--backend", "fake", "--steps", "2", "--fake-latency", "0.01", "--log-dir", "R"
    )
    assert first.returncode == 0, first.stderr
    config = json.loads((tmp_path / "R" / "config.json").read_text())
    assert config["settings"]["fake_latency"] == 0.01
    # A finished run has nothing left; a folder cut back to step 1 resumes from there.
    for name in ("metrics.jsonl", "checkpoints.jsonl"):
        path = tmp_path / "R" / name
        path.write_text("".join(line + "\n" for line in path.read_text().splitlines()[:2]))
    resumed = run_main(tmp_path, "--resume", "R")
    assert resumed.returncode == 0, resumed.stderr
    assert "mathrl: resuming R from step 0 (of 2)\n" in resumed.stderr
    assert [line.split(":")[0] for line in resumed.stdout.splitlines()] == [
        "Model", "Step 1", "Step 2", "Saved"
    ]  # fmt: skip
    # The knobs come from the record, unless given again.
    from mathrl.cli.commands import _resume_plan
    from mathrl.cli.parsers import train_parser

    for argv, latency in (
        (["--resume", str(tmp_path / "R")], 0.01),
        (["--resume", str(tmp_path / "R"), "--fake-latency", "0"], 0.0),
    ):
        for name in ("metrics.jsonl", "checkpoints.jsonl"):  # cut back again: resumable
            path = tmp_path / "R" / name
            path.write_text("".join(line + "\n" for line in path.read_text().splitlines()[:2]))
        plan = _resume_plan(train_parser().parse_args(argv), {})
        assert plan is not None
        assert plan.fake.fake_latency == latency
