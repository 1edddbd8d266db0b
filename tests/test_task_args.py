"""Task options from the command line: `--task-arg NAME=VALUE`, recorded, resumed, listed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cli_process import run_main, saved_names
from mathrl.adapter import OptionError
from mathrl.cli.task_args import (
    TaskOption,
    converted,
    described,
    given_task_args,
    task_options_of,
)
from mathrl.config import ConfigError
from mathrl.resolved import as_task
from mathrl.tasks.addition import MathAdapter

SPEC = "test_task_args:Offset"


class Offset(MathAdapter):
    """Addition whose right answer is off by a set amount: a task with options of each kind."""

    def __init__(
        self, offset: int = 0, label: str = "sum", strict: bool = False, scale: float = 1.0
    ) -> None:
        """A task with options.

        Args:
            offset: added to every answer, -5 to 5.
            label: a word, for the record.
            strict: refuse answers with spaces around them; a long
                line that goes on here.
            scale: a number that changes nothing.
        """
        if not -5 <= offset <= 5:
            raise OptionError("offset", f"offset must be an integer from -5 to 5 (got {offset})")
        if not label:
            raise OptionError("label", "must be a word (got '')")
        given = {"offset": offset, "label": label, "strict": strict, "scale": scale}
        defaults = {"offset": 0, "label": "sum", "strict": False, "scale": 1.0}
        self.options = {k: v for k, v in given.items() if v != defaults[k]}
        self.offset = offset
        self.name = "offset"

    def reference_completion(self, problem: object) -> str:
        return super().reference_completion(problem)  # type: ignore[arg-type]  # an AdditionProblem


OFFSET_OPTIONS = task_options_of(Offset)


def test_a_constructors_typed_keywords_are_its_options_with_their_help() -> None:
    assert list(OFFSET_OPTIONS) == ["offset", "label", "strict", "scale"]
    assert OFFSET_OPTIONS["offset"] == TaskOption(
        "offset", int, 0, "added to every answer, -5 to 5."
    )
    assert OFFSET_OPTIONS["strict"].help == (
        "refuse answers with spaces around them; a long line that goes on here."
    )
    assert described(OFFSET_OPTIONS)[1] == "label=sum  a word, for the record."
    assert described({"t": TaskOption("t", str, "")}) == ["t=''"]
    assert described({"s": TaskOption("s", bool, True)}) == ["s=true"]

    def made(size: int = 3, *, name: str = "x", rows: list[int] | None = None) -> MathAdapter:
        """Make a task.

        Args:
            size: how many.

            name: its name.
        Returns:
            rows: not an option.
        """
        return MathAdapter()

    # A function that makes a task takes options too; a keyword of another type is none.
    assert {o.name: o.help for o in task_options_of(made).values()} == {
        "size": "how many.", "name": "its name.",
    }  # fmt: skip
    assert task_options_of(MathAdapter) == {}
    assert task_options_of(max) == {}  # no signature to read

    def unresolved(size: Missing = 3) -> MathAdapter:  # type: ignore[name-defined]  # noqa: F821
        return MathAdapter()

    assert task_options_of(unresolved) == {}  # an annotation that names nothing: no option


def test_name_value_texts_are_read_once_each() -> None:
    assert given_task_args(["offset=2", "label=a=b", "label2="]) == {
        "offset": "2", "label": "a=b", "label2": "",
    }  # fmt: skip
    assert given_task_args(None) == {}
    for bad, message in [
        ("offset", "--task-arg must be NAME=VALUE, e.g. few_shot=2 (got 'offset')"),
        ("=2", "--task-arg must be NAME=VALUE"),
        ("2x=1", "--task-arg must be NAME=VALUE"),
    ]:
        with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
            given_task_args([bad])
    with pytest.raises(ConfigError, match=r"--task-arg offset is given twice \(got '1' and '2'\)"):
        given_task_args(["offset=1", "offset=2"])


@given(st.integers(-(10**12), 10**12), st.floats(allow_nan=False, allow_infinity=False))
def test_text_is_read_by_the_options_type_and_a_typed_value_passes_as_it_is(
    number: int, real: float
) -> None:
    as_text = {"offset": str(number), "scale": repr(real), "strict": "yes", "label": "7"}
    assert converted(OFFSET_OPTIONS, as_text, "offset") == {
        "offset": number, "scale": real, "strict": True, "label": "7",
    }  # fmt: skip
    # As a run folder recorded them (JSON): an integer stands for a float option.
    typed = {"offset": number, "scale": 3, "strict": False, "label": "7"}
    assert converted(OFFSET_OPTIONS, typed, "offset") == {**typed, "scale": 3.0}


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"offset": "two"}, "--task-arg offset must be an integer (got 'two')"),
        ({"offset": "1.5"}, "--task-arg offset must be an integer (got '1.5')"),
        ({"strict": "maybe"}, "--task-arg strict must be true or false (got 'maybe')"),
        ({"scale": "fast"}, "--task-arg scale must be a number (got 'fast')"),
        ({"offset": True}, "--task-arg offset must be an integer (got True)"),
        ({"label": 3}, "--task-arg label must be text (got 3)"),
        (
            {"shift": "1"},
            "--task-arg shift: task offset takes no option shift (its options: label, offset, "
            "scale and strict)",
        ),
    ],
)
def test_an_option_that_cannot_be_read_is_named(given: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as refused:
        converted(OFFSET_OPTIONS, given, "offset")
    assert str(refused.value) == message


# -- through the command line -------------------------------------------------------------


def test_a_run_records_its_task_options_which_name_its_checkpoints(tmp_path: Path) -> None:
    plain = run_main(tmp_path, "--backend", "fake", "--adapter", SPEC, "--steps", "2")
    done = run_main(
        tmp_path, "--backend", "fake", "--adapter", SPEC, "--steps", "2", "--log-dir", "X",
        "--task-arg", "offset=2", "--task-arg", "scale=1",  # a default: recorded as none
    )  # fmt: skip
    assert plain.returncode == done.returncode == 0, plain.stderr + done.stderr
    settings = json.loads((tmp_path / "X" / "config.json").read_text())["settings"]
    assert settings["task_args"] == {"offset": 2}
    # Options the task keeps are in the fingerprint: the checkpoint names differ.
    assert saved_names(plain.stdout).splitlines()[-1] != saved_names(done.stdout).splitlines()[-1]
    default = run_main(tmp_path, "--backend", "fake", "--adapter", SPEC, "--steps", "2",
                       "--task-arg", "offset=0")  # fmt: skip
    assert saved_names(default.stdout) == saved_names(plain.stdout)  # a default spelled out


def test_a_resumed_run_builds_its_task_with_the_options_it_recorded(tmp_path: Path) -> None:
    given = ("--backend", "fake", "--adapter", SPEC, "--task-arg", "offset=2")
    whole = run_main(tmp_path, *given, "--steps", "4", "--log-dir", "whole")
    run_main(tmp_path, *given, "--steps", "2", "--log-dir", "X")
    resumed = run_main(tmp_path, "--resume", "X", "--steps", "4")
    assert resumed.returncode == 0, resumed.stderr
    assert (
        saved_names(resumed.stdout).splitlines()[-3:]
        == (saved_names(whole.stdout).splitlines()[-3:])
    )
    same = run_main(tmp_path, "--resume", "X", "--steps", "5", "--task-arg", "offset=2")
    assert same.returncode == 0, same.stderr
    other = run_main(tmp_path, "--resume", "X", "--steps", "6", "--task-arg", "offset=3")
    assert (other.returncode, other.stdout) == (2, "")
    assert other.stderr == (
        "mathrl: error: --task-arg offset=3 cannot be given with --resume "
        f"({Path('X') / 'config.json'}): it records the task's options (offset=2); leave it out\n"
    )


def test_sample_and_eval_of_a_run_folder_build_its_task_with_its_options(tmp_path: Path) -> None:
    run_main(tmp_path, "--backend", "fake", "--adapter", SPEC, "--task-arg", "offset=2",
             "--steps", "2", "--log-dir", "X")  # fmt: skip
    for command in (("sample", "--problems", "2"), ("eval", "--problems", "2", "--k", "1")):
        done = run_main(tmp_path, *command, "--model-path", "X")
        assert done.returncode == 0, done.stderr
        refused = run_main(tmp_path, *command, "--model-path", "X", "--task-arg", "offset=1")
        assert refused.returncode == 2
        assert "--task-arg offset=1 cannot be given with --model-path X" in refused.stderr


def test_the_tasks_constructor_refuses_a_value_in_one_line(tmp_path: Path) -> None:
    for args, line in [
        (("--task-arg", "offset=9"), "--task-arg offset must be an integer from -5 to 5 (got 9)"),
        (("--task-arg", "label="), "--task-arg label: must be a word (got '')"),
        (
            ("--task-arg", "x=1", "--adapter", "addition"),
            "--task-arg x: task addition takes no option x (it has none)",
        ),
    ]:
        spec = () if "--adapter" in args else ("--adapter", SPEC)
        done = run_main(tmp_path, "--backend", "fake", *spec, *args)
        assert (done.returncode, done.stdout) == (2, ""), done.stderr
        assert done.stderr.startswith(f"mathrl: error: {line}")


def test_check_adapter_takes_task_options_and_tasks_lists_them(tmp_path: Path) -> None:
    done = run_main(tmp_path, "check-adapter", SPEC, "--task-arg", "offset=1")
    assert done.returncode == 0, done.stdout + done.stderr
    listing = run_main(tmp_path, "tasks").stdout.splitlines()
    math_options = [line.split()[1] for line in listing if line.startswith(" ") and "=" in line]
    assert "train=fixture:gsm-train" in math_options
    assert "few_shot=1" in math_options
    # The code task's sandbox option is the command line's --weak-sandbox, not a --task-arg.
    assert not [line for line in listing if "allow_missing_layers" in line]


def test_a_task_given_as_an_instance_takes_no_options(tmp_path: Path) -> None:
    (tmp_path / "made.py").write_text(
        "from mathrl.tasks.addition import MathAdapter\nTASK = MathAdapter()\n"
    )
    done = run_main(tmp_path, "--backend", "fake", "--adapter", "made:TASK", "--task-arg", "a=1")
    assert done.returncode == 2
    assert done.stderr == (
        "mathrl: error: --task-arg: made:TASK is a task already made, which takes no options "
        "(got a); give its class instead\n"
    )


def test_options_reach_the_task_and_its_record() -> None:
    task = as_task(Offset(offset=-3, strict=True))
    assert task.options == {"offset": -3, "strict": True}
    assert as_task(Offset()).options == {}


def test_a_task_that_takes_any_more_keywords_reads_them_itself() -> None:
    def made(size: int = 1, **settings: str) -> MathAdapter:
        """Make a task.

        Args:
            size: how many.
            **settings: the generator's own, as text.
        """
        return MathAdapter()

    options = task_options_of(made)
    assert described(options) == ["size=1  how many.", "NAME=VALUE  the generator's own, as text."]
    # A declared option is read by its type; any other passes on as given, text or recorded.
    given = {"size": "2", "depth": "3", "wide": True}
    assert converted(options, given, "made") == {"size": 2, "depth": "3", "wide": True}
