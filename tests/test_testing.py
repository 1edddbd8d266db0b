"""`mathrl.testing.check_adapter` on adapters broken one way each: every check can fail."""

from __future__ import annotations

import asyncio
import math
import random
import re
from collections.abc import Awaitable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from conftest import checks_passed
from mathrl.adapter import Response, Reward
from mathrl.backend import Backend, Datum, TrainResult
from mathrl.losses import IMPORTANCE_SAMPLING, Loss
from mathrl.resolved import as_task, prompt_key
from mathrl.rollout import RunProblems
from mathrl.tasks.addition import AdditionProblem, MathAdapter, parse_answer, pools
from mathrl.testing import WRONG, check_adapter, random_texts
from mathrl.testing.checker import problem_name, shared_lines
from mathrl.text import shown
from mathrl_fakes import FakeBackend, RecordingBackend


def violations(adapter: Any, **options: Any) -> list[str]:
    """`check_adapter`'s violations of `adapter`, within this process (test_testing checks
    the new interpreter's draws)."""
    with pytest.raises(AssertionError) as excinfo:
        check_adapter(adapter, **{"across_processes": False, **options})
    return [line.removeprefix("- ") for line in str(excinfo.value).splitlines()[1:]]


class EmptyPrompt(MathAdapter):
    def make_prompt(self, problem: AdditionProblem) -> str:
        return ""


class WrongSize(MathAdapter):
    def build_dataset(self, seed: int, step: int, size: int) -> list[AdditionProblem]:
        return super().build_dataset(seed, step, size + 1)


class SameEveryStep(MathAdapter):
    def build_dataset(self, seed: int, step: int, size: int) -> list[AdditionProblem]:
        return super().build_dataset(0, 1, size)


class BrokenHeldout(MathAdapter):
    def heldout_dataset(self, seed: int, size: int) -> list[AdditionProblem]:
        raise RuntimeError("no held-out problems")


class HeldoutIsTraining(MathAdapter):
    def heldout_dataset(self, seed: int, size: int) -> list[AdditionProblem]:
        return self.build_dataset(seed, 1, size)


class HeldoutFromGlobalRandom(MathAdapter):
    """Draws its held-out problems from the global `random` module."""

    def heldout_dataset(self, seed: int, size: int) -> list[AdditionProblem]:
        return [random.choice(pools()[1]) for _ in range(size)]


class NotAString(MathAdapter):
    def reference_completion(self, problem: AdditionProblem) -> str:
        return problem.answer  # type: ignore[return-value]


class StopInReference(MathAdapter):
    def reference_completion(self, problem: AdditionProblem) -> str:
        return f" {problem.answer}\n"


class StopCostsReward(MathAdapter):
    def compute_reward(self, completion: str, problem: AdditionProblem) -> float:
        return 0.5 if completion.endswith("\n") else super().compute_reward(completion, problem)


class BeatsTheReference(MathAdapter):
    def compute_reward(self, completion: str, problem: AdditionProblem) -> float:
        return 2.0 if len(completion) > 1000 else super().compute_reward(completion, problem)


class ReturnsBool(MathAdapter):
    def compute_reward(self, completion: str, problem: AdditionProblem) -> float:
        return completion.strip() == str(problem.answer)  # a bool is a float to mypy, not to us


class TooLongForItsBudget(MathAdapter):
    max_tokens = 2


class RaisingReference(MathAdapter):
    def reference_completion(self, problem: AdditionProblem) -> str:
        if problem.a % 2:
            raise ValueError("odd")
        return super().reference_completion(problem)


class IntDigits(MathAdapter):
    def compute_reward(self, completion: str, problem: AdditionProblem) -> float:
        try:
            return 1.0 if int(completion.split()[0]) == problem.answer else 0.0
        except (ValueError, IndexError):
            return 0.0


class MeanRewardAccuracy(MathAdapter):
    """Partial credit (a well-formed wrong integer earns 0.25), and the mean reward as accuracy."""

    def compute_reward(self, completion: str, problem: AdditionProblem) -> float:
        right = super().compute_reward(completion, problem)
        return right or (
            0.25 if completion.strip().isascii() and completion.strip().isdigit() else 0
        )

    def evaluate(self, rewards: Sequence[float]) -> float:
        return sum(rewards) / len(rewards) if rewards else 0.0


