"""`--wandb PROJECT`: the metrics mirrored to Weights & Biases, tested in its offline mode.

Each real W&B run is a `python -m mathrl` of its own that imports wandb (seconds each): those
are the slow suite's. The fast suite runs the same commands in this process against a
stand-in for the wandb module (`StandInWandb`: `init` makes a run that keeps what it is told),
and the mirror's own logic against stand-ins for wandb's run.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import struct
import sys
import types
from pathlib import Path
from typing import Any

import pytest

import mathrl.cli.wandb_mirror
from cli_process import run_cli, run_main
from conftest import needs_extra
from mathrl.cli.extras import install_command
from mathrl.cli.run_folder import read_jsonl
from mathrl.report import EvalMetrics, StepMetrics

pytestmark = needs_extra("wandb", "wandb")  # asked, not imported: importing it takes a second
OFFLINE = {"WANDB_MODE": "offline", "MINT_API_KEY": "sk-do-not-send"}


def without_wandb(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process as if the wandb extra were not installed (what mathrl asks of it)."""
    real = importlib.util.find_spec

    def missing(name: str, *args: Any) -> Any:
        return None if name == "wandb" else real(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", missing)


def offline_runs(folder: Path) -> list[Path]:
    """The W&B offline run files under a run folder, oldest first."""
    return sorted(folder.glob("wandb/offline-run-*/run-*.wandb"))


@pytest.mark.slow  # real W&B runs, each in a process of its own
def test_a_run_mirrors_its_steps_and_evaluations_and_nothing_secret(tmp_path: Path) -> None:
    args = ["--backend", "fake", "--steps", "4", "--eval-every", "2", "--eval-problems", "8"]
    plain = run_cli(tmp_path, *args, "--log-dir", "plain")
    mirrored = run_cli(tmp_path, *args, "--log-dir", "run", "--wandb", "mathrl-test", **OFFLINE)
    assert mirrored.returncode == 0, mirrored.stderr
    # stdout is the same with the mirror as without, apart from where the weights went.
    assert mirrored.stdout.splitlines()[:-1] == plain.stdout.splitlines()[:-1]
    (record,) = offline_runs(tmp_path / "run")
    assert f"mathrl: mirroring metrics to W&B: run/wandb/{record.parent.name}/files" in (
        mirrored.stderr
    )
    logged = record.read_bytes()
    for key in (b"train/accuracy", b"train/mean_reward", b"train/loss", b"eval/accuracy"):
        assert key in logged, key
    assert b"sk-do-not-send" not in logged
    assert "wandb:" not in mirrored.stderr  # W&B's own chatter stays off the terminal
    assert b"mathrl-test" in logged


@pytest.mark.slow  # real W&B runs, each in a process of its own
def test_a_resumed_run_goes_on_in_the_same_wandb_run(tmp_path: Path) -> None:
    first = run_cli(tmp_path, "--backend", "fake", "--steps", "2", "--log-dir", "run",
                    "--wandb", "mathrl-test", **OFFLINE)  # fmt: skip
    assert first.returncode == 0, first.stderr
    resumed = run_cli(tmp_path, "--resume", "run", "--steps", "3", **OFFLINE)
    assert resumed.returncode == 0, resumed.stderr
    runs = offline_runs(tmp_path / "run")
    assert len(runs) == 2
    assert len({path.name for path in runs}) == 1  # one W&B run id for both
    assert runs[0].name == f"run-{mathrl.cli.wandb_mirror.run_id(tmp_path / 'run')}.wandb"


def test_without_wandb_installed_the_flag_is_one_line_and_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    without_wandb(monkeypatch)
    done = run_main(tmp_path, "--backend", "fake", "--wandb", "mathrl-test")
    assert done.returncode == 2
    monkeypatch.chdir(tmp_path)  # where the run was: the command is for there
    assert done.stderr == (
        "mathrl: error: --wandb needs the wandb package (got none installed): "
        f"{install_command('wandb')}, or leave --wandb out\n"
    )
    assert not (tmp_path / "runs").exists()


def test_a_project_name_wandb_refuses_is_refused_first(tmp_path: Path) -> None:
    done = run_main(tmp_path, "--backend", "fake", "--wandb", "team/project")
    assert done.returncode == 2
    assert done.stderr.startswith("mathrl: error: --wandb must be a W&B project name: ")
    assert done.stderr.endswith("(got 'team/project')\n")


class Recorded:
    """Stands in for a wandb run: keeps what is logged."""

    def __init__(self) -> None:
        self.logged: list[dict[str, float]] = []

    def log(self, data: dict[str, float]) -> None:
        self.logged.append(data)


def test_reward_parts_are_mirrored_under_their_names() -> None:
    mirror = mathrl.cli.wandb_mirror.WandbMirror.__new__(mathrl.cli.wandb_mirror.WandbMirror)
    recorded = Recorded()
    mirror.run = recorded  # type: ignore[assignment]  # a stand-in for wandb's Run
    mirror.live, mirror.warn = True, print
    parts = {"first_try": 0.5, "second_try": 0.1}
    mirror.on_step(StepMetrics(3, 0.6, 0.6, 8, 4, 4, 0, 100, None, reward_parts=parts))
    mirror.on_eval(EvalMetrics(2, 0.75, 3, 4, 0.8, "tinker://x", reward_parts=parts))
    step, evaluation = recorded.logged
    assert step["train/step"] == 3
    assert "train/loss" not in step  # nothing was trained
    assert (step["train/reward/first_try"], step["train/reward/second_try"]) == (0.5, 0.1)
    assert (evaluation["eval/step"], evaluation["eval/accuracy"]) == (2, 0.75)
    assert evaluation["eval/reward/second_try"] == 0.1
    assert not any("@" in key for key in evaluation)  # no pass@k without samples
    passes = EvalMetrics(4, 0.5, 2, 4, 0.5, "x", samples=4, pass_at_k={1: 0.4, 4: 0.9},
                         majority_at_k={4: 0.7}, sampled_mean_reward=0.4)  # fmt: skip
    mirror.on_eval(passes)
    logged = recorded.logged[-1]
    assert (logged["eval/pass@1"], logged["eval/pass@4"], logged["eval/maj@4"]) == (0.4, 0.9, 0.7)


class Broken:
    """A wandb run whose service went away."""

    def log(self, data: dict[str, float]) -> None:
        raise ConnectionResetError("wandb-core is gone")

    def finish(self) -> None:
        raise ConnectionResetError("wandb-core is gone")


def test_wandb_failing_mid_run_stops_the_mirror_with_one_warning_not_the_run() -> None:
    warnings: list[str] = []
    mirror = mathrl.cli.wandb_mirror.WandbMirror.__new__(mathrl.cli.wandb_mirror.WandbMirror)
    mirror.run = Broken()  # type: ignore[assignment]  # a stand-in for wandb's Run
    mirror.live, mirror.warn = True, warnings.append
    for step in (1, 2):
        mirror.on_step(StepMetrics(step, 0.5, 0.5, 8, 4, 4, 0, 100, 0.1))
    mirror.close()
    assert warnings == [
        "stopped mirroring to W&B (ConnectionResetError: wandb-core is gone); training goes on",
        "W&B could not finish its run (ConnectionResetError: wandb-core is gone)",
    ]


@pytest.mark.slow  # real W&B runs, each in a process of its own
def test_a_run_mirrored_elsewhere_resumes_without_wandb_installed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = run_cli(tmp_path, "--backend", "fake", "--steps", "2", "--log-dir", "run",
                    "--wandb", "mathrl-test", **OFFLINE)  # fmt: skip
    assert first.returncode == 0, first.stderr
    without_wandb(monkeypatch)
    resumed = run_main(tmp_path, "--resume", "run", "--steps", "3")
    assert resumed.returncode == 0, resumed.stderr
    assert "mathrl: not mirroring to W&B project 'mathrl-test': wandb is not installed here" in (
        resumed.stderr
    )
    assert resumed.stdout.splitlines()[1].startswith("Step 3:")


NO_LOGIN = {"WANDB_MODE": "online", "WANDB_API_KEY": ""}  # and HOME has no .netrc


@pytest.mark.slow  # real W&B runs, each in a process of its own
def test_a_wandb_run_that_cannot_start_leaves_no_folder_and_no_stdout(tmp_path: Path) -> None:
    args = ["--backend", "fake", "--steps", "1", "--log-dir", "X", "--wandb", "mathrl-test"]
    refused = run_cli(tmp_path, *args, **NO_LOGIN)
    assert refused.returncode == 2
    assert refused.stdout == ""  # not even the `Model:` line
    error = refused.stderr.splitlines()[-1]
    assert error.startswith("mathrl: error: --wandb could not start a W&B run in project ")
    assert error.endswith("run `wandb login`, or set WANDB_MODE=offline")
    assert not (tmp_path / "X").exists()
    # So the same command, offline, finds nothing in its way.
    offline = run_cli(tmp_path, *args, WANDB_MODE="offline")
    assert offline.returncode == 0, offline.stderr
    # A resumed run keeps its folder, and the error says how to go on.
    resumed = run_cli(tmp_path, "--resume", "X", "--steps", "2", "--wandb", "other", **NO_LOGIN)
    assert resumed.returncode == 2
    assert resumed.stdout == ""
    assert resumed.stderr.splitlines()[-1].endswith(
        "run `wandb login`, or set WANDB_MODE=offline; then resume with: "
        "python -m mathrl --resume X"
    )


def test_the_wandb_run_id_is_the_run_folders_own(tmp_path: Path) -> None:
    # The same for every resume of a run, wherever its folder moves; another for a new run
    # made at the same path (its creation time differs); a folder without a record has one too.
    folder = tmp_path / "run"
    folder.mkdir()
    bare = mathrl.cli.wandb_mirror.run_id(folder)
    (folder / "config.json").write_text(json.dumps({"created": "2026-01-01T00:00:00"}))
    first = mathrl.cli.wandb_mirror.run_id(folder)
    moved = tmp_path / "elsewhere" / "run"
    moved.parent.mkdir()
    folder.rename(moved)
    assert mathrl.cli.wandb_mirror.run_id(moved) == first != bare
    (moved / "config.json").write_text(json.dumps({"created": "2026-01-02T00:00:00"}))
    assert mathrl.cli.wandb_mirror.run_id(moved) != first


class StandInRun:
    """A W&B run, offline, for the fast suite: keeps what it is told."""

    offline = True
    url = None

    def __init__(self, **settings: Any) -> None:
        self.settings = settings
        self.dir = str(Path(settings["dir"]) / "wandb" / "stand-in")
        self.defined: list[str] = []
        self.logged: list[dict[str, float]] = []
        self.finished = False

    def define_metric(self, name: str, step_metric: str | None = None) -> None:
        self.defined.append(name)

    def log(self, data: dict[str, float]) -> None:
        self.logged.append(dict(data))

    def finish(self) -> None:
        self.finished = True


class StandInWandb:
    """The wandb module as mathrl uses it (`init`, `Settings`), without importing wandb: each
    `init` makes a StandInRun, or raises `refusal` if one is set, as online without a login."""

    def __init__(self) -> None:
        self.runs: list[StandInRun] = []
        self.refusal: Exception | None = None

    def init(self, **settings: Any) -> StandInRun:
        if self.refusal is not None:
            raise self.refusal
        self.runs.append(StandInRun(**settings))
        return self.runs[-1]


@pytest.fixture
def stand_in(monkeypatch: pytest.MonkeyPatch) -> StandInWandb:
    wandb = StandInWandb()
    module = types.ModuleType("wandb")
    module.__spec__ = importlib.machinery.ModuleSpec("wandb", None)  # an installed package
    setattr(module, "init", wandb.init)  # noqa: B010  # a module's attributes, for mypy
    setattr(module, "Settings", dict)  # noqa: B010
    monkeypatch.setitem(sys.modules, "wandb", module)
    return wandb


def test_a_run_mirrors_its_steps_and_evaluations_to_one_wandb_run(
    tmp_path: Path, stand_in: StandInWandb
) -> None:
    # The real W&B run's files, and W&B's chatter kept off the terminal: in the slow suite.
    args = ["--backend", "fake", "--steps", "4", "--eval-every", "2", "--eval-problems", "8"]
    plain = run_main(tmp_path, *args, "--log-dir", "plain")
    mirrored = run_main(tmp_path, *args, "--log-dir", "run", "--wandb", "mathrl-test",
                        MINT_API_KEY="sk-do-not-send")  # fmt: skip
    assert mirrored.returncode == 0, mirrored.stderr
    assert mirrored.stdout.splitlines()[:-1] == plain.stdout.splitlines()[:-1]
    [run] = stand_in.runs
    assert f"mathrl: mirroring metrics to W&B: {run.dir}" in mirrored.stderr
    assert (run.settings["project"], run.settings["name"]) == ("mathrl-test", "run")
    assert run.settings["id"] == mathrl.cli.wandb_mirror.run_id(tmp_path / "run")
    assert run.settings["resume"] == "allow"
    assert "sk-do-not-send" not in repr(run.settings)  # its config is the settings, no key
    assert run.defined == ["train/step", "train/*", "eval/step", "eval/*"]
    assert [m["train/step"] for m in run.logged if "train/step" in m] == [1, 2, 3, 4]
    assert [m["eval/step"] for m in run.logged if "eval/step" in m] == [0, 2, 4]
    assert all("train/loss" in m for m in run.logged if "train/step" in m)
    # The sampler's entropy and its divergence from the learner, as the records hold them.
    records = [r for r in read_jsonl(tmp_path / "run" / "metrics.jsonl") if "eval" not in r]
    logged = [m for m in run.logged if "train/step" in m]
    assert [m["train/entropy"] for m in logged] == [r["entropy"] for r in records]
    assert [m["train/approx_kl"] for m in logged] == [r["approx_kl"] for r in records]
    assert all(r["entropy"] > 0 and 0 <= r["approx_kl"] < 1e-9 for r in records)  # on-policy
    assert run.finished


def test_a_resumed_run_goes_on_in_the_same_wandb_run_and_without_wandb_says_so(
    tmp_path: Path, stand_in: StandInWandb, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = run_main(tmp_path, "--backend", "fake", "--steps", "2", "--log-dir", "run",
                     "--wandb", "mathrl-test")  # fmt: skip
    assert first.returncode == 0, first.stderr
    resumed = run_main(tmp_path, "--resume", "run", "--steps", "3")
    assert resumed.returncode == 0, resumed.stderr
    same = mathrl.cli.wandb_mirror.run_id(tmp_path / "run")
    assert [run.settings["id"] for run in stand_in.runs] == [same, same]  # one W&B run for both
    assert stand_in.runs[1].settings["project"] == "mathrl-test"  # recorded, not asked again
    # Resumed where wandb is missing: a warning, and the run goes on unmirrored.
    without_wandb(monkeypatch)
    elsewhere = run_main(tmp_path, "--resume", "run", "--steps", "4")
    assert elsewhere.returncode == 0, elsewhere.stderr
    assert "mathrl: not mirroring to W&B project 'mathrl-test': wandb is not installed here" in (
        elsewhere.stderr
    )
    assert elsewhere.stdout.splitlines()[1].startswith("Step 4:")
    assert len(stand_in.runs) == 2


def test_a_wandb_run_that_cannot_start_leaves_no_new_folder_and_says_how_to_go_on(
    tmp_path: Path, stand_in: StandInWandb
) -> None:
    args = ["--backend", "fake", "--steps", "1", "--log-dir", "X", "--wandb", "mathrl-test"]
    stand_in.refusal = RuntimeError("api_key not configured (no-tty)")
    refused = run_main(tmp_path, *args)
    assert (refused.returncode, refused.stdout) == (2, "")  # not even the `Model:` line
    assert refused.stderr.splitlines()[-1] == (
        "mathrl: error: --wandb could not start a W&B run in project 'mathrl-test' (api_key not "
        "configured (no-tty)); run `wandb login`, or set WANDB_MODE=offline"
    )
    assert not (tmp_path / "X").exists()
    stand_in.refusal = None
    assert run_main(tmp_path, *args).returncode == 0
    # A resumed run keeps its folder, and the error says how to go on.
    stand_in.refusal = RuntimeError("api_key not configured (no-tty)")
    resumed = run_main(tmp_path, "--resume", "X", "--steps", "2", "--wandb", "other")
    assert (resumed.returncode, resumed.stdout) == (2, "")
    assert resumed.stderr.splitlines()[-1].endswith(
        "run `wandb login`, or set WANDB_MODE=offline; then resume with: "
        "python -m mathrl --resume X"
    )
    assert (tmp_path / "X" / "config.json").exists()
    # Once W&B can start, the command runs as printed (mirroring to the run's own project).
    stand_in.refusal = None
    command = resumed.stderr.splitlines()[-1].rsplit("then resume with: ", 1)[1].split()
    assert run_main(tmp_path, *command[3:]).returncode == 0


MEASURED_TASK = """
from mathrl.tasks.addition import MathAdapter, parse_answer


class Measured(MathAdapter):
    name = "measured"

    def metrics(self, completion, problem):
        answer = parse_answer(completion)
        digits = {"digits": len(str(abs(answer)))} if answer is not None else {}
        return {"tokens": completion.tokens, "answered": answer is not None, **digits}
"""


def test_a_tasks_metrics_reach_the_records_the_plot_and_wandb(
    tmp_path: Path, stand_in: StandInWandb
) -> None:
    (tmp_path / "measured.py").write_text(MEASURED_TASK)
    done = run_main(tmp_path, "--backend", "fake", "--adapter", "measured:Measured",
                    "--steps", "6", "--batch", "2", "--eval-every", "3", "--eval-problems", "8",
                    "--log-dir", "run", "--wandb", "mathrl-test")  # fmt: skip
    assert done.returncode == 0, done.stderr
    records = read_jsonl(tmp_path / "run" / "metrics.jsonl")
    steps = [r for r in records if not r.get("eval")]
    evals = [r for r in records if r.get("eval")]
    assert [r["step"] for r in evals] == [0, 3, 6]
    # Every group of a step is in samples.jsonl (batch 2, and 2 are logged): the step's means
    # are their completions'; a metric a completion leaves out is not counted as 0.
    samples = read_jsonl(tmp_path / "run" / "samples.jsonl")
    for record in steps:
        completions = [c for s in samples if s["step"] == record["step"] for c in s["completions"]]
        assert len(completions) == 2 * 4
        for name in ("tokens", "answered", "digits"):
            reported = [c["metrics"][name] for c in completions if name in c["metrics"]]
            assert (f"metric/{name}" in record) == bool(reported)
            if reported:
                assert record[f"metric/{name}"] == pytest.approx(sum(reported) / len(reported))
        assert record["metric/tokens"] == pytest.approx(record["mean_completion_tokens"])
    assert all("metric/tokens" in r and "metric/answered" in r for r in evals)
    # W&B: each step's and each evaluation's metrics, under train/metric/ and eval/metric/.
    [run] = stand_in.runs
    logged_steps = [m for m in run.logged if "train/step" in m]
    logged_evals = [m for m in run.logged if "eval/step" in m]
    assert [m["train/metric/tokens"] for m in logged_steps] == [r["metric/tokens"] for r in steps]
    assert [m["eval/metric/answered"] for m in logged_evals] == [
        r["metric/answered"] for r in evals
    ]
    # The plot: a panel for each metric, besides accuracy, reward, the sampler and datums.
    plotted = run_main(tmp_path, "plot", "run")
    assert (plotted.returncode, plotted.stdout) == (0, "run/plot.png\n"), plotted.stderr
    png = (tmp_path / "run" / "plot.png").read_bytes()
    width, height = struct.unpack(">II", png[16:24])
    assert (width, height) == (750, 950 + 3 * 160)  # 7.5 x (9.5 + 1.6 a metric) in, 100 dpi
