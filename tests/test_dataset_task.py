"""The dataset task: rows and reward functions as a task, every row checked, data in the run.

The unit-conversion task of the README is the running example: the shipped
`fixture:units` CSV (or a copy of it), a reward with a relative tolerance of
1e-6 and one metric, in a file as a user would write it (`UNITS`).
"""

from __future__ import annotations

import csv
import json
import math
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given

import dataset_fixtures
import mathrl.service.mint_backend as mint_backend
import strategies
from cli_process import run_main
from conftest import checks_passed
from doubles.fake_mint import FakeMintServer
from mathrl.adapter import NoReference, OptionError, Response
from mathrl.checkpoints import checkpoint_name, run_fingerprint
from mathrl.config import TrainConfig
from mathrl.loop import run_grpo
from mathrl.resolved import as_task
from mathrl.rewards import TaskError
from mathrl.rollout import run_problems
from mathrl.tasks.dataset import DatasetTask, RowError
from mathrl.tasks.dataset.functions import FunctionError
from mathrl.tasks.dataset.rows import BadRow, Keyed, checked, field_text, split_heldout
from mathrl.tasks.dataset.sources import Source, read_source
from mathrl.testing import check_adapter
from mathrl_fakes import ByteTokenizer, FakeBackend
from observing import moves_toward_its_references

UNITS = '''import math


def close(completion, answer, **row):
    """1.0 when the completion is the answer, to a relative 1e-6."""
    text = completion.strip()
    if not text.isascii():  # float() reads other scripts' digits too
        return 0.0
    try:
        return float(math.isclose(float(text), float(answer), rel_tol=1e-6))
    except ValueError:
        return 0.0


def digits(completion, **row):
    return sum(c.isdigit() for c in completion)
'''
"""The README's reward and metric for the unit-conversion task, as a user writes them."""
PROMPT = "{value} {unit_from} in {unit_to}:"
KEY = "sk-test-dataset"
ARGS = ["--task-arg", f"prompt={PROMPT}", "--task-arg", "reward=units.py:close"]


