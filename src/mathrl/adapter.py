"""The task adapter: the contract a new RL task is written from.

An adapter turns a seed and a step into problems, a problem into a prompt,
and a completion into a reward. The loop never looks inside a problem. Five
methods are required (`Adapter`); four more members are optional, and
`as_task` fills in a documented default for each one an adapter leaves out.
This module holds only the contract; `mathrl.tasks` holds the built-in tasks
and `mathrl.testing.check_adapter` checks any task from the outside.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from mathrl.text import shown

ProblemT = TypeVar("ProblemT")
P = TypeVar("P")

DEFAULT_STOP: tuple[str, ...] = ("\n",)
"""Stop sequences of a task that declares none: its answer is one line."""
DEFAULT_MAX_TOKENS = 32
"""Token budget of a completion for a task that declares none."""
HELDOUT_STEP = 0
"""The step whose problems are a task's default held-out set (training uses 1, 2, ...)."""
EVAL_STEP = -1
"""The `step` in evaluation requests' sampling seeds: no training step has it."""
TASK_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
"""What a task name may be: it goes into file names and checkpoint names."""
REQUIRED = (
    "build_dataset",
    "make_prompt",
    "compute_reward",
    "reference_completion",
    "evaluate",
)


class AdapterError(TypeError):
    """An object is not a usable adapter. The message names the member and what it got."""


class Adapter(Protocol[ProblemT]):
    """A verifiable task, as the GRPO loop sees it (the seed's `RLAdapter`, typed).

    Required: the five methods below. Every one is pure: the same arguments
    give the same result, in any process, whatever else has run before.

    Optional members, each with the default `as_task` uses when it is absent:

    - `name: str`: a stable id for the task, 1 to 64 characters from
      `A-Z a-z 0-9 _ . -`, starting with a letter or digit. It starts every
      checkpoint name and is written into every run record, so two tasks never
      share a file. Change it when the task changes. Default: the class name
      (characters outside that set become `-`).
    - `stop: tuple[str, ...]`: sampling stops after any of these strings, and
      always after the end-of-sequence token. `()` stops only at
      end-of-sequence (use it for multi-line answers). Default `("\\n",)`: the
      answer is one line.
    - `max_tokens: int`: the default budget of tokens per completion (the
      `--max-tokens` setting overrides it). Default 32.
    - `heldout_dataset(seed, size) -> list[problem]`: `size` problems for
      evaluation that training never draws, for any step. Default:
      `build_dataset(seed, 0, size)`. Step 0 is never a training step, but in
      a small problem space its problems can repeat training ones; the loop
      then leaves those out of evaluation and says so, so declare
      `heldout_dataset` to keep held-out problems truly apart.

    Step numbering: training step k (1, 2, ..., steps) calls
    `build_dataset(seed, k, batch)`; nothing calls it with a step below 1,
    except the default held-out set above.
    """

    def build_dataset(self, seed: int, step: int, size: int) -> list[ProblemT]:
        """Return exactly `size` problems for `step` of a run seeded with `seed`.

        Draw them from a private RNG derived from (seed, step), such as
        `random.Random(f"my-task/{seed}/{step}")`, never from the global
        `random` module, so a run replays exactly and a resumed run draws what
        the uninterrupted one would have. Different seeds or steps should give
        different problems.
        """
        ...

    def make_prompt(self, problem: ProblemT) -> str:
        """Return the text the model continues: any Unicode, not empty."""
        ...

    def compute_reward(self, completion: str, problem: ProblemT) -> float:
        """Score a decoded completion: a finite float, higher is better.

        `completion` is untrusted model output: any string at all, with the
        stop sequence that ended it still attached (and nothing after it). The
        reward must never raise, whatever the text, and must be a finite
        number. Partial credit is fine (the GRPO advantage is the reward
        minus its group's mean); the reference completion must earn the most.
        Never run the completion in this process: see `mathrl.tasks.code.sandbox`.
        """
        ...

    def reference_completion(self, problem: ProblemT) -> str:
        """Return a completion that earns the maximum reward, without a stop sequence.

        It is the text the model should write before it stops: the reward of
        `reference` and of `reference + s` for each stop sequence `s` must both
        be the maximum, and `reference` must not contain a stop sequence. The
        loop never uses it. `mathrl.testing` checks the reward against it, and
        the fake backend's toy policy learns to write `reference + stop[0]`
        then end-of-sequence (as tinker-cookbook's `get_reference_answer`).
        """
        ...

    def evaluate(self, rewards: Sequence[float]) -> float:
        """Summarise rewards as an accuracy in [0, 1] (0 for no rewards).

        The reference's reward must count as fully correct: `evaluate` of a
        list of reference rewards is 1.0.
        """
        ...


