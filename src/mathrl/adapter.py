"""The task adapter: everything the GRPO loop needs to know about a task.

An adapter turns a seed and a step into problems, a problem into a prompt,
and a completion into a reward. The loop never looks inside a problem: to
train on a new verifiable task, write a new class with these five methods.
This module holds only the contract; `mathrl.math_task` is the first
implementation.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeVar

ProblemT = TypeVar("ProblemT")


class Adapter(Protocol[ProblemT]):
    """A verifiable task, as the loop sees it (the seed's `RLAdapter`, typed).

    Every method is pure: the same arguments give the same result, in any
    process. Randomness comes only from the `seed` and `step` arguments.
    """

    def build_dataset(self, seed: int, step: int, size: int) -> list[ProblemT]:
        """Return `size` problems for `step` of a run seeded with `seed`.

        Must draw from a private RNG derived from (seed, step), never from the
        global `random` module, so that a run can be replayed exactly.
        """
        ...

    def make_prompt(self, problem: ProblemT) -> str:
        """Return the text the model continues."""
        ...

    def compute_reward(self, completion: str, problem: ProblemT) -> float:
        """Score a decoded completion. Must never raise, whatever the text."""
        ...

    def reference_completion(self, problem: ProblemT) -> str:
        """Return a completion that earns the maximum reward.

        The loop never uses it. It exists for tests, and for fake backends
        whose toy policy is defined relative to a known-good answer (as
        tinker-cookbook's `ProblemEnv.get_reference_answer`).
        """
        ...

    def evaluate(self, rewards: Sequence[float]) -> float:
        """Summarise one step's rewards as an accuracy in [0, 1]."""
        ...
