"""`mathrl.cli.run_folder`'s files, read back: torn lines, bad files, what resume needs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mathrl.cli.run_folder import (
    RunFolder,
    RunFolderError,
    _fresh,
    read_jsonl,
    read_run,
    run_holding,
)
from mathrl.config import Config, TrainConfig
from mathrl.report import Checkpoint


def test_a_torn_last_line_is_skipped_and_a_torn_middle_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1}\n{"step": 2}\n{"step": 3, "acc')  # the crash came mid-write
    assert read_jsonl(path) == [{"step": 1}, {"step": 2}]
    path.write_text('{"step": 1}\n{"step": \n{"step": 3}\n')
    with pytest.raises(RunFolderError, match=r"metrics\.jsonl line 2 is not JSON"):
        read_jsonl(path)
    path.write_text('["not", "a", "record"]\n')
    with pytest.raises(RunFolderError, match="line 1 is not a mathrl record"):
        read_jsonl(path)
    assert read_jsonl(tmp_path / "missing.jsonl") == []
    with pytest.raises(RunFolderError, match="cannot read"):
        read_jsonl(tmp_path)  # a folder


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (None, r"is not a run folder \(No such file or directory: config\.json\)"),
        ("not json", r"config\.json is not JSON"),
        ('{"task": "x"}', r"config\.json is not a mathrl run's config"),
    ],
)
def test_a_folder_that_is_not_a_run_is_named(
    tmp_path: Path, config: str | None, message: str
) -> None:
    if config is not None:
        (tmp_path / "config.json").write_text(config)
    with pytest.raises(RunFolderError, match=message):
        read_run(tmp_path)


def folder_with(tmp_path: Path, *checkpoints: Checkpoint) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    folder = RunFolder(tmp_path)
    folder.write_config({"settings": {"steps": 9, "seed": 3, "adapter": "x:Y"}})
    for checkpoint in checkpoints:
        folder.on_checkpoint(checkpoint)
    return tmp_path


def test_the_resume_point_is_the_last_state_and_the_samplers_around_it(tmp_path: Path) -> None:
    path = folder_with(
        tmp_path,
        Checkpoint(0, "sampler", "s0"),
        Checkpoint(0, "state", "t0"),
        Checkpoint(1, "sampler", "s1"),
        Checkpoint(3, "sampler", "s3"),
        Checkpoint(3, "state", "t3"),
        Checkpoint(4, "sampler", "s4"),
    )
    point = read_run(path).resume_point()
    assert point is not None
    # Step 3's state; step 3's sampler; the latest one before step 3 is step 1's.
    assert (point.step, point.state_path, point.sampler_path, point.lagged_sampler_path) == (
        3, "t3", "s3", "s1"
    )  # fmt: skip
    assert read_run(path).train_config() == TrainConfig(steps=9, seed=3)


def test_a_run_without_a_saved_state_has_no_resume_point(tmp_path: Path) -> None:
    # Nothing to continue from: a resume starts such a run over.
    assert (
        read_run(folder_with(tmp_path / "a", Checkpoint(0, "sampler", "s0"))).resume_point() is None
    )
    with pytest.raises(RunFolderError, match="records no sampler checkpoint"):
        read_run(folder_with(tmp_path / "b", Checkpoint(0, "state", "t0"))).resume_point()


def test_resuming_drops_the_records_it_will_write_again(tmp_path: Path) -> None:
    folder = RunFolder(
        folder_with(tmp_path, Checkpoint(2, "state", "t2"), Checkpoint(3, "sampler", "s3"))
    )
    for step in (1, 2, 3):
        folder.append("metrics.jsonl", {"step": step})
    folder.truncate_after(2)
    assert read_jsonl(tmp_path / "metrics.jsonl") == [{"step": 1}, {"step": 2}]
    assert [c["step"] for c in read_jsonl(tmp_path / "checkpoints.jsonl")] == [2]


def test_a_new_run_folder_never_reuses_a_name(tmp_path: Path) -> None:
    (tmp_path / "run").mkdir()
    (tmp_path / "run-2").mkdir()
    assert _fresh(tmp_path / "run") == tmp_path / "run-3"
    assert _fresh(tmp_path / "new") == tmp_path / "new"


def test_a_folder_that_cannot_be_written_is_a_one_line_error(tmp_path: Path) -> None:
    config = Config(train=TrainConfig(), log_dir=str(tmp_path / "run"), backend="fake")
    folder = RunFolder.create(config, "addition", "0123abcd", "0.2.0")
    written = json.loads((tmp_path / "run" / "config.json").read_text())
    assert written["settings"]["log_dir"] == str(tmp_path / "run")
    (tmp_path / "run" / "metrics.jsonl").mkdir()  # where a file should be
    with pytest.raises(RunFolderError, match=r"cannot write .*metrics\.jsonl \(Is a directory\)"):
        folder.append("metrics.jsonl", {"step": 1})


def test_a_checkpoint_is_found_in_the_run_folder_that_records_it(tmp_path: Path) -> None:
    run = folder_with(tmp_path / "run", Checkpoint(1, "sampler", "elsewhere/task-step1.json"))
    (run / "ckpt").mkdir()
    saved, stray = run / "ckpt" / "task-step1.json", run / "ckpt" / "other.json"
    saved.write_text("{}")
    stray.write_text("{}")
    # Recorded (by its name: the run may have been made from another folder) or the folder.
    assert run_holding(str(saved)) == read_run(run)
    assert run_holding(str(run)) == read_run(run)
    # Inside it but never recorded; a config.json another program wrote above it; no file.
    assert run_holding(str(stray)) is None
    (tmp_path / "config.json").write_text('{"name": "not a run"}')
    assert run_holding(str(stray)) is None
    assert run_holding(str(run / "ckpt" / "missing.json")) is None
    assert run_holding("x" * 5000) is None  # too long a name to look up


def test_a_path_that_is_no_file_is_found_in_the_run_folder_under_runs_that_records_it(
    tmp_path: Path,
) -> None:
    runs = tmp_path / "runs"
    path = "tinker://run-7/sampler_weights/step2"
    first = folder_with(runs / "b-run", Checkpoint(2, "sampler", path))
    folder_with(runs / "c-run", Checkpoint(2, "sampler", path))  # the same path: the first wins
    folder_with(runs / "a-run", Checkpoint(2, "sampler", "tinker://run-6/sampler_weights/step2"))
    (runs / "a0-other").mkdir()  # not a run, though it names the path: passed over
    (runs / "a0-other" / "config.json").write_text("not JSON")
    (runs / "a0-other" / "checkpoints.jsonl").write_text(json.dumps({"path": path}) + "\n")
    assert run_holding(path, runs) == read_run(first)
    assert run_holding(path + "0", runs) is None  # recorded nowhere: the whole path must match
    assert run_holding(path, tmp_path / "no-runs-here") is None
