"""The math dataset task: sources, options, the epoch shuffle, prompts, rewards, the contract.

Tests of Parquet and Hugging Face sources need `mathrl[datasets]`, and of the
default grader `mathrl[math]` (CI installs both); without them they skip, and say so.
"""

from __future__ import annotations

import csv
import importlib.metadata
import importlib.util
import json
import os
import statistics
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest
from hypothesis import given

import math_fixtures
import strategies
from cli_process import run_main
from conftest import checks_passed, needs_extra
from mathrl.adapter import OptionError, Response, Unavailable
from mathrl.checkpoints import run_fingerprint
from mathrl.config import TrainConfig
from mathrl.loop import run_grpo
from mathrl.resolved import as_task
from mathrl.rollout import run_problems
from mathrl.tasks import BUILT_IN
from mathrl.tasks.dataset.rows import Keyed, RowError, epoch_draw, split_heldout
from mathrl.tasks.dataset.sources import FIXTURES
from mathrl.tasks.math import MathDatasetAdapter, MathProblem
from mathrl.tasks.math.prompts import EXAMPLES, worked
from mathrl.testing import check_adapter
from mathrl_fakes import ByteTokenizer, FakeBackend

needs_math_verify = needs_extra("math_verify", "math")
needs_pyarrow = needs_extra("pyarrow", "datasets")
needs_datasets = needs_extra("datasets", "datasets")
DATA = math_fixtures.DATA
ROWS = [
    {"question": "Ann has 3 apples and buys 4 more. How many apples does she have?",
     "answer": "She has 3+4=<<3+4=7>>7 apples.\n#### 7"},
    {"question": "A box holds 1,000 nails. How many nails are in 2 boxes?",
     "answer": "#### 2,000"},
    {"question": "What is half of 9?", "answer": "4.5"},
    {"question": "What is $\\frac{1}{2} + \\frac{1}{4}$?",
     "answer": "Adding gives $\\boxed{\\frac{3}{4}}$."},
]  # fmt: skip
"""Rows with each way of writing an answer: GSM8K's, a comma, a bare one, MATH's."""
GOLD = ["7", "2,000", "4.5", "\\frac{3}{4}"]


def write(path: Path, rows: Sequence[Mapping[str, object]]) -> Path:
    """`rows` in the format of `path`'s extension."""
    if path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    elif path.suffix == ".json":
        path.write_text(json.dumps(rows), encoding="utf-8")
    elif path.suffix == ".csv":
        with path.open("w", newline="", encoding="utf-8") as file:
            writer = csv.DictWriter(file, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    else:
        import pyarrow
        import pyarrow.parquet

        pyarrow.parquet.write_table(pyarrow.Table.from_pylist(rows), path)
    return path


def problems_of(task: MathDatasetAdapter) -> list[MathProblem]:
    return [*task.training, *task.heldout_problems]


# -- the shipped data ---------------------------------------------------------------------


def test_the_shipped_data_is_what_its_script_writes() -> None:
    for name, text in math_fixtures.files().items():
        assert (DATA / name).read_text(encoding="utf-8") == text, name
    ours = {file for package, file in FIXTURES.values() if package == "mathrl.tasks.math"}
    assert ours == set(math_fixtures.files())


def test_the_shipped_word_problems_are_200_and_50_apart_with_gsm8k_answers() -> None:
    task = MathDatasetAdapter()
    # One training row is the prompts' worked example: shown, so not trained on.
    assert (len(task.training), len(task.examples), len(task.heldout_problems)) == (199, 1, 50)
    assert not set(task.examples) & set(task.training)
    assert not {p.question for p in task.training} & {p.question for p in task.heldout_problems}
    assert all("\n#### " in p.solution and "<<" in p.solution for p in problems_of(task))
    assert any("," in p.answer for p in problems_of(task))  # 1,000 or more, with commas


# -- sources ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "suffix", [".jsonl", ".json", ".csv", pytest.param(".parquet", marks=needs_pyarrow)]
)
def test_each_file_format_gives_the_same_problems(tmp_path: Path, suffix: str) -> None:
    train = write(tmp_path / f"train{suffix}", ROWS)
    test = write(tmp_path / f"test{suffix}", ROWS[:1])
    task = MathDatasetAdapter(train=str(train), test=str(test), few_shot=0)
    assert [p.answer for p in task.heldout_problems] == GOLD[:1]
    assert [p.answer for p in task.training] == GOLD[1:]  # the test's question left out


