"""`check_adapter` on environments broken one way each: every episode check can fail."""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import pytest

from conftest import checks_passed
from mathrl.adapter import Feedback, Response
from mathrl.tasks.addition import AdditionProblem, MathAdapter
from mathrl.testing import check_adapter
from mathrl.testing.checker import problem_name, shared_lines


def violations(adapter: Any) -> list[str]:
    """`check_adapter`'s violations of `adapter`, within this process (test_testing checks
    the new interpreter's draws)."""
    with pytest.raises(AssertionError) as excinfo:
        check_adapter(adapter, across_processes=False)
    return [line.removeprefix("- ") for line in str(excinfo.value).splitlines()[1:]]


class Retry(MathAdapter):
    """Addition with a second try: a wrong answer hears "wrong" and answers again."""

    name = "retry"
    max_turns = 2
    cut_off_graded = None  # (the addition task's reason is not this task's)

    def feedback(self, problem: AdditionProblem, responses: Sequence[Response]) -> Feedback:
        if self.compute_reward(responses[-1], problem) == 1.0:
            return Feedback(None)
        return Feedback("Wrong. Try again: ")


class RaisesOnNoise(Retry):
    def feedback(self, problem: AdditionProblem, responses: Sequence[Response]) -> Feedback:
        int(responses[-1].strip() or "0")  # the bug: int() of model output
        return super().feedback(problem, responses)


class SaysText(Retry):
    def feedback(self, problem: AdditionProblem, responses: Sequence[Response]) -> Feedback:
        return "Wrong."  # type: ignore[return-value]  # the mistake under test


class Moody(Retry):
    def __init__(self) -> None:
        self.calls = itertools.count()

    def feedback(self, problem: AdditionProblem, responses: Sequence[Response]) -> Feedback:
        return Feedback(f"Try again ({next(self.calls)}): ")


class MeasuresBadly(Retry):
    def feedback(self, problem: AdditionProblem, responses: Sequence[Response]) -> Feedback:
        said = super().feedback(problem, responses)
        return Feedback(said.reply, said.reward, metrics={"tries": float("inf")})


class PaysForNoise(Retry):
    def feedback(self, problem: AdditionProblem, responses: Sequence[Response]) -> Feedback:
        said = super().feedback(problem, responses)
        return Feedback(said.reply, 5.0 if "\x00" in responses[-1] else 0.0)


class Wordy(Retry):
    episode_tokens = 12  # the reference's turn fits; the reply after a wrong turn does not

    def reference_turn(self, problem: AdditionProblem, responses: Sequence[Response]) -> str:
        return "0" if not responses else self.reference_completion(problem)


class NoReferenceTurn(Retry):
    def reference_turn(self, problem: AdditionProblem, responses: Sequence[Response]) -> str:
        return 7  # type: ignore[return-value]  # the mistake under test


class PunishesRecovery(Retry):
    """Answering right on the second try costs more than never answering right."""

    def feedback(self, problem: AdditionProblem, responses: Sequence[Response]) -> Feedback:
        said = super().feedback(problem, responses)
        late = said.reply is None and len(responses) > 1
        return Feedback(said.reply, -2.0 if late else 0.0)


class BonusUncounted(Retry):
    """The environment adds 0.5 for a first-try answer; evaluate counts only 1.0 as right."""

    def feedback(self, problem: AdditionProblem, responses: Sequence[Response]) -> Feedback:
        said = super().feedback(problem, responses)
        return Feedback(said.reply, 0.5 if said.reply is None and len(responses) == 1 else 0.0)

    def evaluate(self, rewards: Sequence[float]) -> float:
        return sum(r == 1.0 for r in rewards) / len(rewards) if rewards else 0.0


class PaysLater(Retry):
    """A right answer at the second turn pays five times the first's."""

    def compute_reward(self, completion: str, problem: AdditionProblem) -> float:
        right = super().compute_reward(completion, problem)
        return 5 * right if isinstance(completion, Response) and completion.turn > 1 else right


class AppendsToHistory(Retry):
    def feedback(self, problem: AdditionProblem, responses: Sequence[Response]) -> Feedback:
        history = responses + ["(the game)"]  # type: ignore[operator]  # noqa: RUF005  # the mistake under test
        return super().feedback(problem, history[:-1])


class NeverEnds(Retry):
    """The game goes on after a right answer: feedback never says the episode is over."""

    max_turns = 5

    def feedback(self, problem: AdditionProblem, responses: Sequence[Response]) -> Feedback:
        return Feedback("Again: ")


class Guesses(Retry):
    """A guessing game: its main branch answers a guess (a short run of ASCII digits); any
    other text is told to guess. Its wrong_completions are near misses, valid guesses."""

    def wrong_completions(self, problem: AdditionProblem) -> list[str]:
        return [f" {problem.answer + 1}"]

    def feedback(self, problem: AdditionProblem, responses: Sequence[Response]) -> Feedback:
        guess = responses[-1].strip()
        if not (guess.isascii() and guess.isdigit() and len(guess) <= 6):
            return Feedback("Guess a number: ")
        return self.answer(int(guess), problem)

    def answer(self, guess: int, problem: AdditionProblem) -> Feedback:
        return Feedback(None) if guess == problem.answer else Feedback("Wrong. Guess again: ")


