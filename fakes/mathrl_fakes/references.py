"""What the fake knows of a task: each prompt's reference, drawn through the task's own methods.

For: `FakeBackend.for_run` and `for_problems`, and `FakeModel`, which learns
these references. It never parses a prompt: a text prompt is known by its
text, a conversation by its tokens in the fake's chat template. It knows the
task only through the Adapter contract, and a run only through what it is
given (`RunProblems`): which problems the run draws is the loop's business.

Problems may share a prompt (a game whose secret the prompt hides). The
sampler sees tokens only, so the fake knows a context as the problems it may
be (`Known`, told apart by `mathrl.problem_keys`), as a real model can only
know what its context shows:

- the reference of a context is the one its problems agree on; where they
  disagree (a first guess that peeks at the secret), the one most of them
  have, ties going to the first in text order, with the others written now
  and then as the task's wrong answers are (a model that cannot see the
  secret learns the answer that is right most often);
- an episode's later turn is a context that shows the environment's replies:
  its problems are those of the first prompt whose `feedback` gives those
  same replies to the same turns, and its reference is theirs
  (`reference_turn`). The fake asks `feedback` only when it knows more than
  one problem of the first prompt (a prompt it knows one problem of is taken
  to be that problem, as it always was: the environment of a code task runs
  code, which the fake should not run again); when none replies so, it is
  told the run's next problems, as for a prompt it does not know. A turn that
  calls a tool (a task with tools) says nothing of which problem it is: its
  reply is the tools', which the fake does not run either.

Which problems share a prompt grows as a run goes (the fake is told each
step's problems as the run gets there), so where they disagree the reference
may change with it, and such a run may not resume line for line on the fake;
`check_adapter` warns about a first turn whose reference depends on what the
prompt hides.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Generic, Protocol, TypeVar

from mathrl.adapter import Adapter, Feedback, Prompt, Response
from mathrl.problem_keys import problem_key
from mathrl.resolved import Task, as_task
from mathrl_fakes.policy import ByteTokenizer

P = TypeVar("P")
P_co = TypeVar("P_co", covariant=True)
TOKENIZER = ByteTokenizer()
LOOKAHEAD = 2
"""How many steps beyond the one its sample requests have reached a run's fake may look."""
Tokens = tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Reference:
    """What the fake should learn to write after one prompt: `answer`, then `stop`, then EOS."""

    answer: str
    stop: str = ""
    wrong: tuple[str, ...] = ()
    """Wrong answers the task names, written now and then instead (each with `stop`)."""
    known: Known[Any] | None = field(default=None, compare=False)
    """The problems the prompt may be, and the model's turns so far: how the fake merges
    what it is told of problems that share a prompt, and learns an episode's next turn."""


PromptKey = str | tuple[int, ...]
"""A prompt as the fake knows it: its text, or its tokens (a conversation, rendered)."""