@dataclass(frozen=True, slots=True)
class Task(Generic[P]):
    """An adapter with every optional member resolved: its own, or the default."""

    adapter: Adapter[P]
    name: str
    stop: tuple[str, ...]
    max_tokens: int
    identity: str
    """`module:QualifiedClass` of the adapter, for run records and fingerprints."""

    @property
    def declares_heldout(self) -> bool:
        """True when the adapter has its own `heldout_dataset`."""
        return hasattr(self.adapter, "heldout_dataset")

    def heldout(self, seed: int, size: int) -> list[P]:
        """The task's held-out problems (see `Adapter`'s optional members)."""
        own: Callable[[int, int], list[P]] | None = getattr(self.adapter, "heldout_dataset", None)
        if own is not None:
            return own(seed, size)
        return self.adapter.build_dataset(seed, HELDOUT_STEP, size)

    def training_prompts(self, seed: int, steps: int, batch: int) -> set[str]:
        """The prompts of training steps 1 to `steps` at `batch` problems a step.

        Held-out problems must avoid these: the loop leaves out those that do
        not, and `mathrl.testing` reports them.
        """
        make_prompt = self.adapter.make_prompt
        return {
            make_prompt(p)
            for step in range(1, steps + 1)
            for p in self.adapter.build_dataset(seed, step, batch)
        }


def as_task(adapter: Adapter[P] | Task[P]) -> Task[P]:
    """Resolve an adapter's optional members; raise AdapterError for malformed ones."""
    if isinstance(adapter, Task):
        return adapter
    cls = type(adapter)
    label = cls.__name__
    missing = [m for m in REQUIRED if not callable(getattr(adapter, m, None))]
    if missing:
        raise AdapterError(
            f"{label} is not an adapter: it has no {', '.join(missing)} "
            f"(an adapter needs {', '.join(REQUIRED)})"
        )
    name = getattr(adapter, "name", None)
    if name is None:
        name = re.sub(r"[^A-Za-z0-9_.-]", "-", cls.__name__).lstrip("_.-")[:64] or "task"
    elif not (isinstance(name, str) and TASK_NAME.fullmatch(name)):
        raise AdapterError(
            f"{label}.name must be 1 to 64 characters from A-Z a-z 0-9 _ . -, "
            f"starting with a letter or digit (got {shown(name)})"
        )
    stop = getattr(adapter, "stop", DEFAULT_STOP)
    if not (isinstance(stop, tuple | list) and all(isinstance(s, str) and s for s in stop)):
        raise AdapterError(
            f"{label}.stop must be a tuple of non-empty strings, e.g. ('\\n',) "
            f"or () (got {shown(stop)})"
        )
    max_tokens = getattr(adapter, "max_tokens", DEFAULT_MAX_TOKENS)
    if not (isinstance(max_tokens, int) and not isinstance(max_tokens, bool) and max_tokens >= 1):
        raise AdapterError(f"{label}.max_tokens must be an integer >= 1 (got {shown(max_tokens)})")
    heldout = getattr(adapter, "heldout_dataset", None)
    if heldout is not None and not callable(heldout):
        raise AdapterError(
            f"{label}.heldout_dataset must be a method (seed, size) -> problems "
            f"(got {shown(heldout)})"
        )
    identity = f"{cls.__module__}:{cls.__qualname__}"
    return Task(adapter, name, tuple(stop), max_tokens, identity)