class PaysAWrongGuess(Guesses):
    """The main branch pays a wrong guess the 1.0 a right answer earns (meant: 0.1)."""

    def answer(self, guess: int, problem: AdditionProblem) -> Feedback:
        return Feedback(None) if guess == problem.answer else Feedback(None, 1.0)


class NoisyHint(Guesses):
    """The main branch's hint to a wrong guess changes from call to call."""

    def __init__(self) -> None:
        self.calls = itertools.count()

    def answer(self, guess: int, problem: AdditionProblem) -> Feedback:
        if guess == problem.answer:
            return Feedback(None)
        return Feedback(f"Wrong ({next(self.calls) % 10}). Guess again: ")


class Semicolon(Retry):
    """After a wrong answer, the second try ends with ";" and has 5 tokens (" 198;" at most):
    per-turn limits that fit."""

    limits: dict[str, Any] = {"stop": (";",), "max_tokens": 5}  # noqa: RUF012  # read only

    def __init__(self) -> None:
        self.histories: list[tuple[Response, ...]] = []

    def feedback(self, problem: AdditionProblem, responses: Sequence[Response]) -> Feedback:
        self.histories.append(tuple(responses))
        said = super().feedback(problem, responses)
        return said if said.reply is None else replace(said, **self.limits)


def limited(**limits: Any) -> Semicolon:
    """A `Semicolon` whose feedback sets `limits` for the second try instead."""
    task = Semicolon()
    task.limits = limits
    return task


class TaskStopInLaterTurn(Retry):
    """The second try's reference holds the task's stop, a newline: it would be cut there."""

    def reference_turn(self, problem: AdditionProblem, responses: Sequence[Response]) -> str:
        return f" {problem.answer}\nDone."


@pytest.mark.parametrize(
    ("adapter", "expected"),
    [
        (RaisesOnNoise(), r"^feedback\(turn 1 of .*\) raised ValueError: invalid literal for "),
        (SaysText(), r"^feedback\(turn 1 of the reference episode\) returned 'Wrong\.': it must "
            r"return a Feedback\(reply=text or None, reward=a finite number"),
        (Moody(), r"^feedback\(turn 1 of the reference episode\) returned Feedback\(reply='Try "
            r"again \(0\): '.* then .*'Try again \(1\): '.* for the same history: the "
            r"environment must be deterministic"),
        (PaysForNoise(), r"^an episode of control characters earns 10, more than the reference "
            r"episode's 1 on .*: the reference must earn the most"),
        (Wordy(), r"^the recovery episode of .* takes 26 tokens on ByteTokenizer, more than the "
            r"episode's budget of 12: raise the task's episode_tokens"),
        (NoReferenceTurn(), r"^reference_turn\(.*, turn 2\) must return a str \(got 7\)"),
        (PunishesRecovery(), r"^the recovery episode \(a wrong first turn, then the "
            r"reference's\) earns -1, less than staying wrong \(0\) on .*: reference_turn must "
            r"play the best turn after any history"),
        (PaysLater(), r"^the recovery episode earns 5, more than the reference episode's 1 "),
        (AppendsToHistory(), r"^feedback\(turn 1 of .*\) raised TypeError: can only concatenate "),
        (BonusUncounted(), r"^the reference episode earns 1\.5, which evaluate\(\[1\.5\] \* 4\) "
            r"scores 0\.0, not 1\.0 on .*: reference_completion and reference_turn must play a "
            r"fully correct episode"),
        (NeverEnds(), r"^the reference episode of .* never ends: feedback gave a reply after "
            r"each of its 5 turns; once the episode is won, feedback must end it with "
            r"Feedback\(reply=None\)( \(\d+ times\))?$"),
        (PaysAWrongGuess(), r"^the episode of wrong_completions' ' \d+' at every turn earns 1, as "
            r"much as the reference episode on .*: the task's wrong_completions, played every "
            r"turn, must earn less than the reference episode( \(\d+ times\))?$"),
        (MeasuresBadly(), r"^feedback\(turn 1 of the reference episode\) returned "
            r"Feedback\(metrics=\{'tries': inf\}\): metrics must be a mapping of names to "
            r"finite numbers"),
        (NoisyHint(), r"^feedback\(turn 1 of the episode of wrong_completions' ' \d+'\) returned "
            r"Feedback\(reply='Wrong \(0\)\. .* then .*'Wrong \(1\)\. .* for the same "
            r"history: the environment must be deterministic"),
        (limited(max_tokens=0), r"^feedback\(turn 1 of .*\) sets the next turn's limits "
            r"wrong: Feedback\.max_tokens must be an integer >= 1, or None for the run's "
            r"max_tokens \(got 0\)"),
        (limited(stop=";"), r"^feedback\(turn 1 of .*\) sets the next turn's limits wrong: "
            r"Feedback\.stop must be a tuple of non-empty strings, .* \(got ';'\)"),
        (limited(stop=(";", "")), r"^feedback\(turn 1 of .*\) sets the next turn's limits "
            r"wrong: Feedback\.stop must be .* \(got \(';', ''\)\)"),
        (limited(max_tokens=500), r"^feedback\(turn 1 of .*\) sets the next turn's max_tokens "
            r"to 500, more than the episode's budget of 32 tokens: lower Feedback\.max_tokens "
            r"to at most 32, or raise the task's episode_tokens"),
        (limited(stop=(" ",)), r"^reference_turn\(.*, turn 2\) = ' \d+' contains the stop "
            r"sequence ' ' that feedback\(turn 1 of .*\) set for it, so sampling would stop "
            r"before it ends: leave ' ' out of Feedback\.stop, or write the reference without "
            r"it"),
        (limited(max_tokens=2), r"^reference_turn\(.*, turn 2\) ended as its turn asks takes "
            r"\d tokens on ByteTokenizer, more than the max_tokens=2 that feedback\(turn 1 of "
            r".*\) set for it: raise Feedback\.max_tokens to at least \d"),
        (TaskStopInLaterTurn(), r"^reference_turn\(.*, turn 2\) = ' \d+\\nDone\.' contains "
            r"the task's stop sequence '\\n', so sampling would stop before it ends: set the "
            r"turn's own stops \(Feedback\.stop\), or write the reference without it"),
    ],
)  # fmt: skip
def test_each_episode_check_names_what_it_found(adapter: Any, expected: str) -> None:
    found = violations(adapter)
    assert any(re.search(expected, v, re.DOTALL) for v in found), found