@dataclass(frozen=True, slots=True)
class Known(Generic[P]):
    """A context as the fake knows it: the problems it may be, after the model's `history`."""

    task: Task[P]
    prompt: Prompt
    """The episode's first prompt (a reply renders as text, or as a chat message)."""
    problems: tuple[tuple[str, P], ...]
    """(problem_key, problem) of each problem it may be, in the order the fake was told."""
    history: tuple[Response, ...] = ()
    replies: tuple[tuple[Tokens, Tokens], ...] = ()
    """For each turn of `history`: the tokens the model wrote, and the reply's after them."""

    @property
    def goes_on(self) -> bool:
        """Whether the model's turn after this context may have a next one."""
        return len(self.history) + 1 < self.task.max_turns

    def merged(self, other: Known[P]) -> Known[P]:
        """These problems and `other`'s (of the same first prompt); `self` if none is new."""
        keys = {key for key, _ in self.problems}
        more = tuple((key, p) for key, p in other.problems if key not in keys)
        return replace(self, problems=self.problems + more) if more else self

    def reference(self) -> Reference:
        """The reference its problems agree on, or the one most of them have (see the
        module docstring); the others, and on a first turn the task's wrong answers, as
        `wrong`."""
        task = self.task
        counts = Counter(task.reference_turn(p, self.history) for _, p in self.problems)
        answer, *others = sorted(counts, key=lambda a: (-counts[a], a))
        wrong = [str(w) for _, p in self.problems for w in task.wrong_completions(p)]
        named = wrong if not self.history else []
        stops = task.stop_for(self.prompt)
        chosen = tuple(w for w in dict.fromkeys([*named, *others]) if w != answer)
        return Reference(answer, stops[0] if stops else "", chosen, self)

    def then(
        self, response: Response, wrote_T: Tokens, reply_T: Tokens, first: Known[P]
    ) -> Reference | None:
        """The reference of the turn after `response` (the model wrote `wrote_T`, then came
        `reply_T`), among `first`'s problems (the episode's first prompt's, as the fake now
        knows them) whose environment replies so to every turn; None if none does."""
        turn = len(self.history) + 1
        said = (
            *self.history,
            Response(str(response), response.ended, response.stop, turn, response.tokens),
        )
        replies = (*self.replies, (wrote_T, reply_T))
        problems = first.problems
        if len(problems) > 1:
            problems = tuple((key, p) for key, p in problems if self._replays(p, said, replies))
        if not problems:
            return None
        return replace(self, problems=problems, history=said, replies=replies).reference()

    def _replays(
        self, problem: P, said: tuple[Response, ...], replies: tuple[tuple[Tokens, Tokens], ...]
    ) -> bool:
        """Whether `problem`'s environment gives `replies` to the turns `said`. A turn that
        calls a tool says nothing: its reply is the tools', which the fake does not run (they
        may run code, as the code task's environment does)."""
        feedback, toolbox = self.task.feedback, self.task.toolbox
        for turn, (wrote_T, reply_T) in enumerate(replies, 1):
            if toolbox is not None and toolbox.parse(said[turn - 1]):
                continue
            if feedback is None:  # a task with tools alone: a turn without calls ends it
                return False
            try:
                reply = feedback(problem, said[:turn])
                if not isinstance(reply, Feedback) or reply.reply is None:
                    return False
                rendered = self._rendered(wrote_T, reply)
            except Exception:  # a task's error: this problem does not reply so
                return False
            if tuple(rendered) != reply_T:
                return False
        return True

    def _rendered(self, wrote_T: Tokens, said: Feedback) -> Tokens:
        """The reply's tokens after the model's turn `wrote_T`, as `mathrl.episodes` says an
        episode's context grows: a text prompt's reply is its text; a conversation's is the
        chat template's next message, after an end-of-turn if the turn was cut off."""
        assert said.reply is not None
        if isinstance(self.prompt, str):
            return tuple(TOKENIZER.encode(said.reply))
        eot = TOKENIZER.end_of_turn_id
        opening = () if wrote_T and wrote_T[-1] == eot else (eot,)
        message = {"role": said.role, "content": said.reply}
        return (*opening, *TOKENIZER.render_reply(message, self.task.chat_template_options))


def references_for(task: Adapter[P] | Task[P], problems: Sequence[P]) -> dict[PromptKey, Reference]:
    """Prompt -> Reference, through the task's own methods (never by parsing a prompt).

    A text prompt is keyed by its text; a conversation by its tokens in the
    fake's chat template. Problems that share a prompt share one Reference
    (see the module docstring). The reference ends as the task asks: with its
    first stop sequence, or else end-of-sequence (which is also the fake's
    end-of-turn).
    """
    resolved = as_task(task)
    adapter = resolved.adapter
    known: dict[PromptKey, Known[P]] = {}
    for p in problems:
        prompt = adapter.make_prompt(p)
        key: PromptKey = (
            prompt
            if isinstance(prompt, str)
            else tuple(TOKENIZER.render_chat(prompt, resolved.chat_template_options))
        )
        told = Known(resolved, prompt, ((problem_key(adapter, p), p),))
        known[key] = known[key].merged(told) if key in known else told
    return {key: k.reference() for key, k in known.items()}


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
