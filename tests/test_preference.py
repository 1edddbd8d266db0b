"""The preference-chat task (RL-2): the judge's proxy, pairwise rewards, honest accuracy."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cli_process import run_main
from conftest import checks_passed
from mathrl.adapter import Response
from mathrl.config import TrainConfig
from mathrl.loop import run_grpo
from mathrl.pairwise import win_rates
from mathrl.rollout import run_problems
from mathrl.tasks.preference import (
    BASELINE_ANSWER,
    PREFERENCE,
    QUESTIONS,
    PreferenceChat,
    helpfulness,
    prefer,
    sentences,
)
from mathrl_fakes import FakeBackend

SKY = next(q for q in QUESTIONS if q.text == "Why is the sky blue?")


def turn(text: str) -> Response:
    return Response(text, "end_of_turn")


def test_the_judges_proxy_worked_examples() -> None:
    # The model answer meets all six criteria; the baseline all but "on topic".
    assert helpfulness(turn(SKY.answer), SKY) == 6
    assert helpfulness(turn(BASELINE_ANSWER), SKY) == 5
    # Cut off at the token limit: not ended (-1).
    assert helpfulness(Response(SKY.answer, "length"), SKY) == 5
    # One sentence of 8 words: too short (-1), too few sentences (-1).
    assert helpfulness(turn("The sky is blue because light scatters."), SKY) == 4
    # Garbage after the answer: not plain text (-1).
    assert helpfulness(turn(SKY.answer + " \x07\ufffd"), SKY) == 5
    # A sentence has a letter and ends in . ! or ?: "3?" and "..." are none.
    assert sentences("One. Two! 3? ...") == ["one", "two"]
    # Ended, plain, on topic (+3); 8 words, a repeated sentence, 4 distinct words of 8 (0).
    assert helpfulness(turn("The sky is blue. The sky is blue."), SKY) == 3


def test_the_seeds_questions_are_all_there() -> None:
    seed = [
        "Explain what a variable is in programming.", "Write a short poem about the ocean.",
        "What are three benefits of exercise?", "Describe how to make a cup of tea.",
        "Why is the sky blue?", "Give tips for better sleep.", "What is machine learning?",
        "How do plants make food?",
    ]  # fmt: skip
    assert [q.text for q in QUESTIONS[:8]] == seed
    assert all(helpfulness(turn(q.answer), q) == 6 for q in QUESTIONS)


def test_rewards_are_win_rates_plus_beating_the_baseline_worked_example() -> None:
    task = PreferenceChat()
    group = [turn(SKY.answer), turn(BASELINE_ANSWER), turn("Blue.")]
    # Scores 6, 5, 3 (ended, plain, diverse). Win rates 1, 1/2, 0; only the first beats
    # the baseline's 5: 0.3 * 1 + 0.7 = 1.0, 0.3 * 0.5 + 0 = 0.15, 0.3 * 0 + 0 = 0.
    rewards = task.compute_group_rewards(group, SKY)
    assert rewards == [
        {"preference": 0.3, "baseline": 0.7},
        {"preference": 0.15, "baseline": 0.0},
        {"preference": 0.0, "baseline": 0.0},
    ]
    totals = [sum(r.values()) for r in rewards]
    assert task.evaluate(totals) == 1 / 3  # only the first is preferred to the baseline
    # Alone (held-out evaluation), a completion's win rate is 1/2.
    assert task.compute_reward(turn(SKY.answer), SKY) == {"preference": 0.15, "baseline": 0.7}


ANSWERS = [SKY.answer, BASELINE_ANSWER, "Blue.", SKY.answer.split(". ")[0] + ".", "sky " * 30]
"""Answers the judge scores apart: 6, 5, 3 and lower."""


@given(st.lists(st.sampled_from(ANSWERS), min_size=1, max_size=8))
def test_the_preference_part_is_a_win_rate_and_averages_one_half(answers: list[str]) -> None:
    group = [turn(a) for a in answers]
    rewards = PreferenceChat().compute_group_rewards(group, SKY)
    rates = win_rates([helpfulness(r, SKY) for r in group], prefer)
    assert [r["preference"] for r in rewards] == [PREFERENCE * w for w in rates]
    # The mean-1/2 trap (mathrl.pairwise): whatever the group, its mean preference part is
    # 0.3 x 1/2, so only the baseline part lets the mean reward rise.
    mean = sum(r["preference"] for r in rewards) / len(rewards)
    assert abs(mean - PREFERENCE / 2) < 1e-12


def test_the_preference_task_passes_check_adapter() -> None:
    checks_passed(PreferenceChat())


@pytest.mark.slow  # two 20-step runs of the task; its contract is checked in the fast suite
def test_the_preference_task_passes_check_adapter_and_learns_on_the_fake(tmp_path: Path) -> None:
    # One check more with learns=True: a 20-step run on the fake, which learned.
    assert checks_passed(PreferenceChat(), learns=True) == checks_passed(PreferenceChat()) + 1
    config = TrainConfig(steps=20)
    backend = FakeBackend.for_run(
        PreferenceChat(), run_problems(PreferenceChat(), config), checkpoint_dir=tmp_path
    )
    steps = run_grpo(backend, PreferenceChat(), config).steps
    rewards = [m.mean_reward for m in steps]
    assert sum(rewards[-5:]) / 5 >= sum(rewards[:5]) / 5 + 0.2
    assert set(steps[0].reward_parts) == {"preference", "baseline"}
    assert abs(steps[0].reward_parts["preference"] - 0.15) < 1e-9


def test_built_in_tasks_go_by_short_name(tmp_path: Path) -> None:
    listed = run_main(tmp_path, "tasks")
    assert listed.returncode == 0
    names = [line.split()[0] for line in listed.stdout.splitlines() if not line.startswith(" ")]
    assert names == [
        "addition", "code", "code-feedback", "dataset", "math", "math-python", "preference",
        "reasoning-gym",
    ]  # fmt: skip
    run = run_main(tmp_path, "--backend", "fake", "--adapter", "preference", "--steps", "2")
    assert run.returncode == 0, run.stderr
    assert "(task preference)" in run.stderr
    checked = run_main(tmp_path, "check-adapter", "addition")
    assert checked.stdout.startswith("check-adapter: task 'addition'")
    bad = run_main(tmp_path, "--backend", "fake", "--adapter", "subtraction")
    assert bad.returncode == 2
    assert bad.stderr == (
        "mathrl: error: MINT_RL_ADAPTER must be addition, code, code-feedback, dataset, math, "
        "math-python, preference, reasoning-gym or module:Class, e.g. mymod:MyTask (got "
        "'subtraction', with "
        "no ':Class' after the module or file)\n"
    ).replace("MINT_RL_ADAPTER", "--adapter")
