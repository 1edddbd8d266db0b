"""The math task's prompts and reference solutions: a conversation, or a few-shot text.

For: the math task. Pure functions of a problem; no I/O. Not for: grading.

Worked examples come before the problem: by default `few_shot` rows of the
task's own training data (`MathDatasetAdapter`'s `examples`), or the
built-in word problems (`EXAMPLES`).

- `chat`: a conversation for an instruct model's chat template. Each worked
  example is a user turn (its question, then the instruction) and the
  assistant's answer; then the problem's own user turn. The completion is
  the assistant's turn.
- `few-shot`: text for a base model: the instruction, then `Question: ...`
  and `Answer: ...` blocks, then the problem's question and `Answer:`. The
  completion stops at the next `\\n\\nQuestion:` (TEXT_STOP).

Both ask for the final answer in `\\boxed{}`, which the `format` reward part
checks and the grader reads. A worked solution (`worked`, the few-shot
examples' answers) is the problem's own with its final answer boxed:
GSM8K's reasoning (calculator annotations `<<4*5=20>>` dropped) then `The
final answer is \\boxed{20}.`, MATH's solution as it is, or that sentence
alone for a bare answer. The reference completion (`reference`), which the
fake backend learns, is the final answer alone, boxed: a real model writes
its reasoning first, but a target of a few tokens is one whose greedy
decoding the fake gets wrong before training and right after, as a model's
held-out accuracy moves.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from mathrl.adapter import Message
from mathrl.tasks.math.answers import BOXED, GSM_MARK, boxed_span, exact_number
from mathrl.tasks.math.problems import MathProblem

INSTRUCTION = "Solve the problem step by step, then write the final answer in \\boxed{}."
TEXT_STOP = "\n\nQuestion:"
_ANNOTATION = re.compile(r"<<[^<>\n]*>>")
"""GSM8K's calculator annotations, `<<48/2=24>>`: for its calculator, not for a reader."""


def _gsm(question: str, steps: str, answer: str) -> MathProblem:
    return MathProblem(question, answer, f"{steps}\n{GSM_MARK} {answer}")


EXAMPLES = (
    _gsm(
        "A baker makes 3 trays of 12 muffins and sells 20 of them. How many muffins are left?",
        "The baker makes 3 * 12 = 36 muffins.\nAfter selling 20, 36 - 20 = 16 muffins are left.",
        "16",
    ),
    _gsm(
        "Leo reads 15 pages on Monday and twice as many on Tuesday. How many pages does he "
        "read in the two days?",
        "On Tuesday he reads 2 * 15 = 30 pages.\nIn the two days he reads 15 + 30 = 45 pages.",
        "45",
    ),
    _gsm(
        "A bus ticket costs $4. How much do 7 tickets and a $3 snack cost together?",
        "The tickets cost 7 * 4 = 28 dollars.\nWith the snack, 28 + 3 = 31 dollars.",
        "31",
    ),
    _gsm(
        "A rope 50 meters long is cut into 5 equal pieces, and one piece is cut in half. How "
        "long is each half, in meters?",
        "Each piece is 50 / 5 = 10 meters long.\nEach half is 10 / 2 = 5 meters long.",
        "5",
    ),
    _gsm(
        "Mia has 24 stickers. She gives a quarter of them to her brother and 5 to a friend. "
        "How many stickers does she keep?",
        "A quarter of 24 is 24 / 4 = 6.\nShe keeps 24 - 6 - 5 = 13 stickers.",
        "13",
    ),
    _gsm(
        "A car uses 6 liters of fuel for every 100 km. How many liters does it use on a 350 km "
        "trip?",
        "350 km is 350 / 100 = 3.5 hundreds of km.\nIt uses 3.5 * 6 = 21 liters.",
        "21",
    ),
    _gsm(
        "A class of 28 students splits into teams of 4, and each team needs 3 markers. How "
        "many markers are needed?",
        "There are 28 / 4 = 7 teams.\nThey need 7 * 3 = 21 markers.",
        "21",
    ),
    _gsm(
        "Tom saves $15 a week for 8 weeks, then buys a game for $45. How much money does he "
        "have left?",
        "He saves 15 * 8 = 120 dollars.\nAfter the game he has 120 - 45 = 75 dollars.",
        "75",
    ),
)
"""The built-in worked examples (`examples=built-in`), written for this project (none is a
fixture's); by default the examples are rows of the task's own training data."""


def worked(problem: MathProblem) -> str:
    """`problem`'s worked solution, ending in its final answer, boxed."""
    final = reference(problem)
    solution = problem.solution
    span = boxed_span(solution)
    if span is not None:  # MATH's: the solution boxes its own answer
        return solution
    mark = solution.rfind(GSM_MARK)
    reasoning = _ANNOTATION.sub("", solution[:mark]).strip() if mark >= 0 else ""
    closing = f"The final answer is {final}."
    return f"{reasoning}\n{closing}" if reasoning else closing


def reference(problem: MathProblem) -> str:
    """The shortest completion that earns the most: the final answer alone, boxed."""
    return f"{BOXED}{{{problem.answer}}}"


_STEP = re.compile(r"<<([0-9+\-*/(). ]+)=([^<>\n]*)>>")
"""A GSM8K calculator step whose left side is plain arithmetic (digits, + - * /, brackets)."""


def calculation(problem: MathProblem) -> str:
    """Arithmetic that computes `problem`'s answer, for a reference that calls a calculator
    or Python: its solution's last calculator step (GSM8K's `<<247-2=245>>`: `247-2`) when
    that gives the gold answer, else the gold answer itself."""
    gold = exact_number(problem.answer)
    steps = _STEP.findall(problem.solution)
    if steps and gold is not None:
        expression, value = steps[-1]
        got = exact_number(value)
        if got is not None and got.value == gold.value:
            return str(expression).strip()
    return problem.answer


def user_turn(question: str, instruction: str) -> str:
    return f"{question}\n\n{instruction}"


def chat_prompt(
    problem: MathProblem, instruction: str, examples: Sequence[MathProblem]
) -> list[Message]:
    """The conversation: the worked `examples`, then the problem."""
    turns: list[Message] = []
    for example in examples:
        turns.append({"role": "user", "content": user_turn(example.question, instruction)})
        turns.append({"role": "assistant", "content": worked(example)})
    turns.append({"role": "user", "content": user_turn(problem.question, instruction)})
    return turns


def text_prompt(problem: MathProblem, instruction: str, examples: Sequence[MathProblem]) -> str:
    """The few-shot text: the instruction, the worked `examples`, then the problem."""
    blocks = [instruction]
    blocks += [f"Question: {e.question}\nAnswer: {worked(e)}" for e in examples]
    blocks.append(f"Question: {problem.question}\nAnswer:")
    return "\n\n".join(blocks)