class NeedsItsSentinel(MathAdapter):
    """Full credit only when the answer ends at its stop: a cut-off answer earns the format part."""

    name = "NeedsItsSentinel"
    cut_off_graded = None  # (the addition task's reason is not this task's)

    def compute_reward(  # type: ignore[override]  # a Response, as the contract gives it
        self, completion: Response, problem: AdditionProblem
    ) -> Reward:
        right = completion.ended == "stop" and super().compute_reward(completion, problem) == 1.0
        return {"correct": 1.0 if right else 0.0, "format": 0.5 if completion.strip() else 0.0}

    def evaluate(self, rewards: Sequence[float]) -> float:
        return sum(r >= 1.5 for r in rewards) / len(rewards) if rewards else 0.0


class LongerWins(MathAdapter):
    """A pairwise judge: the longer answer that starts with the right sum wins (ties half)."""

    name = "LongerWins"

    def _score(self, completion: str, problem: AdditionProblem) -> float:
        return super().compute_reward(completion, problem) + min(len(completion), 50) / 1000

    def compute_group_rewards(
        self, responses: Sequence[Response], problem: AdditionProblem
    ) -> list[float]:
        scores = [self._score(r, problem) for r in responses]
        if len(scores) == 1:
            return [1.0 if scores[0] >= 1 else 0.0]
        return [
            sum(1.0 if s > t else 0.5 if s == t else 0.0 for j, t in enumerate(scores) if j != i)
            / (len(scores) - 1)
            for i, s in enumerate(scores)
        ]

    def evaluate(self, rewards: Sequence[float]) -> float:
        return sum(r == 1.0 for r in rewards) / len(rewards) if rewards else 0.0


class AsyncLongerWins(LongerWins):
    name = "AsyncLongerWins"

    async def compute_group_rewards(  # type: ignore[override]
        self, responses: Sequence[Response], problem: AdditionProblem
    ) -> list[float]:
        await asyncio.sleep(0)
        return super().compute_group_rewards(responses, problem)


class PositionalJudge(LongerWins):
    def compute_group_rewards(
        self, responses: Sequence[Response], problem: AdditionProblem
    ) -> list[float]:
        rewards = super().compute_group_rewards(responses, problem)
        return [r + (0.001 * i if i else 0.0) for i, r in enumerate(rewards)]


class MoodyJudge(LongerWins):
    calls = 0

    def compute_group_rewards(
        self, responses: Sequence[Response], problem: AdditionProblem
    ) -> list[float]:
        MoodyJudge.calls += 1
        rewards = super().compute_group_rewards(responses, problem)
        return [r * (0.5 if MoodyJudge.calls % 2 and len(rewards) > 2 else 1.0) for r in rewards]


class ShortJudge(LongerWins):
    def compute_group_rewards(
        self, responses: Sequence[Response], problem: AdditionProblem
    ) -> list[float]:
        return super().compute_group_rewards(responses, problem)[:1]


class FussyReward(MathAdapter):
    """Raises on anything but plain ASCII: every random text sets it off."""

    def compute_reward(self, completion: str, problem: AdditionProblem) -> float:
        if not completion.isascii():
            raise ValueError(f"not ASCII: {completion[:10]!r}")
        return super().compute_reward(completion, problem)


class AnswerRaises(MathAdapter):
    """Names the first integer, but raises on text without one."""

    def final_answer(self, completion: str) -> str | None:
        return str(int(completion.split()[0]))


class AnswersNothing(MathAdapter):
    """Names no answer for the reference: maj@k could never count it."""

    def final_answer(self, completion: str) -> str | None:
        return None


class AnswerNotText(MathAdapter):
    """Names its answer as an int."""

    def final_answer(self, completion: str) -> Any:
        return len(completion)


class MetricRaises(MathAdapter):
    """Reports the answer as a metric, with int() of model output: hostile text sets it off."""

    def metrics(self, completion: Response, problem: AdditionProblem) -> dict[str, float]:
        return {"answer": int(completion)}


class MetricNotFinite(MathAdapter):
    """Reports a share that divides by zero's stand-in: inf."""

    def metrics(self, completion: Response, problem: AdditionProblem) -> dict[str, float]:
        return {"share": math.inf}


class MetricNotAMapping(MathAdapter):
    def metrics(self, completion: Response, problem: AdditionProblem) -> Any:
        return completion.tokens  # the mistake under test: a number, not named numbers


class MetricMoody(MathAdapter):
    """Reports a fresh random number each call: not pure."""

    def metrics(self, completion: Response, problem: AdditionProblem) -> dict[str, float]:
        return {"noise": random.random()}


