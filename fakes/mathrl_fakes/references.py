"""What the fake knows of a task: each prompt's reference, drawn through the task's own methods.

For: `FakeBackend.for_run` and `for_problems`, and `FakeModel`, which learns
these references. It never parses a prompt: a text prompt is known by its
text, a conversation by its tokens in the fake's chat template. It knows the
task only through the Adapter contract, and a run only through what it is
given (`RunProblems`): which problems the run draws is the loop's business.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from mathrl.adapter import Adapter, Response
from mathrl.resolved import Task, as_task
from mathrl_fakes.policy import ByteTokenizer

P = TypeVar("P")
P_co = TypeVar("P_co", covariant=True)
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
            prompt
            if isinstance(prompt, str)
            else tuple(TOKENIZER.render_chat(prompt, resolved.chat_template_options))
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
        said = (
            *history,
            Response(str(response), response.ended, response.stop, turn, response.tokens),
        )
        later = _next_turn(task, problem, said, stop) if turn + 1 < task.max_turns else None
        return Reference(task.reference_turn(problem, said), stop, (), later)

    return then


class RunProblems(Protocol[P_co]):
    """What a run will ask the fake about, as the fake is given it (`mathrl.run_problems`)."""

    @property
    def seed(self) -> int: ...

    @property
    def first_step(self) -> int: ...

    @property
    def last_step(self) -> int: ...

    @property
    def batch(self) -> int:
        """The fewest sample requests a training step makes: one per problem."""
        ...

    def heldout(self) -> Sequence[P_co]:
        """The problems evaluation may ask."""
        ...

    def step(self, step: int) -> Sequence[P_co]:
        """The problems training step `step` may ask."""
        ...


class StepByStep(Generic[P]):
    """A run's training references, one step at a time, as the run gets there.

    Drawing them all up front would cost steps x batch problems before the
    first step (a typo in the step count would eat the machine). A step makes at
    least `batch` sample requests, so after `requests` of them the run is at
    most at step `first_step + requests // batch`: on a miss, the fake draws
    steps up to LOOKAHEAD beyond that, and no further (an unknown prompt is
    refused without drawing the whole run).
    """

    def __init__(self, task: Task[P], run: RunProblems[P]) -> None:
        self._task, self._run = task, run
        self.next_step = run.first_step

    def __call__(self, requests: int) -> dict[PromptKey, Reference] | None:
        """The next step's references, or None past the run's reach (see the class)."""
        reach = self._run.first_step + requests // self._run.batch + LOOKAHEAD
        if self.next_step > min(self._run.last_step, reach):
            return None
        problems = self._run.step(self.next_step)
        self.next_step += 1
        return references_for(self._task, problems)
