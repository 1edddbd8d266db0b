"""The held-out set stays held out, is counted once, and check-adapter reaches every problem.

Issue 35's failures, each a test: the guard that leaves training problems out
of a default held-out set saw only the first `batch` problems of a step that
`--fill-batch` makes draw 4 x batch; `eval --problems N` past the held-out
set's size counted problems twice; check-adapter checked the reference's
token budget on three problems, and named problems by a prompt start they
all share.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from cli_process import run_main
from mathrl.adapter import AdapterError, Response
from mathrl.checkpoints import run_fingerprint
from mathrl.config import FILL_BATCH_CAP, TrainConfig
from mathrl.evaluation import distinct, evaluation_set
from mathrl.problem_keys import problem_key
from mathrl.resolved import as_task
from mathrl.rollout import drawn_per_step
from mathrl.testing import check_adapter
from mathrl.testing.checker import problem_name, shared_lines

FEW_SHOT = "Q: What is 9 x 3?\nA: 27\n\nQ: What is 4 x 6?\nA: 24\n\n"


class Products:
    """The minimal five methods over 400 problems: a x b, with no held-out set of its own."""

    def build_dataset(self, seed: int, step: int, size: int) -> list[tuple[int, int]]:
        rng = random.Random(f"products/{seed}/{step}")
        return [(rng.randint(1, 20), rng.randint(1, 20)) for _ in range(size)]

    def make_prompt(self, problem: tuple[int, int]) -> str:
        return f"{FEW_SHOT}Q: What is {problem[0]} x {problem[1]}?\nA:"

    def compute_reward(self, completion: str, problem: tuple[int, int]) -> float:
        return 1.0 if completion.strip() == str(problem[0] * problem[1]) else 0.0

    def reference_completion(self, problem: tuple[int, int]) -> str:
        return f" {problem[0] * problem[1]}"

    def evaluate(self, rewards: Sequence[float]) -> float:
        return sum(r == 1.0 for r in rewards) / len(rewards) if rewards else 0.0


def test_with_fill_batch_no_problem_a_step_may_draw_is_evaluated() -> None:
    task = as_task(Products())
    config = TrainConfig(steps=20, batch=10, eval_every=5, eval_problems=95, fill_batch=True)
    assert drawn_per_step(config) == FILL_BATCH_CAP * 10  # 40 problems a step, at most
    heldout, _ = evaluation_set(task, config)
    drawn = task.training_problems(config.seed, config.steps, drawn_per_step(config))
    assert not {problem_key(task.adapter, p) for p in heldout} & drawn
    # The guard of the first `batch` problems alone kept some the steps draw (17 of 95, once).
    first_only = task.training_problems(config.seed, config.steps, config.batch)
    kept_before = [p for p in task.heldout(config.seed, 95)
                   if problem_key(task.adapter, p) not in first_only]  # fmt: skip
    assert any(problem_key(task.adapter, p) in drawn for p in kept_before)


def test_a_held_out_set_that_repeats_is_evaluated_once_each_with_a_note() -> None:
    task = as_task(Products())
    problems = [(1, 2), (3, 4), (1, 2), (5, 6), (3, 4)]
    kept, note = distinct(task, problems)
    assert kept == [(1, 2), (3, 4), (5, 6)]  # each once, in the order they came
    assert note == (
        "the 5 held-out problems asked for of task 'Products' hold only 3 distinct ones: "
        "evaluating each of those once (3), not counting 2 repeats"
    )
    assert distinct(task, kept) == (kept, None)


def test_eval_past_the_held_out_set_counts_each_problem_once(tmp_path: Path) -> None:
    done = run_main(tmp_path, "eval", "--backend", "fake", "--adapter", "math", "--task-arg",
                    "grader=exact", "--problems", "100", "--samples", "1", "--k", "1")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (
        "mathrl: the 100 held-out problems asked for of task 'math' hold only 50 distinct ones: "
        "evaluating each of those once (50), not counting 50 repeats (--problems)"
    ) in done.stderr
    assert "Problems: 50 held-out" in done.stdout
    assert done.stdout.rstrip().endswith("/50)")
    sampled = run_main(tmp_path, "sample", "--backend", "fake", "--adapter", "math",
                       "--task-arg", "grader=exact", "--problems", "60",
                       "--model-path", "nothing")  # fmt: skip
    assert "hold only 50 distinct ones" in sampled.stderr or sampled.returncode == 2


class LongAnswers(Products):
    """One reference in ten takes more than the 8 tokens the task allows."""

    name = "long-answers"
    max_tokens = 8

    def reference_completion(self, problem: tuple[int, int]) -> str:
        product = problem[0] * problem[1]
        return f" {product}" + ("  (sure)" if (problem[0] + problem[1]) % 10 == 0 else "")


def test_check_adapter_checks_the_token_budget_of_at_least_200_problems() -> None:
    # The three problems the reward checks score all fit; about one in ten of the rest do not.
    with pytest.raises(AssertionError) as refused:
        check_adapter(LongAnswers(), across_processes=False)
    (line,) = [v for v in str(refused.value).splitlines() if "more than max_tokens=8" in v]
    assert line.startswith("- reference_completion(...'Q: What is ")
    assert "tokens on ByteTokenizer, more than max_tokens=8: raise the task's max_tokens" in line
    times = int(line.rsplit("(", 1)[1].split()[0])
    assert times >= 10  # of at least 200 distinct problems, not the three scored


def test_a_problem_is_named_by_what_tells_its_prompt_apart() -> None:
    prompts = [Products().make_prompt(p) for p in [(3, 4), (12, 7), (5, 5)]]
    shared = shared_lines(prompts)
    assert shared == (FEW_SHOT, "\nA:")
    assert problem_name(prompts[1], shared) == "...'Q: What is 12 x 7?'..."
    assert problem_name(prompts[1]) == shown_start(prompts[1])  # alone: its start, as before
    chat = [
        [{"role": "user", "content": f"{q}\n\nAnswer in \\boxed{{}}."}] for q in ("1+1?", "2+5?")
    ]
    assert problem_name(chat[0], shared_lines(chat)) == "'1+1?'..."
    # The checker's messages say the same.
    with pytest.raises(AssertionError) as refused:
        check_adapter(LongAnswers(), across_processes=False)
    assert "reference_completion(...'Q: What is " in str(refused.value)
    assert FEW_SHOT[:20] not in str(refused.value).replace("\\n", "\n")


def shown_start(prompt: str) -> str:
    from mathrl.text import shown

    return shown(prompt, 40)


def test_a_response_is_a_str_everywhere_the_dataset_task_reads_it() -> None:
    task: Any = Products()
    assert task.compute_reward(Response(" 12\n", "stop", "\n"), (3, 4)) == 1.0


class OwnData(Products):
    """A class-based task that reads a file of its own and names it (`Adapter`'s `data`)."""

    def __init__(self, digest: str) -> None:
        self.data = {"products.csv": digest}


def test_a_class_task_names_its_data_and_new_data_gives_new_checkpoint_names() -> None:
    config = TrainConfig()
    before = run_fingerprint(as_task(OwnData("1a2b3c4d5e6f7a8b")), config)
    assert run_fingerprint(as_task(OwnData("1a2b3c4d5e6f7a8b")), config) == before
    assert run_fingerprint(as_task(OwnData("ffffffffffffffff")), config) != before
    with pytest.raises(AdapterError, match=r"data must map each source's name to a digest"):
        as_task(OwnData(""))


def hint() -> int:
    return 0


class Hinted(Products):
    """Products whose problems carry a function, which has no fingerprint: each is told apart
    by its prompt."""

    def build_dataset(self, seed: int, step: int, size: int) -> list[Any]:
        return [(a, b, hint) for a, b in super().build_dataset(seed, step, size)]


def test_problems_without_a_fingerprint_are_told_apart_by_their_prompts() -> None:
    task = as_task(Hinted())
    kept, note = distinct(task, [(1, 2, hint), (3, 4, hint), (1, 2, hint)])
    assert kept == [(1, 2, hint), (3, 4, hint)]
    assert note is not None
    config = TrainConfig(steps=20, batch=10, eval_problems=95)
    heldout, warnings = evaluation_set(task, config)
    drawn = task.training_problems(config.seed, config.steps, config.batch)
    assert 0 < len(heldout) < 95  # some left out, as training problems
    assert warnings
    assert not {problem_key(task.adapter, p) for p in heldout} & drawn
    assert all(problem_key(task.adapter, p).startswith("prompt:") for p in heldout)