class Measured(MathAdapter):
    """Reports each completion's length in tokens and whether it names a number."""

    def metrics(self, completion: Response, problem: AdditionProblem) -> dict[str, float]:
        return {"tokens": completion.tokens, "answered": parse_answer(completion) is not None}


class OneAnswer:
    """Every problem has the same reference: no other reference can serve as a wrong answer."""

    def build_dataset(self, seed: int, step: int, size: int) -> list[int]:
        rng = random.Random(f"one/{seed}/{step}")
        return [rng.randint(0, 10**6) for _ in range(size)]

    def make_prompt(self, problem: int) -> str:
        return f"{problem}: say yes"

    def compute_reward(self, completion: str, problem: int) -> float:
        return 1.0 if completion.strip() == "yes" else 0.0

    def reference_completion(self, problem: int) -> str:
        return " yes"

    def evaluate(self, rewards: Sequence[float]) -> float:
        return sum(rewards) / len(rewards) if rewards else 0.0


@pytest.mark.parametrize(
    ("adapter", "expected"),
    [
        (EmptyPrompt(), r"^make_prompt must return a non-empty str or a non-empty list of "
                        r"\{'role', 'content'\} messages \(got \['', ''\] for "),
        (WrongSize(), r"^build_dataset\(seed=0, step=1, size=8\) must return a list of exactly "
                      r"8 problems \(got 9\)$"),
        (SameEveryStep(), r"^build_dataset gave the same problems for \(seed=0, step=1\) and "),
        (BrokenHeldout(), r"^heldout_dataset\(seed=0, size=32\) raised RuntimeError: no held-out"),
        (HeldoutIsTraining(), r"^heldout_dataset\(seed=0, size=32\) shares \d+ of 32 problems with "
                              r"training steps 1-10 \(size 8\)"),
        (HeldoutFromGlobalRandom(), r"^heldout_dataset\(seed=0, size=32\) depends on or advances "
                                    r"the global random state: draw from a private random\.Random "
                                    r"seeded by the seed, never from the `random` module$"),
        (NotAString(), r"^reference_completion\(.*\) must return a str \(got \d+\)"),
        (StopInReference(), r"contains the stop sequence '\\n', so sampling would stop before"),
        (StopCostsReward(), r"^compute_reward gave every wrong completion tried \(.*\) the "
                            r"reference's reward 0\.5 on .*: it cannot tell right from wrong"),
        (BeatsTheReference(), r"^compute_reward\(10,000 characters, .*\) beats the reference "
                              r"completion: the reference must earn the most"),
        (ReturnsBool(), r"^compute_reward\(the reference, .*\) returned True: a reward must be "
                        r"a finite number or a mapping of names to finite numbers"),
        (RaisingReference(), r"^reference_completion\(.*\) raised ValueError: odd \(\d+ times\)$"),
        (TooLongForItsBudget(), r"^reference_completion\(.*\) ended as the task asks takes \d "
                                r"tokens on ByteTokenizer, more than max_tokens=2"),
        (IntDigits(), r"^compute_reward gives the reference written with full-width digits "
                      r"\(' [\uff10-\uff19]+.*\) the reference's reward on .*: int\(\) and "),
        (MeanRewardAccuracy(), r"^evaluate does not count correct completions: .* each completion "
                               r"is correct \(1\) or not \(0\)"),
        (PositionalJudge(), r"^compute_group_rewards is not permutation-equivariant"),
        (MoodyJudge(), r"^compute_group_rewards gave one group .* then .*: rewards must be "
                       r"deterministic"),
        (ShortJudge(), r"^compute_group_rewards\(.*\) must return \d+ rewards, one each"),
        (AnswerRaises(), r"^final_answer\(.*\) raised (IndexError|ValueError): "),
        (AnswersNothing(), r"^final_answer\(the reference, .*\) = None, then None: the "
                           r"reference completion must name its answer, a str, the same each"),
        (AnswerNotText(), r"^final_answer\(.*\) = \d+: it must return a str or None"),
        (MetricRaises(), r"^metrics\(.*\) raised ValueError: invalid literal for int\(\)"),
        (MetricNotFinite(), r"^metrics\(the reference, .*\) returned \{'share': inf\}: metrics "
                            r"must be a mapping of names to finite numbers, e\.g\. "),
        (MetricNotAMapping(), r"^metrics\(the reference, .*\) returned 4: metrics must be a "
                              r"mapping of names to finite numbers"),
        (MetricMoody(), r"^metrics\(the reference, .*\) returned \{'noise': 0\.\d+\}, then "
                        r"\{'noise': 0\.\d+\}: metrics must be pure, the same for the same "
                        r"completion( \(\d+ times\))?$"),
    ],
)  # fmt: skip
def test_each_check_names_what_it_found(adapter: Any, expected: str) -> None:
    found = violations(adapter)
    assert any(re.search(expected, line) for line in found), found