def test_a_json_field_may_hold_a_number_and_a_row_without_an_answer_is_refused_by_row(
    tmp_path: Path,
) -> None:
    rows: list[Mapping[str, object]] = [*ROWS, {"question": "Q", "answer": 12}]
    task = MathDatasetAdapter(
        train=str(write(tmp_path / "t.json", rows)), heldout=0.5, grader="exact"
    )
    assert "12" in [p.answer for p in problems_of(task)]
    rows.append({"question": "Q2", "answer": "a\nb"})  # two lines, no box, no ####
    with pytest.raises(RowError) as refused:
        MathDatasetAdapter(train=str(write(tmp_path / "t.json", rows)), heldout=0.5)
    assert str(refused.value) == (
        f"train file '{tmp_path / 't.json'}' row 6: field 'answer' states no final answer: no "
        "closed \\boxed{}, no '####' line, and not one line"
    )
    skipping = MathDatasetAdapter(
        train=str(tmp_path / "t.json"), heldout=0.5, grader="exact", skip_bad_rows=True
    )
    assert len(problems_of(skipping)) + len(skipping.examples) == 5
    assert "5 held-out problems" not in skipping.prepare(ByteTokenizer(), 512)
    assert "1 skipped as bad" in skipping.prepare(ByteTokenizer(), 512)


def test_blank_lines_are_no_rows_and_a_field_of_another_type_is_no_answer(tmp_path: Path) -> None:
    rows: list[Mapping[str, object]] = [*ROWS, {"question": "Q", "answer": None}]
    rows.append({"question": "Q2", "answer": [7]})
    path = write(tmp_path / "t.jsonl", rows)
    path.write_text(path.read_text() + "\n  \n")
    task = MathDatasetAdapter(train=str(path), heldout=0.5, skip_bad_rows=True)
    assert len(problems_of(task)) + len(task.examples) == len(ROWS)
    line = task.prepare(ByteTokenizer(), 512)
    # 4 good rows: 2 held out (0.5), 1 the worked example, 1 to train on.
    assert line.startswith(f"6 rows read ({path}): 1 training and 2 held-out problems; 2 skipped")
    assert "(the first skipped: train file" in line
    with pytest.raises(RowError, match=r"line 5: field 'answer' is empty \(the answer\)$"):
        MathDatasetAdapter(train=str(path), heldout=0.5)
    path.write_text(path.read_text().replace('"answer": null', '"answer": 7'))
    with pytest.raises(RowError, match=r"line 6: field 'answer' must be text or a number"):
        MathDatasetAdapter(train=str(path), heldout=0.5)


def test_a_csv_file_python_cannot_read_is_refused(tmp_path: Path) -> None:
    (tmp_path / "t.csv").write_text("question,answer\n" + "x" * 200_000 + ",1\n")
    with pytest.raises(OptionError, match="it is not CSV: field larger than field limit"):
        MathDatasetAdapter(train=str(tmp_path / "t.csv"))


@needs_datasets
def test_a_hugging_face_dataset_loads_through_datasets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The Hub is unreachable here: a local folder is a dataset name datasets loads offline.
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import datasets

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "cache")
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    folder = tmp_path / "gsm"
    folder.mkdir()
    write(folder / "train.jsonl", ROWS[1:])
    write(folder / "test.jsonl", ROWS[:1])
    task = MathDatasetAdapter(train=f"hf:{folder}:train", test=f"hf:{folder}:test", few_shot=0)
    assert [p.answer for p in task.training] == GOLD[1:]
    assert [p.answer for p in task.heldout_problems] == GOLD[:1]
    with pytest.raises(OptionError, match=r"^train: datasets cannot load hf:openai/gsm8k:main"):
        MathDatasetAdapter(train="hf:openai/gsm8k:main:train")  # offline: fails at once


