"""What happens when a task misbehaves in a run, and the run-time choices a task can make."""

from __future__ import annotations

import asyncio
import pickle
import re
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

import pytest

from cli_process import Result, run_main
from conftest import math_references
from mathrl.adapter import Response
from mathrl.backend import BackendError
from mathrl.checkpoints import Resume
from mathrl.cli.settings import advised
from mathrl.config import TrainConfig
from mathrl.evaluation import evaluation_set
from mathrl.loop import LAST_SAVE_SECONDS, run_grpo, run_grpo_async
from mathrl.resolved import as_task
from mathrl.rewards import TaskError
from mathrl.rollout import trained
from mathrl.tasks.addition import AdditionProblem, MathAdapter
from mathrl_fakes import FakeBackend, FakeModel
from observing import Everything
from virtual_clock import INLINE, run_virtual

FakeFactory = Callable[..., FakeBackend]

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


def one_failure(failed: Result) -> list[str]:
    """The run's error lines: it ended with exit 1 and no traceback (one line is expected)."""
    assert failed.returncode == 1
    assert "Traceback" not in failed.stderr
    return [line for line in failed.stderr.splitlines() if "error:" in line]


def test_a_reward_that_raises_ends_the_run_in_one_line_and_resumes_once_fixed(
    tmp_path: Path,
) -> None:
    (tmp_path / "flaky.py").write_text(FLAKY.format(body=BROKEN_AT_STEP_3))
    run = ["--backend", "fake", "--adapter", "flaky:Flaky", "--steps", "5", "--log-dir", "run"]
    failed = run_main(tmp_path, *run)
    [error] = one_failure(failed)
    assert re.match(
        r"mathrl: error: task 'flaky' failed: compute_reward raised ValueError: invalid literal "
        r"for int\(\) with base 10: .* \(on '.*'\)$",
        error,
    ), error
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


HANGS_AT_STEP_3 = (
    "if problem == self.build_dataset(0, 3, 10)[0]:\n"
    "            import time; time.sleep(60)  # a reward that never comes back\n"
    "        return super().compute_reward(completion, problem)"
)


@pytest.mark.slow
def test_a_reward_past_the_timeout_ends_the_run_in_one_line_and_resumes_with_more_time(
    tmp_path: Path,
) -> None:
    (tmp_path / "flaky.py").write_text(FLAKY.format(body=HANGS_AT_STEP_3))
    run = ["--backend", "fake", "--adapter", "flaky:Flaky", "--steps", "4", "--log-dir", "run"]
    failed = run_main(tmp_path, *run, "--reward-timeout", "0.5")
    [error] = one_failure(failed)
    assert re.match(
        # The group's rewards are one call to the pool, of 0.5 s per distinct completion.
        r"mathrl: error: task 'flaky' failed: compute_reward did not return within [0-9.]+ s "
        # The group, as far as 60 characters hold it once escaped.
        r"\(\d calls of up to 0\.5 s each\) \(on \[.*(\]|\(\d+ characters\))\); --reward-timeout "
        r"sets how long "
        r"a call may take$",
        error,
    ), error
    assert "check-adapter" not in failed.stderr  # the task is slow, not wrong
    assert "the last saved state is step 2; resume with: python -m mathrl --resume run" in (
        failed.stderr
    )
    # The sleeping call holds a daemon thread, which does not hold the process open.
    (tmp_path / "flaky.py").write_text(FLAKY.format(body=FIXED))
    resumed = run_main(tmp_path, "--resume", "run", "--reward-timeout", "30")
    assert resumed.returncode == 0, resumed.stderr
    assert [line.split(":")[0] for line in resumed.stdout.splitlines()] == [
        "Model", "Step 3", "Step 4", "Saved"
    ]  # fmt: skip


def test_a_task_error_keeps_its_fields_when_it_comes_back_from_a_worker_process() -> None:
    # Pickled there and back, as a worker process returns it; allowed_by names the option.
    class Refused(OSError):
        allowed_by = "allow_missing_layers"

    task = as_task(MathAdapter())
    for cause, allowed_by in ((Refused("no layer"), "allow_missing_layers"), (KeyError(1), None)):
        error = TaskError(task, "compute_reward", cause, "7")
        back = pickle.loads(pickle.dumps(error))
        assert (str(back), back.task_identity, back.method, back.late, back.allowed_by) == (
            str(error), error.task_identity, "compute_reward", False, allowed_by
        )  # fmt: skip