# -- what the checker once missed (issue 26): one broken task a check -----------------------


def first_problem(adapter: Any) -> str:
    """How the checker names the first problem it scores (build_dataset(0, 1, 8)'s first): by
    what tells its prompt apart from the others' (the lines they all share left out)."""
    prompts = [adapter.make_prompt(p) for p in adapter.build_dataset(0, 1, 8)]
    return problem_name(prompts[0], shared_lines(prompts))


def found_once(adapter: Any, expected: str) -> None:
    """`expected` is one of the adapter's violations, word for word (with its count, if any)."""
    found = violations(adapter)
    assert any(re.fullmatch(re.escape(expected) + r"( \(\d+ times\))?", v) for v in found), found


class IgnoresItsSentinel(NeedsItsSentinel):
    """Full marks for the right answer, whether it ended at its stop or ran out of tokens."""

    def compute_reward(  # type: ignore[override]  # a Response, as the contract gives it
        self, completion: Response, problem: AdditionProblem
    ) -> Reward:
        right = MathAdapter.compute_reward(self, completion, problem) == 1.0
        return {"correct": 1.0 if right else 0.0, "format": 0.5 if completion.strip() else 0.0}


def test_a_reward_that_pays_a_cut_off_reference_in_full_is_warned_of() -> None:
    summary = check_adapter(IgnoresItsSentinel(), across_processes=False)
    line, warning = summary.splitlines()
    assert line.startswith("task 'NeedsItsSentinel' (")  # passed: the task's intent is its own
    assert warning == (
        "warning: compute_reward pays the reference cut off at the token limit "
        f"(ended='length') 1.5, as much as the reference ended as the task asks, on "
        f"{first_problem(IgnoresItsSentinel())}: a completion that ran out of tokens earns full "
        "reward; if the task needs its ending, pay less when completion.ended == 'length'"
    )
    # The task that pays a cut-off answer only its format part is not warned of.
    assert "warning" not in check_adapter(NeedsItsSentinel(), across_processes=False)


class WrongAsGoodAsRight(MathAdapter):
    """Its wrong completion (the answer plus one) earns full marks."""

    def wrong_completions(self, problem: AdditionProblem) -> list[str]:
        return [f" {problem.answer + 1}"]

    def compute_reward(self, completion: str, problem: AdditionProblem) -> float:
        return 1.0 if parse_answer(completion) in (problem.answer, problem.answer + 1) else 0.0


def test_wrong_completions_must_earn_less_than_the_reference() -> None:
    task = WrongAsGoodAsRight()
    wrong = task.wrong_completions(task.build_dataset(0, 1, 8)[0])[0]
    found_once(
        task,
        f"compute_reward gives wrong_completions' {wrong!r} 1, as much as the "
        f"reference on {first_problem(task)}: the task's wrong_completions must earn less "
        "than the reference",
    )


class DropsRepeats(LongerWins):
    """Scores each distinct completion once: fewer rewards than completions when they repeat."""

    def compute_group_rewards(
        self, responses: Sequence[Response], problem: AdditionProblem
    ) -> list[float]:
        return super().compute_group_rewards(list(dict.fromkeys(responses)), problem)


class FirstOfEqualsWins(LongerWins):
    """Breaks ties by position: of equal completions, the first wins."""

    def compute_group_rewards(
        self, responses: Sequence[Response], problem: AdditionProblem
    ) -> list[float]:
        rewards = super().compute_group_rewards(responses, problem)
        first = {r: i for i, r in reversed(list(enumerate(responses)))}
        return [
            r + (0.0 if first[s] == i else -0.01)
            for i, (s, r) in enumerate(zip(responses, rewards, strict=True))
        ]