@pytest.mark.parametrize(
    ("options", "option", "message"),
    [
        ({"train": "x.txt"}, "train", "train must be a .jsonl, .json, .csv or .parquet file, "
         "fixture:NAME or hf:NAME[:CONFIG]:SPLIT (got 'x.txt')"),
        ({"train": "fixture:gsm"}, "train", "train must name a shipped fixture, gsm-train, "
         "gsm-test, equivalence or units (got 'fixture:gsm')"),
        ({"train": "missing.jsonl"}, "train", "train file 'missing.jsonl' cannot be read: "),
        ({"train": "hf:gsm8k"}, "train", "train must be hf:NAME:SPLIT or hf:NAME:CONFIG:SPLIT"),
        ({"train": ""}, "train", "train must be a non-empty string (got '')"),
        ({"test": 3}, "test", "test must be a source, or empty (got 3)"),
        ({"prompt": "text"}, "prompt", "prompt must be chat or few-shot (got 'text')"),
        ({"grader": "sympy"}, "grader", "grader must be math-verify or exact (got 'sympy')"),
        ({"instruction": "Answer."}, "instruction", "instruction must be text of at most 2000 "
         "characters that asks for the final answer in \\boxed{} (got 'Answer.')"),
        ({"few_shot": 9}, "few_shot", "few_shot must be an integer from 0 to 8 (got 9)"),
        ({"few_shot": True}, "few_shot", "few_shot must be an integer from 0 to 8 (got True)"),
        ({"heldout": 0.0}, "heldout", "heldout must be a number above 0 and at most 0.5"),
        ({"heldout": 0.2}, "heldout", "heldout splits train only when test is empty "
         "(got heldout=0.2 with test=fixture:gsm-test)"),
        ({"grading_timeout": 0}, "grading_timeout", "grading_timeout must be a number of "
         "seconds above 0 and at most 60 (got 0)"),
        ({"max_tokens": 8}, "max_tokens", "max_tokens must be an integer from 32 to 32768"),
        ({"question": "problem"}, "question", "question must name a field of train's rows: "
         "no row has 'problem' (the first row's fields: 'question', 'answer')"),
        ({"train": "fixture:equivalence", "question": "problem"}, "answer",
         "answer must name a field of train's rows: no row has 'answer' (the first row's "
         "fields: 'problem', 'solution', 'equivalent', 'different')"),
        ({"train": "fixture:gsm-test", "test": "fixture:gsm-test"}, "test",
         "test holds every problem of train (fixture:gsm-test): none is left"),
        ({"examples": "mine"}, "examples", "examples must be train or built-in (got 'mine')"),
        ({"skip_bad_rows": 1}, "skip_bad_rows", "skip_bad_rows must be true or false (got 1)"),
    ],
)  # fmt: skip
def test_a_bad_option_is_refused_in_one_line_naming_it(
    options: dict[str, object], option: str, message: str
) -> None:
    with pytest.raises(OptionError) as refused:
        MathDatasetAdapter(**options)  # type: ignore[arg-type]  # wrong types on purpose
    assert refused.value.option == option
    assert str(refused.value).startswith(message)
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ('{"question": "q", "answer": "1"}\n[1]\n', "line 2 is not a JSON object"),
        ('{"question": "q"\n', "line 1 is not JSON: "),
        ("", "(got 0 rows, none usable)"),
    ],
)
def test_a_file_that_holds_no_problems_is_refused(tmp_path: Path, text: str, why: str) -> None:
    (tmp_path / "t.jsonl").write_text(text)
    with pytest.raises(OptionError, match=r"^train ") as refused:
        MathDatasetAdapter(train=str(tmp_path / "t.jsonl"))
    assert why in str(refused.value)


def test_a_json_file_must_hold_a_list_of_objects(tmp_path: Path) -> None:
    (tmp_path / "t.json").write_text('{"question": "q"}')
    with pytest.raises(OptionError, match="it must hold a list of JSON objects"):
        MathDatasetAdapter(train=str(tmp_path / "t.json"))
    (tmp_path / "t.json").write_text("{")
    with pytest.raises(OptionError, match="it is not JSON"):
        MathDatasetAdapter(train=str(tmp_path / "t.json"))


