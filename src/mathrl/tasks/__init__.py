"""The built-in tasks, one module each, every one an `Adapter` (see `mathrl.adapter`).

`BUILT_IN` names them, so the command line can take a task by its short name.
"""

from __future__ import annotations

BUILT_IN: dict[str, tuple[str, str]] = {
    "addition": (
        "mathrl.tasks.addition:MathAdapter",
        "two-digit addition; reward 1 for the right integer (the default)",
    ),
    "code": (
        "mathrl.tasks.code:CodeAdapter",
        "write a small Python function; reward: the share of hidden tests it passes, sandboxed",
    ),
    "code-feedback": (
        "mathrl.tasks.code.feedback:CodeFeedbackAdapter",
        "the code task in two turns: a failing test's details, then a second try (0.5)",
    ),
    "dataset": (
        "mathrl.tasks.dataset:DatasetTask",
        "your own rows (train=FILE) and reward functions (reward=FILE.py:FUNCTION), no class",
    ),
    "math": (
        "mathrl.tasks.math:MathDatasetAdapter",
        "math problems from a dataset file (GSM8K, MATH); reward: an equivalent final answer",
    ),
    "math-python": (
        "mathrl.tasks.math_python:MathPython",
        "the math task with a python tool run in the sandbox; reward: a correct final answer",
    ),
    "preference": (
        "mathrl.tasks.preference:PreferenceChat",
        "answer a question in a chat; reward: win rate against the group and a baseline",
    ),
    "reasoning-gym": (
        "mathrl.tasks.reasoning_gym:ReasoningGym",
        "a reasoning-gym dataset (dataset=NAME, and its settings); reward: its own score_answer",
    ),
}
"""Short name -> (module:Class, one line on what it is)."""
