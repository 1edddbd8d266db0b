"""`final_answer`'s part of `check_adapter`, for a task that names its answers (maj@k).

The reference completion, ended as the task asks, names an answer (a str),
the same one each time (for a task with tools, the reference episode's turn
that answers, after its calls: `tool_checks.answer_turn`); hostile
completions name a str or None, and never make it raise.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from mathrl.adapter import Response
from mathrl.backend import Tokenizer
from mathrl.testing.checker import Checker
from mathrl.testing.inputs import ADVERSARIAL, random_texts
from mathrl.testing.reward_checks import ended_as_asked, sampled
from mathrl.testing.tool_checks import answer_turn
from mathrl.text import shown


def check_final_answer(checker: Checker, problems: Sequence[Any], tokenizer: Tokenizer) -> None:
    """Check the task's `final_answer` on each problem's reference and on hostile text."""
    name = checker.task.final_answer
    if name is None:
        return
    hostile = [text for _, text in ADVERSARIAL] + random_texts(12)
    for problem, prompt, first in checker.with_references(problems):
        where = checker.name(prompt)
        ok, ref = checker.call(  # a task with tools answers after its calls
            f"reference_turn({where})", partial(answer_turn, checker.task, problem, first)
        )
        if not ok or not isinstance(ref, str):
            continue
        stops, chat = checker.task.stop_for(prompt), not isinstance(prompt, str)
        reference = ended_as_asked(ref, stops, chat, tokenizer)
        first, again = _named(checker, name, reference), _named(checker, name, reference)
        checker.expect(
            isinstance(first, str) and first == again,
            f"final_answer(the reference, {where}) = {shown(first)}, then {shown(again)}: the "
            "reference completion must name its answer, a str, the same each time",
            key="final-answer-reference",
        )
        for text in hostile:
            for response in (
                ended_as_asked(text, stops, chat, tokenizer),
                sampled(tokenizer, text, "length"),
            ):
                answer = _named(checker, name, response)
                checker.expect(
                    answer is None or isinstance(answer, str),
                    f"final_answer({shown(text, 30)}) = {shown(answer)}: it must return a str "
                    "or None",
                    key="final-answer-type",
                )


def _named(checker: Checker, name: Callable[[Response], Any], response: Response) -> Any:
    ok, answer = checker.call(
        f"final_answer({shown(str(response), 30)})", lambda: name(response), key="final_answer"
    )
    return answer if ok else None