@pytest.mark.slow
@needs_pyarrow
def test_a_broken_parquet_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "t.parquet").write_bytes(b"not parquet")
    with pytest.raises(OptionError, match=r"^train file '.*t.parquet' cannot be read: "):
        MathDatasetAdapter(train=str(tmp_path / "t.parquet"))


def test_without_the_extras_the_sources_that_need_them_say_how_to_get_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    monkeypatch.setitem(sys.modules, "datasets", None)
    with pytest.raises(OptionError, match=r"is Parquet, which needs pyarrow: pip install 'mathr"):
        MathDatasetAdapter(train=str(tmp_path / "t.parquet"))
    with pytest.raises(OptionError, match=r"needs the datasets package: pip install 'mathrl\[d"):
        MathDatasetAdapter(train="hf:openai/gsm8k:main:train")


# -- options, version, held-out ------------------------------------------------------------------


def test_options_hold_what_differs_from_the_defaults(tmp_path: Path) -> None:
    assert MathDatasetAdapter().options == {}
    assert MathDatasetAdapter(train="fixture:gsm-train", few_shot=1).options == {}
    train = str(write(tmp_path / "t.jsonl", ROWS))
    task = MathDatasetAdapter(train=train, few_shot=2, heldout=0.5, examples="built-in")
    assert task.options == {"train": train, "few_shot": 2, "heldout": 0.5, "examples": "built-in"}
    assert as_task(task).options == task.options


def test_the_data_is_part_of_the_run_and_the_version_is_the_code(tmp_path: Path) -> None:
    path = write(tmp_path / "t.jsonl", ROWS)
    before = MathDatasetAdapter(train=str(path))
    config = TrainConfig()
    name = run_fingerprint(as_task(before), config)
    assert MathDatasetAdapter(train=str(path)).data == before.data
    write(path, [*ROWS[:3], {**ROWS[3], "answer": "\\boxed{1}"}])
    after = MathDatasetAdapter(train=str(path))
    assert after.data["train"] != before.data["train"]
    assert after.version == before.version  # the same code
    assert run_fingerprint(as_task(after), config) != name  # new data, new checkpoint names
    moved = tmp_path / "elsewhere.jsonl"
    moved.write_bytes(path.read_bytes())
    # The same data under another path trains alike: its digest stands for its path.
    assert run_fingerprint(as_task(MathDatasetAdapter(train=str(moved))), config) == (
        run_fingerprint(as_task(after), config)
    )


def test_a_seeded_share_of_train_is_held_out_and_never_trained_on(tmp_path: Path) -> None:
    rows = [{"question": f"What is {n} + 1?", "answer": str(n + 1)} for n in range(40)]
    rows.append(rows[0])  # a repeated question stays on one side
    task = MathDatasetAdapter(
        train=str(write(tmp_path / "t.csv", rows)), heldout=0.25, grader="exact"
    )
    held = {p.question for p in task.heldout_problems}
    assert len(held) == 10  # 0.25 x 40 distinct questions
    assert not held & {p.question for p in task.training}
    again = MathDatasetAdapter(train=str(tmp_path / "t.csv"), heldout=0.25)
    assert again.heldout_problems == task.heldout_problems  # the same split every time
    assert "1 duplicates dropped" in task.prepare(ByteTokenizer(), 512)


def test_a_split_needs_two_problems() -> None:
    one = Keyed(MathProblem("q", "1", "1"), "q", "1", "line 1")
    with pytest.raises(OptionError, match="at least two distinct problems"):
        split_heldout([one], 0.1)
    other = Keyed(MathProblem("r", "2", "2"), "r", "2", "line 2")
    training, held = split_heldout([one, other], 0.1)  # 0.1 x 2 rounds to 0: at least 1
    assert len(held) == 1
    assert {k.key for k in training} ^ {k.key for k in held} == {"q", "r"}