def test_reward_workers_and_timeout_are_checked_settings(tmp_path: Path) -> None:
    for flag, value, rule in [
        ("--reward-workers", "0", "an integer from 1 to 1,024"),
        ("--reward-timeout", "0", "a number > 0 and <= 86400"),
    ]:
        bad = run_main(tmp_path, "--backend", "fake", flag, value)
        assert bad.returncode == 2
        assert bad.stderr == f"mathrl: error: {flag} must be {rule} (got '{value}')\n"


class FailsAtStep(MathAdapter):
    """Its reward raises on the first problem of one training step (seed 0, batch 4)."""

    def __init__(self, step: int) -> None:
        self.failing = self.build_dataset(0, step, 4)[0]

    def compute_reward(self, completion: str, problem: AdditionProblem) -> float:
        if problem == self.failing:
            raise ValueError("broken")
        return super().compute_reward(completion, problem)


@pytest.mark.parametrize("off_policy", [0, 1])
@pytest.mark.parametrize(("failing", "states"), [(1, [0]), (3, [0, 2])])
def test_a_reward_that_raises_in_a_run_keeps_the_steps_before_and_saves_a_state_of_them(
    fake_backend_factory: FakeFactory, off_policy: int, failing: int, states: list[int]
) -> None:
    config = TrainConfig(steps=4, batch=4, group=3, save_every=10, max_steps_off_policy=off_policy)
    observer = Everything()
    with pytest.raises(TaskError, match="compute_reward raised ValueError: broken"):
        run_grpo(fake_backend_factory(), FailsAtStep(failing), config, observer)
    assert [m.step for m in observer.steps] == list(range(1, failing))
    # Step 0's state, then (if a step trained since) one of the last step trained.
    assert [c.step for c in observer.checkpoints if c.kind == "state"] == states


class HeldOutFails(MathAdapter):
    """Its reward raises on held-out problems only: evaluation fails, training does not."""

    def __init__(self) -> None:
        self.heldout = set(self.heldout_dataset(0, 4))

    def compute_reward(self, completion: str, problem: AdditionProblem) -> float:
        if problem in self.heldout:
            raise ValueError("broken")
        return super().compute_reward(completion, problem)


def test_an_evaluation_that_raises_lets_the_step_in_flight_finish_and_saves_its_state(
    fake_backend_factory: FakeFactory,
) -> None:
    config = TrainConfig(steps=3, batch=4, group=3, eval_every=1, eval_problems=4, save_every=10)
    observer = Everything()
    with pytest.raises(TaskError, match="compute_reward raised ValueError: broken"):
        run_grpo(fake_backend_factory(), HeldOutFails(), config, observer)
    # Step 0's evaluation is reported after step 1's update was submitted: step 1 is
    # finished and reported, then a state of it is saved.
    assert observer.evals == []
    assert [m.step for m in observer.steps] == [1]
    assert [(c.step, c.kind) for c in observer.checkpoints] == [
        (0, "sampler"), (0, "state"), (1, "sampler"), (1, "state"),
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
        "so each evaluation counts some problems several times; set eval_problems to 5 or "
        "fewer, or draw them without replacement (rng.sample) from at least 12 problems"
    ]
    # The command line spells the setting as it does: for a run, and for `eval`.
    assert advised(warnings[0]).endswith("12 problems (MINT_RL_EVAL_PROBLEMS, --eval-problems)")
    assert advised(warnings[0], {"eval_problems": "--problems"}).endswith(
        "12 problems (--problems)"
    )
    assert advised("a plain warning") == "a plain warning"


class Masked(MathAdapter):
    mask_truncated = True


