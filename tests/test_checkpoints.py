"""Checkpoint names: sampler and state saves apart, and reading a name's task back."""

from __future__ import annotations

import pytest

from mathrl.checkpoints import checkpoint_name, run_name, task_of_checkpoint
from mathrl.config import TrainConfig
from mathrl.resolved import as_task
from mathrl.tasks.addition import MathAdapter

TASK, CONFIG = as_task(MathAdapter()), TrainConfig()


def test_a_steps_sampler_and_state_saves_are_named_apart() -> None:
    prefix = run_name(TASK, CONFIG)
    assert checkpoint_name(TASK, CONFIG, 3) == f"{prefix}-step0000003"
    assert checkpoint_name(TASK, CONFIG, 3, "sampler") == f"{prefix}-step0000003"
    assert checkpoint_name(TASK, CONFIG, 3, "state") == f"{prefix}-state0000003"


@pytest.mark.parametrize("kind", ["sampler", "state"])
@pytest.mark.parametrize(
    "where",
    ["{}", "{}.json", "runs/x/{}", "runs/x/{}.json", "runs/x/{}/", "/abs/{}//", "tinker://r/w/{}"],
)
def test_the_task_is_read_from_the_last_part_of_any_checkpoint_path(kind: str, where: str) -> None:
    name = checkpoint_name(TASK, CONFIG, 12, "state" if kind == "state" else "sampler")
    assert task_of_checkpoint(where.format(name)) == "addition"


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