def test_held_out_problems_come_in_order_for_every_seed_and_repeat_past_the_end() -> None:
    task = MathDatasetAdapter()
    assert task.heldout_dataset(0, 50) == list(task.heldout_problems)
    assert task.heldout_dataset(7, 3) == list(task.heldout_problems[:3])
    assert task.heldout_dataset(0, 52)[50:] == list(task.heldout_problems[:2])


# -- the epoch shuffle -----------------------------------------------------------------------


@given(strategies.problem_counts, strategies.seeds, strategies.batch_sizes)
def test_each_epoch_takes_every_problem_once(count: int, seed: int, size: int) -> None:
    steps = 3 * count // size + 1  # at least three epochs
    stream = [i for step in range(1, steps + 1) for i in epoch_draw(count, seed, step, size)]
    for epoch in range(len(stream) // count):
        assert sorted(stream[epoch * count : (epoch + 1) * count]) == list(range(count))


@given(strategies.problem_counts, strategies.seeds, strategies.steps, strategies.batch_sizes)
def test_a_step_draws_the_same_problems_whatever_was_drawn_before(
    count: int, seed: int, step: int, size: int
) -> None:
    first = epoch_draw(count, seed, step + 1, size)
    epoch_draw(count, seed + 1, 1, size)  # other draws between
    assert epoch_draw(count, seed, step + 1, size) == first


def test_the_draws_are_the_same_in_another_process() -> None:
    here = [epoch_draw(200, seed, step, 8) for seed in (0, 1, -5) for step in (1, 2, 30, 31)]
    script = (
        "from mathrl.tasks.dataset.rows import epoch_draw\n"
        "print([epoch_draw(200, s, k, 8) for s in (0, 1, -5) for k in (1, 2, 30, 31)])"
    )
    env = {**os.environ, "PYTHONHASHSEED": "123"}  # hash() differs; the draws must not
    there = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, env=env
    )
    assert there.stdout.strip() == str(here)


def test_training_walks_the_shipped_problems_an_epoch_at_a_time() -> None:
    task = MathDatasetAdapter(few_shot=0)
    epoch = [p.question for step in range(1, 26) for p in task.build_dataset(3, step, 8)]
    assert sorted(epoch) == sorted(p.question for p in task.training)  # 25 x 8 = 200, once each
    assert task.build_dataset(3, 26, 8) != task.build_dataset(3, 1, 8)  # a new shuffle


# -- prompts and rewards --------------------------------------------------------------------------


def test_a_chat_prompt_shows_worked_examples_then_asks_for_a_box() -> None:
    task = MathDatasetAdapter(few_shot=2, examples="built-in")
    problem = task.heldout_problems[0]
    turns = task.make_prompt(problem)
    assert isinstance(turns, list)
    assert [t["role"] for t in turns] == ["user", "assistant", "user", "assistant", "user"]
    assert turns[-1]["content"] == f"{problem.question}\n\n{task.instruction}"
    assert turns[1]["content"].endswith("The final answer is \\boxed{16}.")
    assert as_task(task).stop_for(turns) == ()
    assert task.reference_completion(problem) == f"\\boxed{{{problem.answer}}}"


def test_a_few_shot_prompt_is_text_that_stops_at_the_next_question() -> None:
    task = MathDatasetAdapter(prompt="few-shot", few_shot=1, examples="built-in")
    problem = task.heldout_problems[0]
    text = task.make_prompt(problem)
    assert isinstance(text, str)
    assert text.startswith(f"{task.instruction}\n\nQuestion: A baker makes 3 trays")
    assert text.endswith(f"\n\nQuestion: {problem.question}\nAnswer:")
    assert task.stop == ("\n\nQuestion:",)
    reference = task.reference_completion(problem)
    completion = Response(reference + "\n\nQuestion:", "stop", "\n\nQuestion:")
    assert task.compute_reward(completion, problem) == {"correct": 1.0, "format": 0.1}
    zero_shot = MathDatasetAdapter(prompt="few-shot", few_shot=0).make_prompt(problem)
    assert zero_shot == f"{task.instruction}\n\nQuestion: {problem.question}\nAnswer:"