def test_masking_trains_on_no_completion_cut_off_at_the_limit() -> None:
    responses = [[Response(" 4", "length"), Response(" 42\n", "stop", "\n")]]
    rewards = [[0.0, 1.0]]
    config = TrainConfig()
    assert trained(as_task(MathAdapter()), config, rewards, responses) == [[True, True]]
    assert trained(as_task(Masked()), config, rewards, responses) == [[False, True]]
    from dataclasses import replace

    masking = replace(config, mask_truncated=True)
    assert trained(as_task(MathAdapter()), masking, rewards, responses) == [[False, True]]
    # One group of responses for each group of rewards.
    with pytest.raises(ValueError, match="zip"):
        trained(as_task(MathAdapter()), config, rewards * 2, responses)


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
        "mathrl: error: task 'unseeded' failed: build_dataset broke the contract: two calls gave "
        "different problems: it is not deterministic (draw from a random.Random seeded by "
        "(seed, step), never from the global random module) (on 'seed=0, step=1')"
    ) in done.stderr.splitlines()
    assert "no reference for the prompt" not in done.stderr


UNSEEDED_HELDOUT = """
import random
from mathrl.tasks.addition import AdditionProblem, MathAdapter

class Unseeded(MathAdapter):
    name = "unseeded"

    def heldout_dataset(self, seed, size):
        return [AdditionProblem(random.randint(0, 99), 7) for _ in range(size)]
"""


def test_a_task_that_draws_other_problems_each_time_is_named_not_the_fake(
    tmp_path: Path,
) -> None:
    # The run tells the fake the held-out problems it draws; evaluation draws others. On the
    # command line the cause is the task's, and check-adapter is the way to see it.
    (tmp_path / "unseeded.py").write_text(UNSEEDED_HELDOUT)
    done = run_main(tmp_path, "--backend", "fake", "--adapter", "unseeded:Unseeded",
                    "--steps", "2", "--eval-every", "1")  # fmt: skip
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert re.search(
        r"the fake backend has no reference for the prompt .*: the task drew a problem, or its "
        r"environment gave a reply, other than those the fake was told of, so build_dataset, "
        r"heldout_dataset or feedback is not deterministic \(python -m mathrl check-adapter "
        r"checks it\)",
        done.stderr,
    ), done.stderr


class StateSavesFail(FakeBackend):
    """Saves step 0's state; every later state save fails (the service went down), or, with
    `hangs`, never ends."""

    hangs = False

    async def submit_save_state(self, name: str) -> Awaitable[str]:
        if self.log.count("save_state") == 0 and "state0000000" in name:
            return await super().submit_save_state(name)
        if self.hangs:
            return asyncio.get_running_loop().create_future()  # never set
        raise BackendError("the service is down")


@pytest.mark.parametrize("hangs", [False, True])
def test_a_failed_run_whose_last_save_fails_or_hangs_raises_its_own_error(
    tmp_path: Path, hangs: bool
) -> None:
    # The reward fails at step 3; the state of step 2 cannot be saved: the run still ends
    # with the task's error, at once, or after LAST_SAVE_SECONDS of a save that never ends.
    backend = StateSavesFail(FakeModel(math_references()), checkpoint_dir=tmp_path)
    backend.hangs = hangs
    config = TrainConfig(steps=4, batch=4, group=3, save_every=10)

    async def go() -> BaseException:
        with pytest.raises(TaskError, match="compute_reward raised ValueError: broken") as failed:
            await run_grpo_async(backend, FailsAtStep(3), config, workers=INLINE)
        return failed.value

    _, seconds = run_virtual(go())
    assert seconds >= (LAST_SAVE_SECONDS if hangs else 0.0)
    assert seconds < LAST_SAVE_SECONDS + (10.0 if hangs else 0.0)


def test_resuming_with_a_kl_penalty_needs_the_base_models_sampler(
    fake_backend_factory: FakeFactory,
) -> None:
    backend = fake_backend_factory()
    done = run_grpo(backend, MathAdapter(), TrainConfig(steps=1))
    resume = Resume(done.last_step, done.state_path, done.saved_path, done.saved_path)
    config = TrainConfig(steps=2, kl_coef=0.1)
    with pytest.raises(
        ValueError, match=r"^kl_coef > 0 needs Resume\.base_sampler_path, the step-0 sampler$"
    ):
        asyncio.run(run_grpo_async(backend, MathAdapter(), config, resume=resume))