def test_a_group_with_repeated_completions_gets_one_reward_each_equal_for_equals() -> None:
    where = first_problem(LongerWins())
    # [the reference, 'zzz'] twice, then 'zzz' again: 5 completions, 2 distinct ones.
    found_once(
        DropsRepeats(),
        f"compute_group_rewards(a group with repeated completions, {where}) must return 5 "
        "rewards, one each (got [1.0, 0.0])",
    )
    # The reference: a tie with its twin and three wins, (0.5 + 3) / 4 = 0.875; 'zzz': two
    # ties and two losses, (0.5 + 0.5) / 4 = 0.25; each later twin 0.01 less.
    found_once(
        FirstOfEqualsWins(),
        "compute_group_rewards gave a group with repeated completions ([the reference, 'zzz'] "
        "twice, then 'zzz' once more) [0.875, 0.25, 0.865, 0.24, 0.24]: equal completions must "
        "earn equal rewards (swapping them leaves the group as it was)",
    )


class RankOnly(LongerWins):
    """Pays only ranks in the group: a completion alone wins against nobody, and earns 0.5."""

    def compute_group_rewards(
        self, responses: Sequence[Response], problem: AdditionProblem
    ) -> list[float]:
        if len(responses) == 1:
            return [0.5]
        return super().compute_group_rewards(responses, problem)


def test_the_reference_alone_in_its_group_must_count_as_correct() -> None:
    found_once(
        RankOnly(),
        "compute_group_rewards gives the reference alone in its group 0.5, which "
        f"evaluate([0.5]) counts as wrong (0.0) on {first_problem(RankOnly())}: held-out "
        "evaluation scores each greedy completion in a group of one, so it would count the "
        "reference wrong; a group of one must earn a correct completion full credit",
    )


class HalfAtTheEndOfSequence(MathAdapter):
    """Half marks for the right answer ended at end-of-sequence rather than its newline, and
    the mean reward as its accuracy: only that ending shows the partial credit."""

    def compute_reward(  # type: ignore[override]  # a Response, as the contract gives it
        self, completion: Response, problem: AdditionProblem
    ) -> float:
        right = super().compute_reward(completion, problem)
        if completion.ended == "end_of_sequence":
            return right / 2
        return right if completion.ended == "stop" else 0.0

    def evaluate(self, rewards: Sequence[float]) -> float:
        return sum(rewards) / len(rewards) if rewards else 0.0


def test_evaluate_is_given_the_rewards_every_ending_earns() -> None:
    found = violations(HalfAtTheEndOfSequence())
    assert any(
        re.fullmatch(
            r"evaluate does not count correct completions: for single rewards it gives "
            r"\{0\.0: 0\.0, 0\.5: 0\.5, 1\.0: 1\.0\}, and for all 3 at once 0\.5; each "
            r"completion is correct \(1\) or not \(0\), and the accuracy is their mean, never "
            r"the mean reward",
            v,
        )
        for v in found
    ), found


class EmptyBreaksTheJudge(LongerWins):
    """A judge that reads the first word of each completion: an empty one has none."""

    def _score(self, completion: str, problem: AdditionProblem) -> float:
        return len(completion.split()[0]) + super()._score(completion, problem)


def test_a_group_reward_failure_names_the_completion_that_fails() -> None:
    found_once(
        EmptyBreaksTheJudge(),
        "compute_group_rewards(a group holding the empty completion, "
        f"{first_problem(EmptyBreaksTheJudge())}) raised IndexError: list index out of range",
    )


def test_a_chat_problem_is_named_by_its_last_user_message() -> None:
    conversation = [
        {"role": "system", "content": "You convert numbers to English words."},
        {"role": "user", "content": "Write 12 in words."},
        {"role": "assistant", "content": "twelve"},
        {"role": "user", "content": "Write 40 in words."},
    ]
    assert problem_name(conversation) == "'Write 40 in words.'"
    assert problem_name(conversation[:1]) == shown(prompt_key(conversation[:1]), 40)
    assert problem_name("Q: What is 2 + 2?") == "'Q: What is 2 + 2?'"


class CountsTokens(MathAdapter):
    """Raises on a Response whose token count is not what the fake's tokenizer samples: a
    token a byte, plus the end-of-sequence token that ended it."""

    def compute_reward(  # type: ignore[override]  # a Response, as the contract gives it
        self, completion: Response, problem: AdditionProblem
    ) -> Reward:
        self.counted(completion)
        return super().compute_reward(completion, problem)

    def final_answer(  # type: ignore[override]  # a Response, as the contract gives it
        self, completion: Response
    ) -> str | None:
        self.counted(completion)
        return super().final_answer(completion)

    @staticmethod
    def counted(completion: Response) -> None:
        closing = completion.ended in ("end_of_turn", "end_of_sequence")
        if completion.tokens != len(completion.encode("utf-8", "surrogatepass")) + closing:
            raise ValueError(f"{completion.tokens} tokens for {completion!r}")


