"""The command line's less travelled paths: failures mid-run, warnings, odd inputs, MinT."""

from __future__ import annotations

import asyncio
import io
import json
import re
from pathlib import Path
from typing import Any

import pytest

import mathrl.cli.commands
import mathrl.service.mint_backend
from cli_process import run_main, saved_names
from conftest import math_references
from doubles.fake_mint import FakeMintServer
from mathrl.cli.commands import main
from mathrl.cli.progress import ProgressBar
from mathrl.cli.run_folder import read_jsonl, read_run, unwritable
from mathrl.report import StepMetrics

KEY = "sk-test-SECRET123"
OVERLAPPING_TASK = '''
class Overlapping:
    """Twelve problems: the default held-out set repeats training ones."""

    def build_dataset(self, seed, step, size):
        return [(seed + step * 5 + i) % 12 for i in range(size)]

    def make_prompt(self, problem):
        return f"{problem} + 1 ="

    def compute_reward(self, completion, problem):
        return float(completion.strip() == str(problem + 1))

    def reference_completion(self, problem):
        return f" {problem + 1}"

    def evaluate(self, rewards):
        return sum(rewards) / len(rewards) if rewards else 0.0
'''


@pytest.mark.slow
def test_a_service_that_fails_mid_run_leaves_a_run_that_resumes_to_the_same_end(
    tmp_path: Path,
) -> None:
    whole = run_main(tmp_path, "--backend", "fake", "--steps", "8")
    # No retries, and a quarter of the calls fail: the run ends early, at this seed after
    # a few steps, with its last saved state recorded.
    failed = run_main(tmp_path, "--backend", "fake", "--steps", "8", "--fake-fault-rate", "0.25",
                     "--retries", "0", "--log-dir", "X", "--save-every", "1")  # fmt: skip
    assert failed.returncode == 1
    lines = failed.stderr.splitlines()
    assert lines[-2].startswith("mathrl: error: ")
    match = re.fullmatch(
        r"mathrl: the last saved state is step (\d+); resume with: python -m mathrl --resume X",
        lines[-1],
    )
    assert match, failed.stderr
    assert failed.stdout.splitlines()[-1].startswith("Saved: ")
    # A resumed run that fails before its first save still says where to go on from.
    again = run_main(tmp_path, "--resume", "X", "--fake-fault-rate", "1", "--retries", "0")
    assert again.returncode == 1
    assert again.stderr.splitlines()[-1] == lines[-1]
    assert again.stdout.splitlines()[-1] == failed.stdout.splitlines()[-1]
    # The service has recovered (the fault rate would carry over from the record otherwise).
    resumed = run_main(tmp_path, "--resume", "X", "--fake-fault-rate", "0")
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.splitlines()[1].startswith(f"Step {int(match[1]) + 1}:")
    assert (
        saved_names(resumed.stdout).splitlines()[-1] == (saved_names(whole.stdout).splitlines()[-1])
    )
    assert [r["step"] for r in read_run(tmp_path / "X").steps] == list(range(1, 9))


def test_a_held_out_overlap_is_a_warning_on_stderr(tmp_path: Path) -> None:
    (tmp_path / "overlap.py").write_text(OVERLAPPING_TASK)
    done = run_main(tmp_path, "--backend", "fake", "--adapter", "overlap:Overlapping", "--steps",
                   "2", "--batch", "4", "--eval-every", "2", "--eval-problems", "6")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (
        "3 of 6 held-out problems of task 'Overlapping' are also training problems" in done.stderr
    )
    assert "Eval step 2: accuracy=" in done.stdout
    assert re.search(r"Eval step 0: accuracy=\d+\.\d% \(\d/3\)", done.stdout)