@pytest.fixture
def units(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder holding the user's units.py and a copy of the units CSV, the working folder."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "units.py").write_text(UNITS)
    (tmp_path / "units.csv").write_text(dataset_fixtures.units_csv())
    return tmp_path


def write_csv(path: Path, rows: Sequence[Mapping[str, object]]) -> Path:
    with path.open("w", newline="", encoding="utf-8") as file:
        writer = csv.DictWriter(file, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


def task_in(folder: Path, **options: Any) -> DatasetTask:
    """The units task on the folder's files (run from that folder, as `--task-arg` would be)."""
    given: dict[str, Any] = {"train": str(folder / "units.csv"), "prompt": PROMPT}
    return DatasetTask(**{**given, **options})


# -- the shipped example ---------------------------------------------------------------------


def test_the_shipped_units_file_is_what_its_script_writes() -> None:
    for name, text in dataset_fixtures.files().items():
        assert (dataset_fixtures.DATA / name).read_text(encoding="utf-8") == text, name


@pytest.mark.parametrize("learns", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_the_units_task_is_15_lines_of_code_passes_its_check_and_learns(
    units: Path, learns: bool
) -> None:
    # With --learns, a 20-step learning run (in the slow suite); the fast suite's stand-in is
    # the check without it, then a short run that moves toward the references.
    code = [line for line in UNITS.splitlines() if line.strip()]
    assert len(code) <= 15  # the reward function, the metric and their import
    check = run_main(units, "check-adapter", "dataset", "--task-arg", "train=units.csv", *ARGS,
                     "--task-arg", "metrics=units.py:digits", *["--learns"] * learns)  # fmt: skip
    assert check.returncode == 0, check.stdout + check.stderr
    assert "warning" not in check.stdout + check.stderr
    assert "240 rows read (units.csv): 216 training and 24 held-out problems" in check.stdout
    assert ("\nlearning on the fake backend: accuracy went from" in check.stdout) == learns
    if not learns:
        reward = f"{units / 'units.py'}:close"
        moves_toward_its_references(task_in(units, reward=reward), units / "short")


def test_a_run_says_what_became_of_the_rows_and_records_the_data(units: Path) -> None:
    done = run_main(units, "--backend", "fake", "--adapter", "dataset", "--task-arg",
                    "train=units.csv", *ARGS, "--steps", "2", "--log-dir", "run")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines()[0] == (
        "mathrl: 240 rows read (units.csv): 216 training and 24 held-out problems; 0 skipped "
        "as bad, 0 duplicates dropped, 0 dropped for overlapping the held-out set; the longest "
        "reference takes 17 of 32 tokens"
    )
    config = json.loads((units / "run" / "config.json").read_text())
    assert config["data"] == {"train": read_source(str(units / "units.csv"), "train").digest}
    # Paths recorded absolute: the run folder works from any folder.
    assert config["settings"]["task_args"]["train"] == str(units / "units.csv")
    assert config["settings"]["task_args"]["reward"] == f"{units / 'units.py'}:close"
    assert config["preflight"][0]["line"].startswith("240 rows read")


# -- the data is part of the run ----------------------------------------------------------


def test_a_changed_file_gives_new_checkpoint_names(units: Path) -> None:
    config = TrainConfig()
    before = run_fingerprint(as_task(task_in(units)), config)
    text = (units / "units.csv").read_text().replace("0.4822834646", "0.5")
    (units / "units.csv").write_text(text)
    assert run_fingerprint(as_task(task_in(units)), config) != before


def test_resume_eval_and_sample_refuse_data_that_changed_and_work_from_any_folder(
    units: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    run = run_main(units, "--backend", "fake", "--adapter", "dataset", "--task-arg",
                   "train=units.csv", *ARGS, "--steps", "2", "--log-dir", "run")  # fmt: skip
    assert run.returncode == 0, run.stderr
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    folder = str(units / "run")
    for args in (
        ["--resume", folder, "--steps", "3"],
        ["eval", "--model-path", folder, "--problems", "4"],
        ["sample", "--model-path", folder, "--problems", "4"],
    ):
        done = run_main(elsewhere, *args)
        assert done.returncode == 0, (args, done.stderr)
    text = (units / "units.csv").read_text().replace("0.4822834646", "0.5")
    (units / "units.csv").write_text(text)
    digest = read_source(str(units / "units.csv"), "train").digest
    changed = (
        f"train data {units / 'units.csv'} changed since the run read it (its content's digest "
        f"was {json.loads((units / 'run' / 'config.json').read_text())['data']['train']}, it "
        f"is {digest} now); restore it"
    )
    for args, otherwise in (
        (["--resume", folder, "--steps", "4"], "to resume the run, or start a new one"),
        (["eval", "--model-path", folder], "to evaluate the run on its own data, or give "
         "--adapter and its --task-arg options"),
        (["sample", "--model-path", folder], "to sample the run on its own data, or give "
         "--adapter and its --task-arg options"),
    ):  # fmt: skip
        done = run_main(elsewhere, *args)
        assert done.returncode == 2
        given = "--resume" if args[0] == "--resume" else f"--model-path {folder}"
        assert done.stderr == f"mathrl: error: {given}: {changed} {otherwise}\n"


# -- every row checked ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "options", "message"),
    [
        ("value,unit_from,answer\n1,m,100\n", {},
         "line 2: field 'unit_to' is missing (the prompt template names it; the row's fields: "
         "'value', 'unit_from', 'answer')"),
        ("value,unit_from,unit_to,answer\n2,m,cm,200\n ,m,cm,1\n", {},
         "line 3: field 'value' is empty (the prompt template names it)"),
        ("value,unit_from,unit_to,answer\n2,m,cm,200\n1,m,cm,\n", {},
         "line 3: field 'answer' is empty (the answer)"),
        ("value,unit_from,unit_to,answer\n2,m,cm,200\n1,m\n", {},
         "line 3: field 'unit_to' is empty (the prompt template names it)"),
        ('q,answer\nx,1\n"",2\n', {"prompt": "{q}"},
         "line 3: field 'q' is empty (the prompt template names it)"),
        ('q,answer\nx,1\n"   ",2\n', {"prompt": "{q}"},
         "line 3: field 'q' is empty (the prompt template names it)"),
        ("q,completion,answer\nx,y,1\n", {"prompt": "{q}"},
         "line 2: field 'completion' is reserved: a reward function takes the completion by it"),
    ],
)  # fmt: skip
def test_a_row_that_cannot_be_used_is_refused_naming_its_file_line_and_field(
    tmp_path: Path, text: str, options: dict[str, str], message: str
) -> None:
    path = tmp_path / "t.csv"
    path.write_text(text)
    given: dict[str, Any] = {"train": str(path), "prompt": PROMPT, **options}
    with pytest.raises(RowError) as refused:
        DatasetTask(**given)
    assert str(refused.value) == f"train file '{path}' {message}"
    assert refused.value.option == "train"


def test_a_csv_row_with_more_cells_than_its_header_is_refused(tmp_path: Path) -> None:
    (tmp_path / "t.csv").write_text("prompt,answer\nQ1,1\nQ2,2,oops\nQ3,3\n")
    with pytest.raises(RowError, match=r"t.csv' line 3 has 1 more cells than the header"):
        DatasetTask(train=str(tmp_path / "t.csv"))


def test_the_command_line_refuses_a_bad_row_in_one_line_and_exits_2(units: Path) -> None:
    lines = (units / "units.csv").read_text().splitlines()
    lines[14] = ",".join([*lines[14].split(",")[:3], ""])  # line 15: no answer
    (units / "units.csv").write_text("\n".join(lines) + "\n")
    done = run_main(units, "--backend", "fake", "--adapter", "dataset", "--task-arg",
                    "train=units.csv", *ARGS)  # fmt: skip
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        "mathrl: error: --task-arg train file 'units.csv' line 15: field 'answer' is empty "
        "(the answer)\n"
    )
    skipped = run_main(units, "--backend", "fake", "--adapter", "dataset", "--task-arg",
                       "train=units.csv", *ARGS, "--task-arg", "skip_bad_rows=true",
                       "--steps", "1")  # fmt: skip
    assert skipped.returncode == 0, skipped.stderr
    assert skipped.stderr.splitlines()[0] == (
        "mathrl: 240 rows read (units.csv): 215 training and 24 held-out problems; 1 skipped as "
        "bad, 0 duplicates dropped, 0 dropped for overlapping the held-out set (the first "
        "skipped: train file 'units.csv' line 15: field 'answer' is empty (the answer)); the "
        "longest reference takes 17 of 32 tokens"
    )


def test_every_reference_must_fit_max_tokens_or_its_row_is_skipped(units: Path) -> None:
    done = run_main(units, "--backend", "fake", "--adapter", "dataset", "--task-arg",
                    "train=units.csv", *ARGS, "--max-tokens", "12")  # fmt: skip
    assert done.returncode == 2
    assert re.fullmatch(
        r"mathrl: error: task 'dataset.units': train file 'units.csv' line \d+: field 'answer' "
        r"makes a reference of 1\d tokens, more than max_tokens=12: raise max_tokens, or skip "
        r"such rows \(skip_bad_rows=true\)\n",
        done.stderr,
    )
    task = task_in(units, skip_bad_rows=True)
    line = task.prepare(ByteTokenizer(), 12)
    kept = [k.problem.answer for k in task._data.training + task._data.heldout]
    assert all(len(f" {a}\n") <= 12 for a in kept if a is not None)
    dropped = 240 - len(kept)
    assert f"; {dropped} skipped as bad," in line
    assert line.endswith("the longest reference takes 12 of 12 tokens")


def test_duplicates_are_dropped_a_conflict_is_refused_and_test_rows_leave_training(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    rows = [{"prompt": f"Q{n}", "answer": str(n)} for n in range(10)]
    write_csv(tmp_path / "train.csv", [*rows, rows[3]])
    write_csv(tmp_path / "test.csv", rows[:2])
    task = DatasetTask(train="train.csv", test="test.csv")
    assert task.prepare(ByteTokenizer(), 32).startswith(
        "13 rows read (train.csv, test.csv): 8 training and 2 held-out problems; 0 skipped as "
        "bad, 1 duplicates dropped, 2 dropped for overlapping the held-out set"
    )
    write_csv(tmp_path / "train.csv", [*rows, {"prompt": "Q3", "answer": "4"}])
    with pytest.raises(RowError) as refused:
        DatasetTask(train="train.csv")
    assert str(refused.value) == (
        "train file 'train.csv' line 12 asks what train file 'train.csv' line 5 asks, for "
        "another answer ('3' there, '4' here)"
    )


# -- rewards, metrics, prompts ----------------------------------------------------------------


def test_several_weighted_functions_make_named_parts(units: Path) -> None:
    task = task_in(units, reward="units.py:close,units.py:digits", weights="1,0.1")
    problem = task.build_dataset(0, 1, 1)[0]
    reference = task.reference_completion(problem)
    answer = problem.answer or ""
    digits = sum(c.isdigit() for c in answer)
    reward = task.compute_reward(Response(reference + "\n", "stop", "\n"), problem)
    assert reward == pytest.approx({"close": 1.0, "digits": 0.1 * digits})
    assert task.options["weights"] == "1,0.1"
    # Cut off at the token limit: nothing, whatever the functions would say.
    assert task.compute_reward(Response(reference, "length"), problem) == {
        "close": 0.0, "digits": 0.0
    }  # fmt: skip
    # Correct: the full reward, the sum of the weights (1.1) here.
    assert task.evaluate([1.1, 1.0, 0.0]) == pytest.approx(1 / 3)


def test_a_function_that_fails_is_the_tasks_bug_named_with_its_row(tmp_path: Path) -> None:
    (tmp_path / "bad.py").write_text(
        "def boom(completion, **row):\n    return 1 / 0\n\n"
        "def nan(completion, **row):\n    return float('nan')\n\n"
        "def odd(completion, **row):\n    return 'yes'\n"
    )
    train = write_csv(tmp_path / "t.csv", [{"prompt": f"Q{n}", "answer": "1"} for n in range(5)])
    for name, said in (
        ("boom", "raised ZeroDivisionError: division by zero"),
        ("nan", "returned nan"),
        ("odd", "returned 'yes'"),
    ):
        task = DatasetTask(train=str(train), reward=f"{tmp_path / 'bad.py'}:{name}")
        problem = task.build_dataset(0, 1, 1)[0]
        with pytest.raises(FunctionError) as failed:
            task.compute_reward(Response(" 1\n", "stop", "\n"), problem)
        assert str(failed.value).startswith(f"on {problem.where}, {tmp_path}/bad.py:{name} {said}")
        assert problem.where.startswith(f"train file '{train}' line ")
    done = run_main(tmp_path, "--backend", "fake", "--adapter", "dataset",
                    "--task-arg", "train=t.csv", "--task-arg", "reward=bad.py:boom")  # fmt: skip
    assert done.returncode == 1
    errors = [line for line in done.stderr.splitlines() if "error" in line]
    assert len(errors) == 1  # once, naming the function and the row
    assert "on train file 't.csv' line " in errors[0]
    assert ", bad.py:boom raised ZeroDivisionError: division by zero" in errors[0]


@pytest.mark.parametrize(
    ("options", "option", "message"),
    [
        ({"train": ""}, "train", "train must be your rows: a .jsonl"),
        ({"prompt": "{a.b}"}, "prompt", "prompt must name a row's fields plainly, like {answer} "
         "(got {a.b} in '{a.b}')"),
        ({"prompt": "{value:.2f}"}, "prompt", "prompt must name a row's fields plainly"),
        ({"prompt": "{"}, "prompt", "prompt must be a format string"),
        ({"reward": "close"}, "reward", "reward must be FILE.py:FUNCTION or MODULE:FUNCTION"),
        ({"reward": "nofile.py:f"}, "reward", "reward: no such file 'nofile.py'"),
        ({"reward": "units.py:nothing"}, "reward", "reward: 'units.py' has no function 'nothing'"),
        ({"reward": "nomodule_here:f"}, "reward", "reward: cannot import module 'nomodule_here'"),
        ({"reward": "math:floor"}, "reward", "reward function math:floor cannot take a "
         "completion and a row's fields by name"),
        ({"reward": ""}, "reward", "reward must name at least one function"),
        ({"answer": ""}, "reward", "reward=exact needs an answer field"),
        ({"weights": "1,2"}, "weights", "weights must be 1 positive numbers"),
        ({"weights": "-1"}, "weights", "weights must be 1 positive numbers"),
        ({"correct_at": 0.0}, "correct_at", "correct_at must be a number above 0"),
        ({"max_tokens": 0}, "max_tokens", "max_tokens must be an integer from 1 to 32768"),
        ({"heldout": 0.9}, "heldout", "heldout must be a number above 0 and at most 0.5"),
        ({"chat": "yes"}, "chat", "chat must be true or false"),
        ({"test": "units.csv", "heldout": 0.2}, "heldout",
         "heldout splits train only when test is empty (got test=units.csv)"),
        ({"test": "units.csv", "split_seed": 3}, "split_seed", "split_seed splits train only"),
        ({"chat": True, "stop": ";"}, "stop", "stop ends a text prompt's completion; a "
         "conversation's ends with its turn (got stop=';' with chat=true)"),
    ],
)  # fmt: skip
def test_a_bad_option_is_refused_in_one_line_naming_it(
    units: Path, monkeypatch: pytest.MonkeyPatch, options: dict[str, Any], option: str,
    message: str,
) -> None:  # fmt: skip
    monkeypatch.chdir(units)
    with pytest.raises(OptionError) as refused:
        DatasetTask(**{"train": "units.csv", "prompt": PROMPT, **options})
    assert refused.value.option == option
    assert str(refused.value).startswith(message), str(refused.value)


def test_a_chat_prompt_has_a_system_message_and_ends_with_its_turn(units: Path) -> None:
    task = task_in(units, system="Convert units. Answer with the number alone.", stop="")
    problem = task.build_dataset(0, 1, 1)[0]
    assert task.make_prompt(problem) == [
        {"role": "system", "content": "Convert units. Answer with the number alone."},
        {"role": "user", "content": PROMPT.format_map(dict(problem.fields))},
    ]
    assert as_task(task).stop_for(task.make_prompt(problem)) == ()
    assert task.reference_completion(problem) == problem.answer  # no space: a turn of its own


def test_metrics_are_reported_beside_the_reward(units: Path) -> None:
    task = task_in(units, reward="units.py:close", metrics="units.py:digits")
    problem = task.build_dataset(0, 1, 1)[0]
    assert task.metrics(Response(" 12.5\n", "stop", "\n"), problem) == {"digits": 3.0}
    assert (
        DatasetTask(train=str(units / "units.csv"), prompt=PROMPT).metrics(Response("1"), problem)
        == {}
    )


def test_from_python_the_functions_are_given_as_themselves(units: Path) -> None:
    def close(completion: str, answer: str, **row: object) -> float:
        return 1.0 if completion.strip() == answer else 0.0

    task = DatasetTask(train=str(units / "units.csv"), prompt=PROMPT, reward=[close])
    assert str(task.options["reward"]).endswith(":test_from_python_the_functions_are_given_as_"
                                           "themselves.<locals>.close")  # fmt: skip
    assert check_adapter(task, across_processes=False).startswith("task 'dataset.units'")


# -- no answer field ---------------------------------------------------------------------------


def test_a_task_without_references_is_checked_for_what_it_can_and_the_fake_refuses_it(
    units: Path,
) -> None:
    task = task_in(units, answer="", reward="units.py:digits")
    problem = task.build_dataset(0, 1, 1)[0]
    with pytest.raises(NoReference):
        task.reference_completion(problem)
    summary = check_adapter(task, across_processes=False, learns=True)
    line, note = summary.splitlines()
    assert line.startswith("task 'dataset.units' (mathrl.tasks.dataset:DatasetTask) passed ")
    assert note == (
        "warning: no reference: the dataset task was given no answer field (answer=), so it "
        "has no reference completions; so it was not checked that the reference earns the "
        "most and fits max_tokens, that wrong answers earn less, nor how evaluate counts the "
        "reference, nor whether it learns on the fake"
    )
    done = run_main(units, "--backend", "fake", "--adapter", "dataset", "--task-arg",
                    "train=units.csv", "--task-arg", f"prompt={PROMPT}", "--task-arg",
                    "answer=", "--task-arg", "reward=units.py:digits")  # fmt: skip
    assert done.returncode == 2
    assert done.stderr == (
        "mathrl: error: the fake backend cannot train task 'dataset.units': it learns to write "
        "each problem's reference, and the task has none (the dataset task was given no answer "
        "field (answer=), so it has no reference completions); use the real backend (--backend "
        "mint), or give the task its references\n"
    )


# -- the pure parts, property by property -------------------------------------------------------


@given(strategies.data_rows)
def test_a_field_is_text_or_a_bad_row_naming_it(row: dict[str, object]) -> None:
    for name in ("value", "answer"):
        try:
            text = field_text(row, name, "it")
        except BadRow as bad:
            field = bad.field
        else:
            field = None
            assert text == text.strip() != ""
        assert field in (None, name)


@given(strategies.data_rows_lists, strategies.booleans)
def test_checking_rows_keeps_each_prompt_once_and_counts_the_rest(
    rows: list[dict[str, object]], skip: bool
) -> None:
    source = Source("train", "t.jsonl", "/t.jsonl", tuple(rows),
                    tuple(f"line {n}" for n in range(1, len(rows) + 1)), "0")  # fmt: skip

    def make(row: Mapping[str, object], index: int) -> Keyed[str]:
        prompt = field_text(row, "value", "the prompt")
        answer = field_text(row, "answer", "the answer")
        return Keyed(prompt, prompt, answer, source.where(index))

    try:
        kept, counts = checked(source, make, skip)
    except RowError as refused:
        said = str(refused)
        assert (skip, said.startswith("train file 't.jsonl' line ")) == (False, True)
        return
    assert len({k.key for k in kept}) == len(kept)
    assert len(kept) + counts.skipped + counts.duplicates == counts.read == len(rows)
    assert skip or counts.skipped == 0


@given(strategies.keyed_problems(), strategies.held_out_shares)
def test_a_split_is_a_partition_with_at_least_one_on_each_side(
    problems: list[Keyed[str]], share: float
) -> None:
    training, held = split_heldout(problems, share)
    assert sorted(k.key for k in training + held) == sorted(k.key for k in problems)
    assert min(len(training), len(held)) >= 1
    # Worked example: 10 problems at 0.25 -> round(2.5) = 2 held out, 8 trained on.
    if len(problems) == 10 and share == 0.25:
        assert (len(training), len(held)) == (8, 2)


def test_split_worked_example() -> None:
    problems = [Keyed(str(n), str(n), None, "") for n in range(10)]
    training, held = split_heldout(problems, 0.25)
    assert (len(training), len(held)) == (8, 2)  # round(0.25 x 10) = round(2.5) = 2


def test_exact_is_the_default_reward(units: Path) -> None:
    task = task_in(units)
    problem = task.build_dataset(0, 1, 1)[0]
    answer = problem.answer or ""
    assert task.compute_reward(Response(f" {answer}\n", "stop", "\n"), problem) == 1.0
    assert task.compute_reward(Response(" 1\n", "stop", "\n"), problem) == 0.0
    assert checks_passed(task) > 500


def test_run_grpo_prepares_the_task_and_refuses_references_past_the_budget(units: Path) -> None:
    task = task_in(units)
    config = TrainConfig(steps=1, max_tokens=8)
    backend = FakeBackend.for_run(task, run_problems(task, config), checkpoint_dir=units)
    with pytest.raises(RowError, match="more than max_tokens=8"):
        run_grpo(backend, task, config)


def test_a_relative_tolerance_reward_is_a_real_reward(units: Path) -> None:
    namespace: dict[str, Any] = {}
    exec(compile(UNITS, "units.py", "exec"), namespace)
    close = namespace["close"]
    assert close(Response("100.00000001"), answer="100") == 1.0
    assert close(Response("100.001"), answer="100") == 0.0
    assert close(Response("\uff11\uff10\uff10"), answer="100") == 0.0  # full-width digits
    assert close(Response("nan"), answer="100") == 0.0
    assert close(Response(""), answer="100") == 0.0
    assert math.isclose(1.0, close(Response(" 1e2 "), answer="100"))


def test_a_task_error_from_a_reward_function_names_the_row(units: Path) -> None:
    (units / "strict.py").write_text("def strict(completion, answer, **row):\n"
                                     "    return float(completion)\n")  # fmt: skip
    task = as_task(DatasetTask(train="units.csv", prompt=PROMPT, reward="strict.py:strict"))
    problem = task.adapter.build_dataset(0, 1, 1)[0]
    with pytest.raises(FunctionError) as failed:
        task.adapter.compute_reward(Response("x\n", "stop", "\n"), problem)
    error = TaskError(task, "compute_reward", failed.value, Response("x\n", "stop", "\n"))
    assert str(error).startswith(
        f"task 'dataset.units' failed: compute_reward raised FunctionError: on {problem.where}, "
        "strict.py:strict raised ValueError: could not convert string to float: <input>"
    )
    assert problem.where.startswith("train file 'units.csv' line ")


def test_a_task_without_references_trains_and_evaluates_over_the_mint_sdk(
    units: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The mint SDK's double: the service samples any prompt, whatever its task.
    server = FakeMintServer({}, checkpoint_dir=units / "mint")
    real_open, real_sampler = mint_backend.open_backend, mint_backend.open_sampler

    async def open_on_the_double(config: Any, env: Any, **kwargs: Any) -> Any:
        return await real_open(config, env, service_client=server.connect(), **kwargs)

    async def sampler_on_the_double(config: Any, env: Any, path: Any, **kwargs: Any) -> Any:
        return await real_sampler(config, env, path, service_client=server.connect(), **kwargs)

    monkeypatch.setattr(mint_backend, "open_backend", open_on_the_double)
    monkeypatch.setattr(mint_backend, "open_sampler", sampler_on_the_double)
    args = ["--adapter", "dataset", "--task-arg", "train=units.csv", "--task-arg",
            f"prompt={PROMPT}", "--task-arg", "answer=", "--task-arg", "reward=units.py:digits",
            "--task-arg", "correct_at=0.5"]  # fmt: skip
    done = run_main(units, *args, "--steps", "2", "--log-dir", "run", MINT_API_KEY=KEY)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1].startswith("Saved: tinker://")
    assert "240 rows read (units.csv)" in done.stderr  # no reference: no budget to check
    evaluated = run_main(units, "eval", *args, "--problems", "4", "--k", "1", MINT_API_KEY=KEY)
    assert evaluated.returncode == 0, evaluated.stderr
    assert "greedy accuracy" in evaluated.stdout


def test_editing_a_reward_function_gives_new_checkpoint_names(units: Path) -> None:
    config = TrainConfig()
    before = as_task(task_in(units, reward="units.py:close"))
    (units / "units.py").write_text(UNITS.replace("rel_tol=1e-6", "rel_tol=1e-3"))
    sys.modules.pop("units", None)
    after = as_task(task_in(units, reward="units.py:close"))
    assert after.version != before.version
    assert checkpoint_name(after, config, 1) != checkpoint_name(before, config, 1)