def test_every_completion_the_checker_makes_up_carries_its_token_count() -> None:
    # " 42\n" ended at its stop: 4 tokens; cut off as " 42": 3; the checker counts them all,
    # so the task gets every check the addition task does.
    assert checks_passed(CountsTokens()) == checks_passed(MathAdapter())


def test_a_task_that_reports_sound_metrics_passes_with_more_checks() -> None:
    # Its metrics are called on the reference, wrong and hostile completions, ended both ways.
    assert checks_passed(Measured()) > checks_passed(MathAdapter())


def test_a_reward_that_fails_on_many_texts_is_one_violation_with_a_count() -> None:
    found = violations(FussyReward())
    raised = [line for line in found if "raised ValueError" in line]
    assert len(raised) == 1, found
    assert re.search(r"\(\d+ times\)$", raised[0]), raised


def test_rewards_may_require_the_closing_sentinel_and_come_in_parts() -> None:
    # Ended at its stop: full marks; cut off at the token limit: only the format part.
    task = NeedsItsSentinel()
    problem = task.build_dataset(0, 1, 1)[0]
    answer = task.reference_completion(problem)
    assert task.compute_reward(Response(answer + "\n", "stop", "\n"), problem) == {
        "correct": 1.0, "format": 0.5
    }  # fmt: skip
    assert task.compute_reward(Response(answer, "length"), problem) == {
        "correct": 0.0,
        "format": 0.5,
    }
    # Every check the addition task gets, passed: scored as the task asks a completion to end
    # (at its stop), the reference earns full marks, where a wrong answer earns the format part.
    # (the addition task's cut-off check, which its `cut_off_graded` skips, counted in both)
    assert checks_passed(task) == checks_passed(
        replace(as_task(MathAdapter()), cut_off_graded=None)
    )


def test_a_pairwise_judge_passes_sync_or_async() -> None:
    # The async judge gets every check the plain one does, both of them the laws of a group
    # reward (deterministic, permutation-equivariant) that a reward of one completion skips.
    assert checks_passed(AsyncLongerWins()) == checks_passed(LongerWins())
    assert checks_passed(LongerWins()) > checks_passed(MathAdapter())


def test_a_task_with_one_answer_is_still_checked_against_wrong_text() -> None:
    scored: set[str] = set()

    class Recorded(OneAnswer):
        def compute_reward(self, completion: str, problem: int) -> float:
            scored.add(str(completion))
            return super().compute_reward(completion, problem)

    checks_passed(Recorded())
    # No problem's reference differs from " yes": the reference with a digit added stands in
    # for another's, beside the wrong texts every task is given (each ended at the stop).
    assert {f"{wrong}\n" for wrong in (" yes0", *WRONG)} <= scored


def test_something_that_is_not_an_adapter_fails_with_one_violation() -> None:
    with pytest.raises(AssertionError, match=r"^1 violation of the Adapter contract:\n- int is"):
        check_adapter(3)  # type: ignore[arg-type]


def test_random_texts_are_seeded_and_varied() -> None:
    texts = random_texts(12)
    assert texts == random_texts(12)
    assert len(set(texts)) == 12
    assert any(max(map(ord, t)) > 0xFFFF for t in texts)


# -- learning, on the backend given -------------------------------------------------------


def test_the_learning_check_trains_on_the_backend_it_is_given(tmp_path: Path) -> None:
    made: list[RecordingBackend] = []

    def learns_on(run: RunProblems[Any]) -> Backend:
        made.append(
            RecordingBackend(FakeBackend.for_run(MathAdapter(), run, checkpoint_dir=tmp_path))
        )
        return made[-1]

    assert checks_passed(MathAdapter(), learns=learns_on) == checks_passed(MathAdapter()) + 1
    (backend,) = made
    assert len(backend.trained) >= 15  # 20 steps, each trained on unless every group was equal


class Frozen(RecordingBackend):
    """A backend whose updates change nothing: no task learns on it."""

    async def submit_train_step(
        self, datums_D: Sequence[Datum], learning_rate: float, loss: Loss = IMPORTANCE_SAMPLING
    ) -> Awaitable[TrainResult]:
        self.trained.append(list(datums_D))
        return asyncio.ensure_future(asyncio.sleep(0, TrainResult(loss=0.0)))


