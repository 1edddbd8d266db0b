"""The reasoning-gym task's answer form: how a completion gives its answer, and how it is found.

For: `mathrl.tasks.reasoning_gym.task`, whose prompt asks for this form and whose reward
reads it. Pure functions of text, no reasoning-gym import: what the answer is worth is
the dataset's own `score_answer`, called by the task. Not for: scoring.

The model may reason first, then writes its final answer between `<answer>` and
`</answer>`, as reasoning-gym's own prompts ask; the last such pair counts, so
reasoning that quotes the tags earlier does no harm. Finding it takes time linear in
the completion, whatever it holds.
"""

from __future__ import annotations

OPEN, CLOSE = "<answer>", "</answer>"
SYSTEM = (
    "Solve the user's problem. You may reason step by step first. Then give your final "
    f"answer, and nothing else, between {OPEN} and {CLOSE}, exactly in the form the "
    "problem asks for."
)
"""The system message of every prompt: the asked form."""
FORMAT = 0.1
"""The reward part for an answer in the asked form, whatever it is worth."""
LONGEST_EXTRA = 1000
"""An answer may be this many characters, plus four times the reference's length: a
longer one scores 0 unread, so no dataset's scorer ever sees a 10,000-character answer."""


def final_answer(completion: str) -> str | None:
    """The text of the last `<answer>...</answer>` pair, stripped; None if there is none."""
    end = completion.rfind(CLOSE)
    if end < 0:
        return None
    start = completion.rfind(OPEN, 0, end)
    if start < 0:
        return None
    return completion[start + len(OPEN) : end].strip()


def in_asked_form(answer: str) -> str:
    """`answer` as a completion gives it: between the tags."""
    return f"{OPEN}{answer}{CLOSE}"


def answer_limit(reference: str | None) -> int:
    """The longest answer read for a problem whose answer is `reference` (see LONGEST_EXTRA)."""
    return LONGEST_EXTRA + 4 * len(reference or "")


def has_lookalike_digits(answer: str) -> bool:
    """True when `answer` writes a digit outside ASCII (full-width, Arabic-Indic, superscript).

    int() and float() accept many of them, and a dataset's scorer may too; an answer
    that spells a number so is not in the asked form.
    """
    return any(c.isdigit() and not c.isascii() for c in answer)


def near_misses(answer: str) -> list[str]:
    """Plausible wrong answers to a problem whose answer is `answer`, in the asked form or not.

    An integer one off; otherwise the answer with its last character dropped (or
    doubled, for a one-character answer); and the right answer without the tags. The
    task keeps only those its dataset scores below the reference.
    """
    stripped = answer.strip()
    if _is_integer(stripped):
        changed = str(int(stripped) + 1)
    elif len(stripped) > 1:
        changed = stripped[:-1]
    else:
        changed = stripped * 2 or "?"
    return [in_asked_form(changed), stripped]


def _is_integer(text: str) -> bool:
    digits = text.removeprefix("-")
    return 0 < len(digits) <= 30 and digits.isascii() and digits.isdigit()
