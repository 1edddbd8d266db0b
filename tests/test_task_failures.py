"""What happens when a task misbehaves in a run, and the run-time choices a task can make."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from cli_process import run_main
from mathrl.adapter import Response
from mathrl.config import TrainConfig
from mathrl.evaluation import evaluation_set
from mathrl.resolved import as_task
from mathrl.rollout import trained
from mathrl.tasks.addition import AdditionProblem, MathAdapter

FLAKY = """
from mathrl.tasks.addition import MathAdapter

class Flaky(MathAdapter):
    name = "flaky"

    def compute_reward(self, completion, problem):
        {body}
"""
BROKEN_AT_STEP_3 = (
    "if problem == self.build_dataset(0, 3, 10)[0]:\n"
    "            return int(completion)  # the bug: int() of model output\n"
    "        return super().compute_reward(completion, problem)"
)
FIXED = "return super().compute_reward(completion, problem)"


def test_a_reward_that_raises_ends_the_run_in_one_line_and_resumes_once_fixed(
    tmp_path: Path,
) -> None:
    (tmp_path / "flaky.py").write_text(FLAKY.format(body=BROKEN_AT_STEP_3))
    run = ["--backend", "fake", "--adapter", "flaky:Flaky", "--steps", "5", "--log-dir", "run"]
    failed = run_main(tmp_path, *run)
    assert failed.returncode == 1
    assert "Traceback" not in failed.stderr
    errors = [line for line in failed.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1
    assert re.match(
        r"mathrl: error: task 'flaky' failed: compute_reward raised ValueError: invalid literal "
        r"for int\(\) with base 10: .* \(on '.*'\)$",
        errors[0],
    ), errors
    assert "check the task with: python -m mathrl check-adapter flaky:Flaky" in failed.stderr
    # Steps 1 and 2 trained; a state was saved at step 2, not at step 0.
    assert [line.split(":")[0] for line in failed.stdout.splitlines()] == [
        "Model", "Step 1", "Step 2", "Saved"
    ]  # fmt: skip
    assert "the last saved state is step 2; resume with: python -m mathrl --resume run" in (
        failed.stderr
    )
    (tmp_path / "flaky.py").write_text(FLAKY.format(body=FIXED))
    resumed = run_main(tmp_path, "--resume", "run")
    assert resumed.returncode == 0, resumed.stderr
    assert [line.split(":")[0] for line in resumed.stdout.splitlines()] == [
        "Model", "Step 3", "Step 4", "Step 5", "Saved"
    ]  # fmt: skip


class SmallSpace(MathAdapter):
    """Five problems in all, held out apart from training: a held-out set of 12 repeats them."""

    name = "small-space"

    def heldout_dataset(self, seed: int, size: int) -> list[AdditionProblem]:
        return [AdditionProblem(i % 5, 50) for i in range(size)]


def test_a_held_out_set_that_repeats_problems_is_warned_about() -> None:
    config = TrainConfig(eval_every=1, eval_problems=12)
    problems, warnings = evaluation_set(as_task(SmallSpace()), config)
    assert len(problems) == 12
    assert warnings == [
        "the 12 held-out problems of task 'small-space' hold only 5 distinct ones (7 repeats), "
        "so each evaluation counts some problems several times; lower the number of held-out "
        "problems to 5 or widen the task's problem space"
    ]


class Masked(MathAdapter):
    mask_truncated = True


def test_masking_trains_on_no_completion_cut_off_at_the_limit() -> None:
    responses = [[Response(" 4", "length"), Response(" 42\n", "stop", "\n")]]
    config = TrainConfig()
    assert trained(as_task(MathAdapter()), config, responses) == [[True, True]]
    assert trained(as_task(Masked()), config, responses) == [[False, True]]
    from dataclasses import replace

    assert trained(as_task(MathAdapter()), replace(config, mask_truncated=True), responses) == [
        [False, True]
    ]


def test_mask_truncated_is_a_switch_on_the_command_line(tmp_path: Path) -> None:
    plain = run_main(tmp_path, "--backend", "fake", "--steps", "2", "--max-tokens", "3")
    masked = run_main(
        tmp_path, "--backend", "fake", "--steps", "2", "--max-tokens", "3", "--mask-truncated"
    )
    assert (plain.returncode, masked.returncode) == (0, 0)

    def datums(stdout: str) -> Sequence[int]:
        return [int(m) for m in re.findall(r"datums=(\d+)", stdout)]

    # Three tokens hold " 42" but not its "\n": most answers run into the limit, right or
    # wrong, and masked they are not trained on (their rewards still set the advantages).
    assert sum(datums(plain.stdout)) > sum(datums(masked.stdout))
    bad = run_main(tmp_path, "--backend", "fake", "--mask-truncated", "maybe")
    assert bad.returncode == 2
    assert bad.stderr == ("mathrl: error: --mask-truncated must be true or false (got 'maybe')\n")


GLOBAL_RANDOM = """
import random
from mathrl.tasks.addition import AdditionProblem, MathAdapter

class Unseeded(MathAdapter):
    name = "unseeded"

    def build_dataset(self, seed, step, size):
        return [AdditionProblem(random.randint(0, 99), random.randint(0, 99)) for _ in range(size)]
"""


def test_a_dataset_that_is_not_deterministic_is_named_as_the_cause(tmp_path: Path) -> None:
    (tmp_path / "unseeded.py").write_text(GLOBAL_RANDOM)
    done = run_main(tmp_path, "--backend", "fake", "--adapter", "unseeded:Unseeded")
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert (
        "mathrl: error: task 'unseeded' failed: build_dataset raised ValueError: two calls gave "
        "different problems: it is not deterministic (draw from a random.Random seeded by "
        "(seed, step), never from the global random module) (on 'seed=0, step=1')"
    ) in done.stderr.splitlines()
    assert "no reference for the prompt" not in done.stderr
