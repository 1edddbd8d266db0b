"""Checkpoint names: sampler and state saves apart, and reading a name's task back."""

from __future__ import annotations

from dataclasses import replace

import pytest

from mathrl.checkpoints import (
    checkpoint_name,
    code_version,
    run_name,
    step_of_checkpoint,
    task_of_checkpoint,
)
from mathrl.config import TrainConfig
from mathrl.resolved import Task, as_task
from mathrl.tasks.addition import AdditionProblem, MathAdapter

TASK, CONFIG = as_task(MathAdapter()), TrainConfig()


def test_a_steps_sampler_and_state_saves_are_named_apart() -> None:
    prefix = run_name(TASK, CONFIG)
    assert checkpoint_name(TASK, CONFIG, 3) == f"{prefix}-step0000003"
    assert checkpoint_name(TASK, CONFIG, 3, "sampler") == f"{prefix}-step0000003"
    assert checkpoint_name(TASK, CONFIG, 3, "state") == f"{prefix}-state0000003"


def test_chat_template_options_and_masking_train_differently_so_are_in_the_name() -> None:
    options = replace(TASK, chat_template_options={"enable_thinking": False})
    masking = replace(CONFIG, mask_truncated=True)

    def name(task: Task[AdditionProblem], config: TrainConfig) -> str:
        return checkpoint_name(task, config, 5)

    # Masking asked for by the task or by the run is the same training.
    assert name(replace(TASK, mask_truncated=True), CONFIG) == name(TASK, masking)
    names = [
        name(TASK, CONFIG), name(options, CONFIG), name(TASK, masking), name(options, masking),
        name(TASK, replace(masking, batch=9)),
    ]  # fmt: skip
    assert len(set(names)) == len(names)


def test_a_tasks_options_are_in_the_name_and_none_changes_no_name() -> None:
    # The default names predate options: a task without any keeps its names.
    assert run_name(replace(TASK, options={}), CONFIG) == run_name(TASK, CONFIG)
    names = {
        run_name(replace(TASK, options=options), CONFIG)
        for options in ({}, {"few_shot": 2}, {"few_shot": 3}, {"few_shot": "2"}, {"shots": 2})
    }
    assert len(names) == 5
    # The order they were given in does not matter.
    one = replace(TASK, options={"a": 1, "b": True})
    assert run_name(one, CONFIG) == run_name(replace(TASK, options={"b": True, "a": 1}), CONFIG)


def test_the_tasks_code_version_is_in_the_name() -> None:
    edited = replace(TASK, version=TASK.version + "# edited")
    assert code_version(edited) != code_version(TASK)
    assert run_name(edited, CONFIG) != run_name(TASK, CONFIG)
    assert run_name(TASK, CONFIG).endswith(f"-{code_version(TASK)}")


@pytest.mark.parametrize("kind", ["sampler", "state"])
@pytest.mark.parametrize(
    "where",
    ["{}", "{}.json", "runs/x/{}", "runs/x/{}.json", "runs/x/{}/", "/abs/{}//", "tinker://r/w/{}"],
)
def test_the_task_is_read_from_the_last_part_of_any_checkpoint_path(kind: str, where: str) -> None:
    name = checkpoint_name(TASK, CONFIG, 12, "state" if kind == "state" else "sampler")
    assert task_of_checkpoint(where.format(name)) == "addition"
    assert step_of_checkpoint(where.format(name)) == 12


@pytest.mark.parametrize(
    "path",
    [
        "",
        "/",
        "addition",
        "runs/addition-seed0-0123abcd-step0000001/extra",  # the name is a folder above
        "addition-seed0-0123abcd-step0000001X",  # anything after the step number
        "addition-seed0-0123abcd-step0000001X/",
        "addition-seed0-0123ABCD-step0000001",  # the fingerprint is lower-case hex
        "addition-seed0-0123abcd-stage0000001",
    ],
)
def test_a_path_whose_last_part_is_no_checkpoint_name_has_no_task(path: str) -> None:
    assert task_of_checkpoint(path) is None
    assert step_of_checkpoint(path) is None
