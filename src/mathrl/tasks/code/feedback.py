"""Code with feedback: the code task as an episode of two turns, the built-in multi-turn task.

The model writes `f` as in the code task. If it fails a hidden test, the
environment replies with the first failing input, the value expected and
what `f` returned (or the error, shortened), and the model writes `f` once
more. The reward is 1.0 for passing every test on the first try,
SECOND_TRY (0.5) on the second, 0 otherwise (a turn cut off at the token
limit never finished its function: it fails, and hears so); its two parts, `first_try` and
`second_try`, show in the run's metrics how often the second turn rescues a
first failure. The code runs in the same sandbox as the code task's, once
per distinct function (the feedback and the reward share the run).
"""

from __future__ import annotations

from collections.abc import Sequence

from mathrl.adapter import Feedback, Response
from mathrl.tasks.code.task import FENCE, CodeAdapter, CodeProblem, code_of, passes, run
from mathrl.text import shown

SECOND_TRY = 0.5
"""The reward for passing on the second try: less than the first's, so the first is learnt."""
CUT_OFF = "it was cut off at the token limit before the closing fence"
"""What the reply says of a turn that ran out of tokens: its function was never finished."""
REPLY = """
The function fails a hidden test: {failure}.
Write `f` again, then close the block.
```python
"""


def first_failure(
    code: str, problem: CodeProblem, allow_missing_layers: bool = False
) -> str | None:
    """What the reply says about `code`'s first failing test; None if it passes them all."""
    if not code.strip():
        return "there is no code before the closing fence"
    outcome = run(code, problem, allow_missing_layers)
    if outcome.status != "ok":
        return f"{outcome.status}: {shown(outcome.detail, 120)}"
    for x, got, want in zip(problem.spec.inputs, outcome.results, problem.expected(), strict=True):
        if not passes(got, want):
            return f"f({x!r}) should return {want!r}, but it returned {shown(got, 60)}"
    return None


class CodeFeedbackAdapter(CodeAdapter):
    """Write `f`; on a failure, see the failing test and try once more.

    `allow_missing_layers`: as `CodeAdapter`'s, for every call of its feedback and reward.
    """

    name = "code-feedback"
    max_turns = 2
    max_tokens = 64

    def feedback(self, problem: CodeProblem, responses: Sequence[Response]) -> Feedback:
        if len(responses) >= self.max_turns:
            return Feedback(None)
        if responses[-1].ended == "length":
            failure: str | None = CUT_OFF
        else:
            failure = first_failure(code_of(responses[-1]), problem, self.allow_missing_layers)
        return Feedback(None if failure is None else REPLY.format(failure=failure))

    def compute_reward(self, completion: str, problem: CodeProblem) -> dict[str, float]:
        cut = isinstance(completion, Response) and completion.ended == "length"
        passed = not cut and (
            first_failure(code_of(completion), problem, self.allow_missing_layers) is None
        )
        turn = completion.turn if isinstance(completion, Response) else 1
        return {
            "first_try": 1.0 if passed and turn == 1 else 0.0,
            "second_try": SECOND_TRY if passed and turn > 1 else 0.0,
        }

    def evaluate(self, rewards: Sequence[float]) -> float:
        """The share of episodes whose `f` passes every test, on either try."""
        return sum(1 for r in rewards if r >= SECOND_TRY) / len(rewards) if rewards else 0.0


__all__ = ["FENCE", "SECOND_TRY", "CodeFeedbackAdapter"]