def test_a_run_that_does_not_learn_fails_the_learning_check(tmp_path: Path) -> None:
    def learns_on(run: RunProblems[Any]) -> Backend:
        return Frozen(FakeBackend.for_run(MathAdapter(), run, checkpoint_dir=tmp_path))

    with pytest.raises(AssertionError) as failed:
        check_adapter(MathAdapter(), learns=learns_on, across_processes=False)
    message = str(failed.value)
    assert "1 violation" in message
    assert re.search(
        r"a 20-step run on the backend given did not learn: accuracy went from [0-9.]+% "
        r"\(steps 1-5\) to [0-9.]+% \(steps 16-20\); it must rise by at least 10 points",
        message,
    )


class CountsAnyAnswer(MathAdapter):
    """Counts any answer correct, so accuracy starts saturated, and pays the right sum three
    times what any answer earns: only the mean reward can show it learning."""

    name = "CountsAnyAnswer"

    def compute_reward(self, completion: str, problem: AdditionProblem) -> float:
        said = 0.25 if completion.strip() else 0.0
        return said + (0.75 if parse_answer(completion) == problem.answer else 0.0)

    def evaluate(self, rewards: Sequence[float]) -> float:
        return sum(r >= 0.25 for r in rewards) / len(rewards) if rewards else 0.0


SATURATED = (
    r"accuracy started at (?P<start>[0-9.]+)%, too high to rise 10 points, so the mean reward "
    r"was judged: it went from (?P<first>[0-9.]+) \(steps 1-5\) to (?P<last>[0-9.]+) "
    r"\(steps 16-20\)"
)


def test_the_learning_check_says_it_judged_accuracy() -> None:
    summary = check_adapter(MathAdapter(), learns=True, across_processes=False)
    assert re.fullmatch(
        r"learning on the fake backend: accuracy went from [0-9.]+% \(steps 1-5\) to "
        r"[0-9.]+% \(steps 16-20\)",
        summary.splitlines()[1],
    ), summary


def test_a_task_whose_accuracy_starts_saturated_is_judged_on_its_mean_reward() -> None:
    # Mastermind's case in issue 26: accuracy 93.1% -> 100%, the mean reward 0.65 -> 0.98.
    summary = check_adapter(CountsAnyAnswer(), learns=True, across_processes=False)
    found = re.fullmatch(rf"learning on the fake backend: {SATURATED}", summary.splitlines()[1])
    assert found, summary
    assert float(found["start"]) > 90.0
    # The rewards seen span 0 (the empty completion) to 1 (the reference): a rise of 0.1.
    assert float(found["last"]) >= float(found["first"]) + 0.1


def test_a_saturated_task_that_does_not_learn_fails_on_its_mean_reward(tmp_path: Path) -> None:
    def learns_on(run: RunProblems[Any]) -> Backend:
        return Frozen(FakeBackend.for_run(CountsAnyAnswer(), run, checkpoint_dir=tmp_path))

    with pytest.raises(AssertionError) as failed:
        check_adapter(CountsAnyAnswer(), learns=learns_on, across_processes=False)
    (line,) = [v for v in str(failed.value).splitlines() if v.startswith("- ")]
    assert re.fullmatch(
        rf"- a 20-step run on the backend given did not learn: {SATURATED}; it must rise by at "
        r"least 0\.1 \(a tenth of the range from the lowest reward seen, 0, to the "
        r"reference's, 1\)",
        line,
    ), line


class WrongReference(MathAdapter):
    """The reference is one off: it earns 0, as every wrong answer does."""

    def reference_completion(self, problem: AdditionProblem) -> str:
        return f" {problem.answer + 1}"


def test_a_reference_that_earns_no_more_than_wrong_answers_is_told_only_that() -> None:
    # The checks that compare with the reference (its full-width digits, its cut-off copy)
    # would blame the reward for what is the reference's fault: they are left out.
    with pytest.raises(AssertionError) as raised:
        check_adapter(WrongReference())
    said = str(raised.value)
    assert "it cannot tell right from wrong" in said
    assert "the reference completion earns 0.0, which evaluate([0.0] * 4) scores 0.0" in said
    assert "full-width" not in said
    assert "cut off at the token limit" not in said