def test_a_sound_environment_passes() -> None:
    # The checks of the task without its environment, and its episodes' on top. (The code
    # task's environment: test_code_feedback.)
    assert checks_passed(Retry()) > checks_passed(MathAdapter())


class ThreeRounds(Retry):
    """Three rounds whatever happens; each right answer pays 0.6, then 0.3, then 0.1."""

    max_turns = 3

    def feedback(self, problem: AdditionProblem, responses: Sequence[Response]) -> Feedback:
        turn = len(responses)
        right = super().compute_reward(responses[-1], problem) == 1.0
        pay = (0.6, 0.3, 0.1)[turn - 1] if right else 0.0
        return Feedback("Again: " if turn < 3 else None, pay)

    def compute_reward(self, completion: str, problem: AdditionProblem) -> float:
        return 0.0  # all of it comes turn by turn

    def evaluate(self, rewards: Sequence[float]) -> float:
        return sum(r == 1.0 for r in rewards) / len(rewards) if rewards else 0.0


def test_an_episode_paid_turn_by_turn_is_added_as_the_loop_adds_it() -> None:
    # 0.6 + 0.3 + 0.1 is 0.9999999999999999 added left to right; math.fsum gives 1.0, as
    # the loop does, and evaluate counts exactly 1.0 as right.
    assert checks_passed(ThreeRounds()) > checks_passed(MathAdapter())  # its episodes' too


def test_a_game_whose_main_branch_is_sound_passes() -> None:
    # Its wrong_completions, played through the environment, are answered and earn 0.
    assert checks_passed(Guesses()) > checks_passed(Retry())


class NeedsItsEnding(Retry):
    """Pays a right answer only when its turn ended as the task asks, not cut off."""

    def compute_reward(self, completion: str, problem: AdditionProblem) -> float:
        right = super().compute_reward(completion, problem)
        return 0.0 if getattr(completion, "ended", None) == "length" else right


def test_an_episode_that_pays_turns_cut_off_at_the_token_limit_is_warned_of() -> None:
    summary = check_adapter(Retry(), across_processes=False)
    line, warning = summary.splitlines()
    assert line.startswith("task 'retry' (")  # passed: whether the ending matters is the task's
    prompts = [Retry().make_prompt(p) for p in Retry().build_dataset(0, 1, 8)]
    where = problem_name(prompts[0], shared_lines(prompts))
    assert warning == (
        "warning: the reference episode cut off at the token limit (every turn "
        f"ended='length') earns 1, as much as the reference episode on {where}: a turn that ran "
        "out of tokens earns full reward; if the task needs its ending, pay less when "
        "completion.ended == 'length'"
    )
    assert "warning" not in check_adapter(NeedsItsEnding(), across_processes=False)


def test_per_turn_limits_that_fit_pass_and_each_turn_ends_as_its_feedback_set() -> None:
    task = Semicolon()
    checks_passed(task)
    # The checker plays the second try with the stop its feedback set, and says so.
    seconds = [h for h in task.histories if len(h) == 2]
    assert seconds
    assert all((h[0].stop, h[1].stop) == ("\n", ";") for h in seconds if h[1].ended == "stop")
    assert any(h[1].ended == "stop" for h in seconds)
