"""The code-writing task: its problems, its sandboxed partial-credit reward, its learning."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import checks_passed, examples
from mathrl.config import TrainConfig
from mathrl.loop import run_grpo
from mathrl.resolved import as_task
from mathrl.rollout import run_problems
from mathrl.tasks.code.task import (
    ALL,
    FENCE,
    HELDOUT_POOL,
    TRAINING_POOL,
    CodeAdapter,
    CodeProblem,
)
from mathrl_fakes import FakeBackend

SQUARE_PLUS_3 = CodeProblem("square", 3)


def test_the_task_declares_a_fence_stop_and_a_larger_budget() -> None:
    task = as_task(CodeAdapter())
    assert (task.name, task.stop, task.max_tokens) == ("code", (FENCE,), 64)
    prompt = CodeAdapter().make_prompt(SQUARE_PLUS_3)
    assert prompt.endswith("Task: return x squared plus 3.\n```python\n")
    assert CodeAdapter().reference_completion(SQUARE_PLUS_3) == "def f(x):\n    return x * x + 3\n"


def test_held_out_problems_are_never_training_problems() -> None:
    assert set(TRAINING_POOL) | set(HELDOUT_POOL) == set(ALL)
    assert not set(TRAINING_POOL) & set(HELDOUT_POOL)
    assert set(CodeAdapter().heldout_dataset(0, 100)) <= set(HELDOUT_POOL)


@settings(max_examples=examples(3, 10), deadline=None)  # two sandboxes each
@given(st.sampled_from(ALL))
def test_every_reference_passes_all_its_tests(problem: CodeProblem) -> None:
    adapter = CodeAdapter()
    reference = adapter.reference_completion(problem)
    assert adapter.compute_reward(reference, problem) == 1.0
    assert adapter.compute_reward(reference + FENCE, problem) == 1.0


def test_reward_worked_examples() -> None:
    adapter = CodeAdapter()
    # x * |x| + 3 agrees with x * x + 3 on 0, 1, 2, 7, 10 and 25 but not on -3 and -11:
    # 6 of the 8 tests -> 0.75.
    assert adapter.compute_reward("def f(x):\n    return x * abs(x) + 3\n", SQUARE_PLUS_3) == 0.75
    # Text after the closing fence is not code: it cannot break a right answer.
    assert adapter.compute_reward("def f(x):\n    return x*x+3\n```\n1/0", SQUARE_PLUS_3) == 1.0
    # True == 1 in Python, but a bool is not the int the tests expect.
    assert adapter.compute_reward("def f(x):\n    return True\n", CodeProblem("mod", 2)) == 0.0
    assert adapter.compute_reward("", SQUARE_PLUS_3) == 0.0
    assert adapter.compute_reward("def f(x):\n    return 'x'\n", SQUARE_PLUS_3) == 0.0
    # 2 of 4 rewards are a full pass -> accuracy 0.5; partial credit is not a pass.
    assert adapter.evaluate([1.0, 0.75, 1.0, 0.0]) == 0.5


@pytest.mark.parametrize(
    "code",
    [
        "import os\nos._exit(0)\n",
        pytest.param(  # seconds of CPU to its limit: test_sandbox has the limit in the fast suite
            "def f(x):\n    while True:\n        pass\n", marks=pytest.mark.slow
        ),
        "import os\nos.fork()\ndef f(x):\n    return x * x + 3\n",
        # /var/tmp and /dev/shm: world-writable (its own /tmp is its folder, a private tmpfs)
        "open('/var/tmp/escape-from-mathrl', 'w').write('x')\ndef f(x):\n    return x * x + 3\n",
        "open('/dev/shm/escape-from-mathrl', 'w').write('x')\ndef f(x):\n    return x * x + 3\n",
    ],
)
def test_code_that_misbehaves_scores_nothing(code: str) -> None:
    assert CodeAdapter().compute_reward(code, SQUARE_PLUS_3) == 0.0
    assert not Path("/var/tmp/escape-from-mathrl").exists()
    assert not Path("/dev/shm/escape-from-mathrl").exists()


@pytest.mark.slow  # ~75 sandboxes, 10-20 s; the checks run on the other tasks in the fast suite
def test_the_code_task_passes_check_adapter() -> None:
    # Its summary names the task and ends with the sandbox's own line (its preflight).
    checks_passed(CodeAdapter())


@pytest.mark.slow  # 5 s of training; the task's contract is checked in the fast suite
def test_the_code_task_learns_on_the_fake_at_its_defaults(tmp_path: Path) -> None:
    config = TrainConfig(steps=20)
    backend = FakeBackend.for_run(
        CodeAdapter(), run_problems(CodeAdapter(), config), checkpoint_dir=tmp_path
    )
    accuracy = [m.accuracy for m in run_grpo(backend, CodeAdapter(), config).steps]
    assert statistics.mean(accuracy[15:]) >= statistics.mean(accuracy[:5]) + 0.20