def test_resume_refuses_a_run_whose_task_was_renamed(tmp_path: Path) -> None:
    (tmp_path / "overlap.py").write_text(OVERLAPPING_TASK)
    run_main(tmp_path, "--backend", "fake", "--adapter", "overlap:Overlapping", "--steps", "2",
            "--log-dir", "X")  # fmt: skip
    (tmp_path / "overlap.py").write_text(
        OVERLAPPING_TASK.replace('"""Twelve', 'name = "renamed"\n    """Twelve')
    )
    done = run_main(tmp_path, "--resume", "X")
    assert done.returncode == 2
    # The run recorded the task's file absolute: the run folder works from any folder.
    assert done.stderr == (
        f"mathrl: error: --resume: {tmp_path / 'overlap.py'}:Overlapping is now task "
        "'renamed', but the run trained task 'Overlapping'\n"
    )
    config = json.loads((tmp_path / "X" / "config.json").read_text())
    del config["settings"]["lora_rank"]
    (tmp_path / "X" / "config.json").write_text(json.dumps(config))
    done = run_main(tmp_path, "--resume", "X")
    assert (done.returncode, "lacks a setting ('lora_rank')" in done.stderr) == (2, True)


@pytest.mark.parametrize("spec", ["overlap.py:Overlapping", "overlap:Overlapping"])
def test_a_run_folder_records_the_tasks_file_absolute_and_works_from_any_folder(
    tmp_path: Path, spec: str
) -> None:
    mine, elsewhere = tmp_path / "mine", tmp_path  # (what a call imports under it, it forgets)
    mine.mkdir()
    (mine / "overlap.py").write_text(OVERLAPPING_TASK)
    done = run_main(mine, "--backend", "fake", "--adapter", spec, "--steps", "2",
                    "--log-dir", "X")  # fmt: skip
    assert done.returncode == 0, done.stderr
    config = json.loads((mine / "X" / "config.json").read_text())
    assert config["settings"]["adapter"] == f"{mine / 'overlap.py'}:Overlapping"
    folder = str(mine / "X")
    for args in (
        ["--resume", folder, "--steps", "3"],
        ["eval", "--model-path", folder, "--problems", "3"],
        ["sample", "--model-path", folder, "--problems", "3"],
    ):
        done = run_main(elsewhere, *args)
        assert done.returncode == 0, (args, done.stderr)
    # The name typed then, given again with --resume, is the same task: not a change.
    done = run_main(mine, "--resume", "X", "--steps", "4", "--adapter", spec)
    assert done.returncode == 0, done.stderr


def test_an_unreadable_dotenv_and_an_interrupt_are_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)

    def unreadable(path: Path) -> dict[str, str]:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(mathrl.cli.commands, "dotenv_values", unreadable)
    assert main(["--backend", "fake"]) == 2
    assert capsys.readouterr().err == (
        f"mathrl: error: .env must be a readable file (got Permission denied: {tmp_path}/.env)\n"
    )
    monkeypatch.undo()
    monkeypatch.chdir(tmp_path)

    def interrupted(*args: Any) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(mathrl.cli.commands, "_train_command", interrupted)
    assert main([]) == 130
    assert capsys.readouterr().err == "mathrl: interrupted\n"


def test_plot_reports_an_output_it_cannot_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["--backend", "fake", "--steps", "2", "--log-dir", "X"]) == 0
    (tmp_path / "file").write_text("")
    assert main(["plot", "X", "--out", "file/plot.png"]) == 2
    assert "--out: cannot write file/plot.png" in capsys.readouterr().err


def test_an_adapter_that_cannot_be_built_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "needy.py").write_text(
        "class Needy:\n    def __init__(self, size):\n        pass\n"
    )
    assert main(["check-adapter", "needy:Needy"]) == 2
    assert "check-adapter: needy:Needy could not be created (TypeError:" in capsys.readouterr().err


def test_sample_over_mint_refuses_a_path_that_is_not_mints(tmp_path: Path) -> None:
    (tmp_path / "x.json").write_text("{}")  # there, but not MinT's
    done = run_main(tmp_path, "sample", "--backend", "mint", "--model-path", "x.json",
                    MINT_API_KEY=KEY)  # fmt: skip
    assert done.returncode == 2
    assert (
        "--model-path must be a tinker:// path a run printed as `Saved:` (got 'x.json')"
        in done.stderr
    )