def test_a_math_format_solution_is_worked_as_it_is() -> None:
    task = MathDatasetAdapter(
        train="fixture:equivalence", question="problem", answer="solution", few_shot=0
    )
    problem = task.training[0]
    assert problem.solution.endswith(f"$\\boxed{{{problem.answer}}}$.")
    assert worked(problem) == problem.solution


@pytest.mark.parametrize(
    ("completion", "parts"),
    [
        ("The baker... so \\boxed{245}.", (1.0, 0.1)),  # right, boxed: everything
        ("\\boxed{245.0}", (1.0, 0.1)),  # the same number
        ("\\boxed{246}", (0.0, 0.1)),  # wrong, boxed: the format alone
        ("245", (1.0, 0.0)),  # right, bare: correct, not the asked form
        ("Working...\n#### 245", (1.0, 0.0)),  # GSM8K's form: correct, not the asked form
        ("Working...\nso 245", (0.0, 0.0)),  # no final answer stated
        ("\\boxed{245", (0.0, 0.0)),  # cut off inside the box
        ("", (0.0, 0.0)),
        ("ab7 " * 2_500, (0.0, 0.0)),  # 10,000 characters
        ("\\boxed{" + "{" * 10_000 + "}", (0.0, 0.0)),  # nested past any answer
    ],
)
def test_reward_worked_examples(completion: str, parts: tuple[float, float]) -> None:
    problem = MathProblem("How many rose bushes are left?", "245", "#### 245")
    reward = MathDatasetAdapter().compute_reward(Response(completion, "end_of_turn"), problem)
    assert (reward["correct"], reward["format"]) == parts


@pytest.mark.slow
@needs_math_verify
def test_a_latex_bomb_in_the_box_scores_the_format_alone() -> None:
    task = MathDatasetAdapter(grading_timeout=1.0)
    problem = MathProblem("q", "1", "#### 1")
    reward = task.compute_reward("\\boxed{9^{9^{9^{9}}}}", problem)  # killed after 1 s
    assert reward == {"correct": 0.0, "format": 0.1}


def test_wrong_completions_earn_partial_credit_and_evaluate_counts_correct_ones() -> None:
    task = MathDatasetAdapter()
    problem = task.heldout_problems[0]
    boxed, bare = task.wrong_completions(problem)
    assert task.compute_reward(boxed, problem) == {"correct": 0.0, "format": 0.1}
    assert task.compute_reward(bare, problem) == {"correct": 0.0, "format": 0.0}
    assert task.evaluate([1.1, 1.0, 0.1, 0.0]) == 0.5  # 1.1 and 1.0 are correct
    assert task.evaluate([]) == 0.0


@given(strategies.answer_texts)
def test_a_reward_never_raises(text: str) -> None:
    task = MathDatasetAdapter(grader="exact")
    reward = task.compute_reward(Response(text, "length"), task.heldout_problems[0])
    assert set(reward) == {"correct", "format"}


# -- the contract ------------------------------------------------------------------------------


