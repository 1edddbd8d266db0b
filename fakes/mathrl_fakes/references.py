"""What the fake knows of a task: each prompt's reference, drawn through the task's own methods.

For: `FakeBackend.for_run` and `for_problems`, and `FakeModel`, which learns
these references. It never parses a prompt: a text prompt is known by its
text, a conversation by its tokens in the fake's chat template.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from mathrl.adapter import Adapter, Response
from mathrl.config import TrainConfig
from mathrl.resolved import Task, as_task, prompt_key
from mathrl.rewards import TaskError
from mathrl.rollout import prompt_tokens, step_problems
from mathrl_fakes.policy import ByteTokenizer

P = TypeVar("P")
TOKENIZER = ByteTokenizer()
LOOKAHEAD = 2
"""How many steps beyond the one its sample requests have reached a run's fake may look."""


@dataclass(frozen=True, slots=True)
class Reference:
    """What the fake should learn to write after one prompt: `answer`, then `stop`, then EOS."""

    answer: str
    stop: str = ""
    wrong: tuple[str, ...] = ()
    """Wrong answers the task names, written now and then instead (each with `stop`)."""
    then: Callable[[Response], Reference] | None = field(default=None, compare=False)
    """An episode's next turn: its reference, given what the model wrote in this one."""


PromptKey = str | tuple[int, ...]
"""A prompt as the fake knows it: its text, or its tokens (a conversation, rendered)."""


def references_for(task: Adapter[P] | Task[P], problems: Sequence[P]) -> dict[PromptKey, Reference]:
    """Prompt -> Reference, through the task's own methods (never by parsing a prompt).

    A text prompt is keyed by its text; a conversation by its tokens in the
    fake's chat template. The reference ends as the task asks: with its first
    stop sequence, or else end-of-sequence (which is also the fake's
    end-of-turn).
    """
    resolved = as_task(task)
    adapter = resolved.adapter
    references: dict[PromptKey, Reference] = {}
    for p in problems:
        prompt = adapter.make_prompt(p)
        stops = resolved.stop_for(prompt)
        key: PromptKey = (
            prompt if isinstance(prompt, str) else tuple(prompt_tokens(TOKENIZER, resolved, prompt))
        )
        wrong = tuple(str(w) for w in resolved.wrong_completions(p))
        stop = stops[0] if stops else ""
        then = _next_turn(resolved, p, (), stop) if resolved.max_turns > 1 else None
        references[key] = Reference(adapter.reference_completion(p), stop, wrong, then)
    return references


def _next_turn(
    task: Task[P], problem: P, history: tuple[Response, ...], stop: str
) -> Callable[[Response], Reference]:
    """How the fake learns an episode's later turns: the task's `reference_turn`.

    Given the model's response to turn k (the fake reads it from the tokens it
    sampled itself), the reference of turn k + 1 is
    `reference_turn(problem, responses so far)`.
    """

    def then(response: Response) -> Reference:
        turn = len(history) + 1
        said = (*history, Response(str(response), response.ended, response.stop, turn))
        later = _next_turn(task, problem, said, stop) if turn + 1 < task.max_turns else None
        return Reference(task.reference_turn(problem, said), stop, (), later)

    return then


def run_problems(task: Adapter[P] | Task[P], config: TrainConfig) -> list[P]:
    """Every problem a run draws: each training step's, then its held-out set."""
    resolved = as_task(task)
    problems: list[P] = []
    for step in range(1, config.steps + 1):
        problems += step_problems(resolved, config, step)
    return problems + resolved.heldout(config.seed, config.eval_problems)


class StepReferences:
    """A run's training references, one step at a time, as the run gets there.

    Drawing them all up front would cost steps x batch problems before the
    first step (a typo in --steps would eat the machine). A step sends one
    sample request per problem, so after `requests` of them the run is at
    most at step `first_step + requests // batch`: on a miss, the fake draws
    steps up to LOOKAHEAD beyond that, and no further (an unknown prompt is
    refused without drawing the whole run).
    """

    def __init__(self, task: Adapter[P] | Task[P], config: TrainConfig, first_step: int = 1):
        self._task = as_task(task)
        self._config = config
        self._first_step = first_step
        self.next_step = first_step

    def __call__(self, requests: int) -> dict[PromptKey, Reference] | None:
        """The next step's references, or None past the run's reach (see the class)."""
        reach = self._first_step + requests // self._config.batch + LOOKAHEAD
        if self.next_step > min(self._config.steps, reach):
            return None
        seed, step = self._config.seed, self.next_step
        problems = step_problems(self._task, self._config, step)
        again = step_problems(self._task, self._config, step)
        if [prompt_key(self._task.adapter.make_prompt(p)) for p in problems] != [
            prompt_key(self._task.adapter.make_prompt(p)) for p in again
        ]:
            # The run draws them once more, and would miss every reference drawn here.
            problem = ValueError(
                "two calls gave different problems: it is not deterministic (draw from a "
                "random.Random seeded by (seed, step), never from the global random module)"
            )
            raise TaskError(self._task, "build_dataset", problem, f"seed={seed}, step={step}")
        self.next_step += 1
        return references_for(self._task, problems)
