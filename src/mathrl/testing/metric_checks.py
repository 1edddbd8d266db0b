"""`metrics`' part of `check_adapter`, for a task that reports metrics beside its reward.

The task's `metrics` is called on each problem's reference, the wrong
completions every task is given, the task's own `wrong_completions` and
hostile text, each ended as the task asks and cut off at the token limit:
it must return a mapping of names to finite numbers (True and False count as
1 and 0), never raise, and give the reference the same metrics each time. A
run stops on a metric that fails as on a reward that does
(`mathrl.rewards.checked_metrics`), so each failure here is a violation.
An environment's `Feedback.metrics` are checked with its feedback
(`episode_checks`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from mathrl.adapter import Response
from mathrl.backend import Tokenizer
from mathrl.rewards import metric_values
from mathrl.testing.checker import Checker
from mathrl.testing.inputs import ADVERSARIAL, WRONG, random_texts
from mathrl.testing.reward_checks import ended_as_asked, sampled, wrong_name
from mathrl.text import shown

SHAPE = "metrics must be a mapping of names to finite numbers, e.g. {'tokens': 37}"


def check_metrics(checker: Checker, problems: Sequence[Any], tokenizer: Tokenizer) -> None:
    """Check the task's `metrics` on each problem's reference, wrong and hostile completions."""
    method = checker.task.metrics
    if method is None:
        return
    for problem, prompt, ref in checker.with_references(problems):
        where = checker.name(prompt)
        ok, own = checker.call(
            f"wrong_completions({where})", partial(checker.task.wrong_completions, problem)
        )
        texts = [
            ("the reference", ref),
            *((wrong_name(w), w) for w in WRONG),
            *((f"wrong_completions' {shown(w, 30)}", str(w)) for w in _listed(ok, own)),
            *ADVERSARIAL,
            *((f"random text {t!r:.20}", t) for t in random_texts(12)),
        ]
        stops, chat = checker.task.stop_for(prompt), not isinstance(prompt, str)
        for label, text in texts:
            asked = ended_as_asked(text, stops, chat, tokenizer)
            for response, how in ((asked, ""), (sampled(tokenizer, text, "length"), " cut off")):
                what = f"metrics({label}{how}, {where})"
                value = _reported(checker, what, method, response, problem)
                if value is None or label != "the reference":
                    continue
                again = _reported(checker, what, method, response, problem)
                checker.expect(
                    again is None or metric_values(again) == metric_values(value),
                    f"{what} returned {shown(value, 80)}, then {shown(again, 80)}: metrics "
                    "must be pure, the same for the same completion",
                    key="metrics-determinism",
                )


def _listed(ok: bool, own: object) -> Sequence[object]:
    """The task's wrong completions, if it gave a list of them (the reward checks say if not)."""
    return own if ok and isinstance(own, list | tuple) else ()


def _reported(
    checker: Checker,
    what: str,
    method: Callable[[Response, Any], Any],
    response: Response,
    problem: Any,
) -> Any:
    """`method(response, problem)`, checked: None if it raised or is not metrics."""
    ok, value = checker.call(what, partial(method, response, problem), key="metrics")
    if not ok:
        return None
    shaped = checker.expect(
        metric_values(value) is not None,
        f"{what} returned {shown(value, 80)}: {SHAPE}",
        key="metrics-shape",
    )
    return value if shaped else None