def test_preflight_says_what_grades_and_refuses_without_math_verify(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    task = MathDatasetAdapter(grader="exact")
    assert task.preflight() == "grading: exact numbers and identical answers only"
    assert task.prepare(ByteTokenizer(), 512) == (
        "250 rows read (fixture:gsm-train, fixture:gsm-test): 199 training and 50 held-out "
        "problems; 0 skipped as bad, 0 duplicates dropped, 0 dropped for overlapping the "
        "held-out set; 1 worked example from train; the longest reference takes 14 of 512 tokens"
    )
    monkeypatch.setattr(importlib.metadata, "version", _not_installed)
    with pytest.raises(Unavailable, match=r"not installed: pip install 'mathrl\[math\]'"):
        MathDatasetAdapter().preflight()


def _not_installed(name: str) -> str:
    raise importlib.metadata.PackageNotFoundError(name)


@pytest.mark.slow
@needs_math_verify
def test_the_default_task_passes_check_adapter() -> None:
    assert checks_passed(MathDatasetAdapter()) >= 300  # the grader's preflight line included
    assert "math-verify" in (as_task(MathDatasetAdapter()).preflight() or "")


@needs_math_verify
@pytest.mark.slow  # math-verify grading a file's answers; the default task's check stays fast
def test_a_math_format_file_written_here_passes_check_adapter(tmp_path: Path) -> None:
    rows = [json.loads(line) for line in (DATA / "equivalence.jsonl").read_text().splitlines()]
    train = write(tmp_path / "math.jsonl", rows)
    task = MathDatasetAdapter(
        train=str(train), question="problem", answer="solution", prompt="few-shot", heldout=0.2
    )
    assert check_adapter(task).startswith("task 'math'")


def test_the_exact_grader_passes_check_adapter_without_math_verify() -> None:
    task = MathDatasetAdapter(grader="exact")
    assert check_adapter(task, across_processes=False).startswith("task 'math'")


def test_math_is_a_built_in_task(tmp_path: Path) -> None:
    assert BUILT_IN["math"][0] == "mathrl.tasks.math:MathDatasetAdapter"
    listed = run_main(tmp_path, "tasks")
    assert any(line.startswith("math ") for line in listed.stdout.splitlines())


@needs_math_verify
@pytest.mark.slow  # 20 steps with evaluations: about 5 s
def test_held_out_greedy_accuracy_rises_20_points_in_20_steps_on_the_fake(tmp_path: Path) -> None:
    task = MathDatasetAdapter()
    config = TrainConfig(steps=20, eval_every=5, eval_problems=50)
    backend = FakeBackend.for_run(task, run_problems(task, config), checkpoint_dir=tmp_path)
    result = run_grpo(backend, task, config)
    accuracy = [e.accuracy for e in result.evaluations]
    assert [e.step for e in result.evaluations] == [0, 5, 10, 15, 20]
    assert accuracy[-1] >= accuracy[0] + 0.20, accuracy
    training = [m.accuracy for m in result.steps]
    assert statistics.mean(training[15:]) >= statistics.mean(training[:5]) + 0.20
    parts = result.steps[0].reward_parts
    assert 0 < parts["correct"] < 1  # partial credit shows
    assert parts["format"] > 0


# -- every row checked (issue 35) ----------------------------------------------------------------


GSM = [{"question": f"Q{n}?", "answer": f"So {n} + 1 = {n + 1}.\n#### {n + 1}"} for n in range(6)]
"""Rows in GSM8K's format: reasoning, then the `####` line."""


@pytest.mark.parametrize(
    ("row", "message"),
    [
        # GSM8K's answer without its #### line: its whole reasoning would be the gold answer.
        ({"question": "Q9?", "answer": "Natalia sold 48/2 = 24 clips in May."},
         "line 7: field 'answer' has no '#### ANSWER' line, as most of this file's answers have "
         "(GSM8K's format): without it the whole text would be the gold answer"),
        ({"question": "", "answer": "#### 3"}, "line 7: field 'question' is empty (the question)"),
        ({"answer": "#### 3"},
         "line 7: field 'question' is missing (the question; the row's fields: 'answer')"),
    ],
)  # fmt: skip
def test_a_gsm8k_row_that_cannot_be_used_is_refused_by_line_and_field(
    tmp_path: Path, row: dict[str, str], message: str
) -> None:
    path = write(tmp_path / "t.jsonl", [*GSM, row])
    with pytest.raises(RowError) as refused:
        MathDatasetAdapter(train=str(path))
    assert str(refused.value) == f"train file '{path}' {message}"


def test_a_math_solution_without_its_box_and_a_bare_sentence_are_refused(tmp_path: Path) -> None:
    boxed = [{"problem": f"What is {n}+1?", "solution": f"It is $\\boxed{{{n + 1}}}$."}
             for n in range(5)]  # fmt: skip
    path = write(tmp_path / "m.jsonl", [*boxed, {"problem": "P?", "solution": "It is 3."}])
    with pytest.raises(RowError, match=r"line 6: field 'solution' has no closed \\boxed\{ANSWER\}"):
        MathDatasetAdapter(train=str(path), question="problem", answer="solution")
    bare = [{"question": f"Q{n}", "answer": str(n)} for n in range(5)]
    path = write(tmp_path / "b.csv", [*bare, {"question": "Q9", "answer": "She has 7 apples."}])
    with pytest.raises(RowError) as refused:
        MathDatasetAdapter(train=str(path))
    assert str(refused.value).endswith(
        "line 7: field 'answer' is a sentence, not an answer: a bare answer is the answer alone "
        "(at most 2 words); end a worked solution with '#### ANSWER' or \\boxed{ANSWER}"
    )
    # Short answers of a word or two, units and expressions are answers.
    ok = [*bare, {"question": "Q7", "answer": "5 cm"}, {"question": "Q8", "answer": "\\frac{3}{4}"}]
    assert MathDatasetAdapter(train=str(write(tmp_path / "c.csv", ok)), grader="exact").training


def test_the_worked_examples_are_training_rows_drawn_seeded_and_not_trained_on() -> None:
    task = MathDatasetAdapter(few_shot=3)
    again = MathDatasetAdapter(few_shot=3)
    assert task.examples == again.examples  # seeded: the same in every run
    assert len(task.examples) == 3
    assert not set(task.examples) & set(task.training)  # shown, so not trained on
    assert len(task.training) + len(task.examples) == 200
    prompt = task.make_prompt(task.heldout_problems[0])
    assert isinstance(prompt, list)
    assert [m["content"].split("\n\n")[0] for m in prompt[:-1:2]] == [
        e.question for e in task.examples
    ]
    built_in = MathDatasetAdapter(few_shot=3, examples="built-in")
    assert built_in.examples == EXAMPLES[:3]
    assert len(built_in.training) == 200


@pytest.mark.parametrize(
    ("completion", "answer"),
    [
        ("so \\boxed{72}", "72"),
        ("so \\boxed{72.0}", "72"),  # the same number, named one way
        ("\\boxed{\\frac{3}{4}}", "3/4"),
        ("\\boxed{0.75}", "3/4"),
        ("#### 1,000", "1000"),
        ("\\boxed{x  +  1}", "x + 1"),
        ("no answer here\nat all", None),
    ],
)
def test_the_math_task_names_each_completions_answer_for_maj_at_k(
    completion: str, answer: str | None
) -> None:
    task = MathDatasetAdapter(grader="exact")
    assert task.final_answer(Response(completion, "end_of_turn")) == answer
    assert task.final_answer(Response("\\boxed{72}", "length")) is None  # cut off: none stated


def test_a_completion_cut_off_at_the_token_limit_earns_nothing() -> None:
    task = MathDatasetAdapter(grader="exact")
    problem = MathProblem("q", "245", "#### 245")
    assert task.compute_reward(Response("\\boxed{245}", "length"), problem) == {
        "correct": 0.0, "format": 0.0
    }  # fmt: skip
    wrong = task.compute_reward(Response("\\boxed{246}", "end_of_turn"), problem)
    assert sum(wrong.values()) >= 0.0  # a wrong answer earns no less than a cut-off one


def test_eval_reports_maj_at_k_for_the_math_task(tmp_path: Path) -> None:
    done = run_main(tmp_path, "eval", "--backend", "fake", "--adapter", "math", "--task-arg",
                    "grader=exact", "--problems", "10", "--k", "1,4")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "\nmaj@4 " in done.stdout


def test_a_subclass_in_a_file_of_its_own_is_part_of_the_version(tmp_path: Path) -> None:
    module = tmp_path / "mymath.py"
    module.write_text("from mathrl.tasks.math import MathDatasetAdapter\n\n"
                      "class Mine(MathDatasetAdapter):\n    name = 'mine'\n")  # fmt: skip
    first = run_main(tmp_path, "check-adapter", "mymath.py:Mine", "--task-arg", "grader=exact")
    assert first.returncode == 0, first.stdout + first.stderr
    from mathrl.cli.loader import load_task

    before = load_task(str(module) + ":Mine", task_args={"grader": "exact"}).version
    module.write_text(module.read_text() + "\n# edited\n")
    sys.modules.pop("mymath", None)
    after = load_task(str(module) + ":Mine", task_args={"grader": "exact"}).version
    sys.modules.pop("mymath", None)
    assert after != before
    assert MathDatasetAdapter(grader="exact").version != before  # and not the plain task's
