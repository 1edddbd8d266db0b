"""code-feedback: the code task as two turns, the failing test shown in between."""

from __future__ import annotations

import asyncio
import json
import statistics
from pathlib import Path

import pytest

from cli_process import run_main
from conftest import checks_passed
from doubles.fake_mint import FakeMintServer
from mathrl.adapter import Feedback, Response
from mathrl.config import Config, TrainConfig
from mathrl.loop import run_grpo, run_grpo_async
from mathrl.rollout import run_problems
from mathrl.service.mint_backend import Endpoint, open_backend
from mathrl.tasks.code.feedback import SECOND_TRY, CodeFeedbackAdapter, first_failure
from mathrl.tasks.code.task import ALL, CodeAdapter, CodeProblem, code_of
from mathrl_fakes import FakeBackend, references_for

SQUARE_PLUS_3 = CodeProblem("square", 3)  # f(x) = x * x + 3
RIGHT = "def f(x):\n    return x * x + 3\n```"
WRONG = "def f(x):\n    return x * abs(x) + 3\n```"


def test_feedback_shows_the_first_failing_test_and_stops_once_it_passes() -> None:
    adapter = CodeFeedbackAdapter()
    # x * |x| + 3 at x = -3 is -6, where x * x + 3 is 12.
    said = adapter.feedback(SQUARE_PLUS_3, [Response(WRONG, "stop", "```")])
    assert said.reply is not None
    assert "f(-3) should return 12, but it returned -6." in said.reply
    assert said.reply.endswith("```python\n")  # the model's next turn opens in a code block
    assert adapter.feedback(SQUARE_PLUS_3, [Response(RIGHT, "stop", "```")]) == Feedback(None)
    # After the last turn there is nothing more to say, right or wrong.
    two = [Response(WRONG, "stop", "```"), Response(WRONG, "stop", "```", 2)]
    assert adapter.feedback(SQUARE_PLUS_3, two) == Feedback(None)


def test_feedback_names_code_that_is_missing_or_does_not_run() -> None:
    assert first_failure("", SQUARE_PLUS_3) == "there is no code before the closing fence"
    syntax = first_failure("def f(x) return 1", SQUARE_PLUS_3)
    assert syntax == "error: \"SyntaxError: expected ':' (<completion>, line 1)\""
    # A call that raises has no result: the reply says what came back, None.
    assert first_failure("def f(x):\n    return 1 / 0\n", SQUARE_PLUS_3) == (
        "f(0) should return 3, but it returned None"
    )
    assert first_failure(code_of(RIGHT), SQUARE_PLUS_3) is None


def test_the_reward_names_which_try_passed() -> None:
    adapter = CodeFeedbackAdapter()
    first, second = Response(RIGHT, "stop", "```"), Response(RIGHT, "stop", "```", 2)
    assert adapter.compute_reward(first, SQUARE_PLUS_3) == {"first_try": 1.0, "second_try": 0.0}
    assert adapter.compute_reward(second, SQUARE_PLUS_3) == {
        "first_try": 0.0,
        "second_try": SECOND_TRY,
    }
    assert adapter.compute_reward(Response(WRONG), SQUARE_PLUS_3) == {
        "first_try": 0.0,
        "second_try": 0.0,
    }
    # Either try is a pass; nothing is not: 2 of 3 -> accuracy 2/3.
    assert adapter.evaluate([1.0, SECOND_TRY, 0.0]) == pytest.approx(2 / 3)


@pytest.mark.slow  # ~75 sandboxes, 10-20 s; the checks run on the other tasks in the fast suite
def test_code_feedback_passes_check_adapter() -> None:
    # The code task's checks, and its episodes' on top (the sandbox's line ends both summaries).
    assert checks_passed(CodeFeedbackAdapter()) > checks_passed(CodeAdapter())


@pytest.mark.slow  # 10 s of training on the fake, the sandbox running every function
def test_code_feedback_learns_on_the_fake_and_the_second_turn_rescues(tmp_path: Path) -> None:
    config = TrainConfig(steps=20)
    adapter = CodeFeedbackAdapter()
    backend = FakeBackend.for_run(adapter, run_problems(adapter, config), checkpoint_dir=tmp_path)
    steps = run_grpo(backend, adapter, config).steps
    accuracy = [m.accuracy for m in steps]
    assert statistics.mean(accuracy[15:]) >= statistics.mean(accuracy[:5]) + 0.20
    # Early on, the second turn rescues some first failures (SECOND_TRY each).
    assert sum(m.reward_parts["second_try"] for m in steps[:5]) > 0


@pytest.mark.slow  # 20 s: the same episodes through the real SDK's client objects
def test_code_feedback_learns_over_the_mint_sdk(tmp_path: Path) -> None:
    adapter = CodeFeedbackAdapter()
    server = FakeMintServer(references_for(adapter, ALL), checkpoint_dir=tmp_path)
    config = Config(TrainConfig(steps=20), adapter="code-feedback")

    async def train() -> list[float]:
        backend = await open_backend(config, Endpoint("sk-x"), service_client=server.connect())
        result = await run_grpo_async(backend, adapter, config.train)
        return [m.accuracy for m in result.steps]

    accuracy = asyncio.run(train())
    assert statistics.mean(accuracy[15:]) >= statistics.mean(accuracy[:5]) + 0.20


@pytest.mark.slow
def test_the_run_folder_records_each_episodes_earlier_turns(tmp_path: Path) -> None:
    # One step of 4 groups has episodes of either length (three of 8 recorded were rescued).
    run = run_main(tmp_path, "--backend", "fake", "--adapter", "code-feedback", "--log-dir", "run",
                   "--steps", "1", "--batch", "4")  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert "(task code-feedback)" in run.stderr
    records = [
        json.loads(line) for line in (tmp_path / "run/samples.jsonl").read_text().splitlines()
    ]
    completions = [c for record in records for c in record["completions"]]
    # One-turn episodes have no "earlier"; a second try has its first turn and the reply.
    rescued = [c for c in completions if "earlier" in c]
    assert rescued
    assert len(rescued) < len(completions)
    for completion in rescued:
        (first,) = completion["earlier"]
        assert set(first) == {"model", "reply"}
        assert first["reply"].startswith("\nThe function fails a hidden test: ")
        assert completion["parts"]["first_try"] == 0.0