def test_sample_over_mint_answers_held_out_problems(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    server = FakeMintServer(math_references(), checkpoint_dir=tmp_path)
    training = server.connect().create_lora_training_client("fake/base")
    path = training.save_weights_for_sampler("w").result().path
    real_open = mathrl.service.mint_backend.open_sampler

    async def open_on_the_fake(config: Any, env: Any, model_path: str) -> Any:
        return await real_open(config, env, model_path, service_client=server.connect())

    monkeypatch.setattr(mathrl.service.mint_backend, "open_sampler", open_on_the_fake)
    monkeypatch.setenv("MINT_API_KEY", KEY)
    monkeypatch.chdir(tmp_path)
    assert main(["sample", "--model-path", path, "--problems", "4"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "Model: Qwen/Qwen3-0.6B, Vocab: 257"
    assert len(lines) == 1 + 4 + 1
    assert lines[-1].startswith("Accuracy: ")


def test_sample_finds_the_run_under_runs_that_saved_a_tinker_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A run over the service (the fake mint SDK) into runs/, then its Saved: path alone: the
    # run folder that recorded it gives the model and task, as a run folder would.
    server = FakeMintServer(math_references(), checkpoint_dir=tmp_path / "mint")
    real_backend = mathrl.service.mint_backend.open_backend
    real_sampler = mathrl.service.mint_backend.open_sampler

    async def backend_on_the_fake(config: Any, env: Any, **kwargs: Any) -> Any:
        return await real_backend(config, env, service_client=server.connect(), **kwargs)

    async def sampler_on_the_fake(config: Any, env: Any, model_path: str) -> Any:
        return await real_sampler(config, env, model_path, service_client=server.connect())

    monkeypatch.setattr(mathrl.service.mint_backend, "open_backend", backend_on_the_fake)
    monkeypatch.setattr(mathrl.service.mint_backend, "open_sampler", sampler_on_the_fake)
    trained = run_main(tmp_path, "--steps", "1", "--base-model", "some/model", MINT_API_KEY=KEY)
    assert trained.returncode == 0, trained.stderr
    saved = trained.stdout.splitlines()[-1].removeprefix("Saved: ")
    assert saved.startswith("tinker://")
    [run] = (tmp_path / "runs").iterdir()
    found = run_main(tmp_path, "sample", "--model-path", saved, "--problems", "2", MINT_API_KEY=KEY)
    assert found.returncode == 0, found.stderr
    assert found.stdout.splitlines()[0] == "Model: some/model, Vocab: 257"
    refused = run_main(tmp_path, "sample", "--model-path", saved, "--base-model", "other/model",
                       MINT_API_KEY=KEY)  # fmt: skip
    assert refused.stderr == (
        f"mathrl: error: --base-model other/model cannot be given with --model-path {saved} "
        f"(recorded by the run folder {Path('runs') / run.name}): the run folder's config.json "
        "records --base-model some/model; leave it out\n"
    )


def test_the_progress_bar_prints_lines_above_itself(tmp_path: Path) -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    stream = Terminal()
    with ProgressBar(3, 0, 8, stream) as bar:
        assert bar.active
        bar.on_phase(1, "sampling")
        bar.on_sampled(1, 4, 8)
        bar.say("mathrl: a line for the user")
        bar.on_step(StepMetrics(1, 0.5, 0.5, 4, 2, 4, 1, 10, 0.1))
    assert "mathrl: a line for the user" in stream.getvalue()


def test_closing_a_retrying_backend_stops_calls_nobody_waits_for(tmp_path: Path) -> None:
    from mathrl.service.recovery import RetryingBackend
    from mathrl.service.retry import RetryPolicy
    from mathrl_fakes import FakeBackend, FakeModel

    async def go() -> None:
        backend = RetryingBackend(
            FakeBackend(FakeModel(math_references()), checkpoint_dir=tmp_path, latency=60.0),
            RetryPolicy(retries=0, call_timeout=120.0),
        )
        pending = await backend.submit_save_for_sampler("never-waited-for")
        await backend.close()
        assert asyncio.ensure_future(pending).cancelled()

    asyncio.run(go())


def test_a_task_whose_import_fails_names_what_it_imports(tmp_path: Path) -> None:
    (tmp_path / "imperr.py").write_text("import nonexistent_pkg\n\nclass T:\n    pass\n")
    done = run_main(tmp_path, "--backend", "fake", "--adapter", "imperr:T")
    assert (done.returncode, done.stderr) == (
        2,
        "mathrl: error: --adapter: importing 'imperr' failed: it imports 'nonexistent_pkg', "
        "which is not installed (No module named 'nonexistent_pkg'); install it, e.g. pip "
        "install nonexistent_pkg\n",
    )
    (tmp_path / "afile").write_text("")
    done = run_main(tmp_path, "--backend", "fake", "--log-dir", "afile")
    assert (done.returncode, done.stderr) == (
        2, "mathrl: error: --log-dir must be a folder (got a file: afile)\n"
    )  # fmt: skip


def test_the_fakes_checkpoints_go_where_asked_and_sample_takes_a_run_folder(
    tmp_path: Path,
) -> None:
    done = run_main(tmp_path, "--backend", "fake", "--steps", "2", "--log-dir", "R",
                    "--fake-checkpoints", "ckpts")  # fmt: skip
    assert done.returncode == 0, done.stderr
    saved = done.stdout.splitlines()[-1].removeprefix("Saved: ")
    assert saved == str(Path("ckpts") / Path(saved).name)
    assert (tmp_path / saved).is_file()
    # A run folder stands for its latest weights.
    by_folder = run_main(tmp_path, "sample", "--backend", "fake", "--model-path", "R")
    by_path = run_main(tmp_path, "sample", "--backend", "fake", "--model-path", saved)
    assert by_folder.returncode == 0, by_folder.stderr
    assert by_folder.stdout == by_path.stdout
    # A folder it cannot write is named, with the setting to change.
    (tmp_path / "ro").write_text("a file, not a folder")
    failed = run_main(
        tmp_path, "--backend", "fake", "--fake-checkpoints", "ro/sub", "--log-dir", "S"
    )
    # Tried before anything is printed or made: no `Model:` line, no run folder.
    assert (failed.returncode, failed.stdout, failed.stderr) == (
        2,
        "",
        "mathrl: error: the fake's checkpoint folder ro/sub cannot be written (ro is a file); "
        "choose another with --fake-checkpoints or MINT_RL_FAKE_CHECKPOINTS\n",
    )
    assert not (tmp_path / "S").exists()
    refused = run_main(tmp_path, "--fake-checkpoints", "x", MINT_API_KEY="sk-x")
    assert refused.stderr == (
        "mathrl: error: --fake-checkpoints works only with --backend fake (got --backend mint)\n"
    )


def test_a_run_that_failed_before_its_first_state_starts_over_on_resume(tmp_path: Path) -> None:
    failed = run_main(tmp_path, "--backend", "fake", "--steps", "3", "--log-dir", "X",
                      "--fake-fault-rate", "1", "--retries", "0")  # fmt: skip
    assert failed.returncode == 1
    assert failed.stderr.splitlines()[-1] == (
        "mathrl: no training state was saved; start the run over with: python -m mathrl --resume X"
    )
    again = run_main(tmp_path, "--resume", "X", "--fake-fault-rate", "0")
    assert again.returncode == 0, again.stderr
    assert "mathrl: starting X over: it saved no training state" in again.stderr
    whole = run_main(tmp_path, "--backend", "fake", "--steps", "3")
    assert saved_names(again.stdout) == saved_names(whole.stdout)
    assert [r["step"] for r in read_run(tmp_path / "X").steps] == [1, 2, 3]


def test_an_evaluation_lost_to_a_failure_is_made_on_resume(tmp_path: Path) -> None:
    whole = run_main(tmp_path, "--backend", "fake", "--steps", "4", "--eval-every", "2",
                     "--save-every", "2", "--log-dir", "X")  # fmt: skip
    expected = whole.stdout.splitlines()
    # As if the run had failed after step 2's state was saved, before its evaluation came.
    metrics, checkpoints = tmp_path / "X" / "metrics.jsonl", tmp_path / "X" / "checkpoints.jsonl"
    kept = [
        r for r in read_jsonl(metrics) if r["step"] < 2 or (r["step"] == 2 and not r.get("eval"))
    ]
    metrics.write_text("".join(json.dumps(r) + "\n" for r in kept))
    saves = [r for r in read_jsonl(checkpoints) if r["step"] <= 2]
    checkpoints.write_text("".join(json.dumps(r) + "\n" for r in saves))
    resumed = run_main(tmp_path, "--resume", "X")
    assert resumed.returncode == 0, resumed.stderr
    lines = resumed.stdout.splitlines()
    assert lines[1].startswith("Eval step 2: ")
    assert lines[1:] == expected[expected.index(lines[1]) :]


def test_a_folder_is_tried_for_writing_not_guessed(tmp_path: Path) -> None:
    assert unwritable(tmp_path / "new" / "deeper") is None  # its parent can hold it
    assert not (tmp_path / "new").exists()  # and nothing is left behind
    assert list(tmp_path.iterdir()) == []
    assert unwritable(tmp_path / ("x" * 5000)) == "File name too long"
    (tmp_path / "f").write_text("")
    assert unwritable(tmp_path / "f" / "sub") == f"{tmp_path / 'f'} is a file"
    if not Path("/proc/self").exists():
        pytest.skip("no /proc here: the folder root can read but not write is Linux's")
    # Root may write anywhere by its permission bits; /proc takes no new files all the same.
    assert unwritable(Path("/proc/runs")) == (
        "cannot make a file in /proc: No such file or directory"
    )


def test_sample_takes_a_run_folders_backend_task_and_model_from_its_record(
    tmp_path: Path,
) -> None:
    trained = run_main(tmp_path, "--backend", "fake", "--adapter", "preference", "--steps", "1",
                       "--log-dir", "P", "--base-model", "some/chat-model")  # fmt: skip
    assert trained.returncode == 0, trained.stderr
    # No MINT_API_KEY, no --backend, no --adapter: the folder says fake, preference, the model.
    by_folder = run_main(tmp_path, "sample", "--model-path", "P", "--problems", "2")
    assert by_folder.returncode == 0, by_folder.stderr
    assert by_folder.stdout.splitlines()[0] == "Model: some/chat-model, Vocab: 257, Backend: fake"
    # The same flags as the record change nothing; another value is refused, naming both.
    same = run_main(tmp_path, "sample", "--model-path", "P", "--problems", "2",
                    "--backend", "fake", "--adapter", "preference")  # fmt: skip
    assert same.stdout == by_folder.stdout
    for flags, recorded in [
        (("--backend", "mint"), "--backend fake"),
        (("--adapter", "addition"), "--adapter preference"),
    ]:
        refused = run_main(tmp_path, "sample", "--model-path", "P", *flags, MINT_API_KEY="sk-x")
        assert (refused.returncode, refused.stdout) == (2, "")
        assert refused.stderr == (
            f"mathrl: error: {' '.join(flags)} cannot be given with --model-path P: the run "
            f"folder's config.json records {recorded}; leave it out\n"
        )
    # The environment does not outvote the record (a flag is asked for that).
    env = run_main(tmp_path, "sample", "--model-path", "P", "--problems", "2",
                   MINT_RL_ADAPTER="addition", MINT_BASE_MODEL="other/model")  # fmt: skip
    assert env.stdout == by_folder.stdout


GAME = "doubles.secret_game:SecretGame"


def test_sample_takes_a_saved_path_inside_its_run_folder_and_prints_whole_episodes(
    tmp_path: Path,
) -> None:
    trained = run_main(tmp_path, "--backend", "fake", "--adapter", GAME, "--steps", "2",
                       "--log-dir", "G", "--fake-checkpoints", "G/ckpt")  # fmt: skip
    assert trained.returncode == 0, trained.stderr
    saved = trained.stdout.splitlines()[-1].removeprefix("Saved: ")
    # No MINT_API_KEY, no --backend, no --adapter: the run folder holding the path says.
    by_path = run_main(tmp_path, "sample", "--model-path", saved, "--problems", "3")
    by_folder = run_main(tmp_path, "sample", "--model-path", "G", "--problems", "3")
    assert by_path.returncode == 0, by_path.stderr
    assert by_path.stdout == by_folder.stdout
    # Each problem: its question and verdict, then each turn and the reply to it, numbered.
    lines = by_path.stdout.splitlines()
    assert lines[0] == "Model: Qwen/Qwen3-0.6B, Vocab: 257, Backend: fake"
    # The games share their prompt: each question says which game it is.
    assert re.fullmatch(
        r"Guess: \[Game\(secret=\d+, serial='.*'\)\] -> [1-5] turns?: (correct|wrong) "
        r"\(reward [01]\)",
        lines[1],
    ), lines[1]
    assert re.fullmatch(r"  turn 1: '.*'( \* \d+)?", lines[2])  # a run of bytes: counted
    episode = lines[1 : next(i for i, line in enumerate(lines[2:], 2) if line[0] != " ")]
    turns = int(lines[1].split(" -> ")[-1].split(" ")[0])
    assert [line.split(":")[0] for line in episode[1:]] == [
        f"  {kind} {n}" for n in range(1, turns + 1) for kind in ("turn", "reply")
    ][: 2 * turns - 1]
    assert lines[-1].startswith("Accuracy: ")
    refused = run_main(tmp_path, "sample", "--model-path", saved, "--adapter", "addition")
    assert (refused.returncode, refused.stdout) == (2, "")
    assert refused.stderr == (
        f"mathrl: error: --adapter addition cannot be given with --model-path {saved} (recorded "
        f"by the run folder {tmp_path / 'G'}): the run folder's config.json records --adapter "
        f"{GAME}; leave it out\n"
    )


def test_sample_takes_a_checkpoint_file_for_the_fakes_without_a_key(tmp_path: Path) -> None:
    trained = run_main(tmp_path, "--backend", "fake", "--steps", "1", "--log-dir", "A")
    saved = Path(trained.stdout.splitlines()[-1].removeprefix("Saved: "))
    # Outside any run folder that records it: a file is the fake's (MinT's are tinker://).
    loose = tmp_path / "elsewhere" / saved.name
    loose.parent.mkdir()
    loose.write_bytes(saved.read_bytes())
    done = run_main(tmp_path, "sample", "--model-path", str(loose), "--problems", "2")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == "Model: Qwen/Qwen3-0.6B, Vocab: 257, Backend: fake"


def test_sample_shows_bytes_that_are_not_text_escaped(tmp_path: Path) -> None:
    trained = run_main(tmp_path, "--backend", "fake", "--steps", "1", "--log-dir", "R")
    untrained = json.loads((tmp_path / "R" / "checkpoints.jsonl").read_text().splitlines()[0])
    assert untrained["step"] == 0, trained.stderr
    path = untrained["path"]
    done = run_main(
        tmp_path, "sample", "--backend", "fake", "--model-path", path, "--problems", "50"
    )
    assert done.returncode == 0, done.stderr
    # The untrained fake writes random bytes off its target: U+FFFD once decoded.
    assert "\\ufffd" in done.stdout
    assert "\ufffd" not in done.stdout
    assert all(line.isprintable() for line in done.stdout.splitlines())
