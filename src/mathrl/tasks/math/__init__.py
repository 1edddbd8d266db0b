"""The math dataset task (built-in as `math`): problems from a file or a dataset, a real grader.

- `task`: `MathDatasetAdapter`, its options and rewards;
- `problems`: what a row must hold to be a problem (the rows are read, checked,
  split and drawn by `mathrl.tasks.dataset`, which the `dataset` task shares);
- `prompts`: the conversation or few-shot prompt, and reference solutions;
- `answers`: final answers (`\\boxed{}`, `####`, bare) and the exact-number fast path;
- `grading`: equivalence, through math-verify in a child process with a deadline.
- `cost`: what an answer would cost math-verify, bounded before it is asked.

The shipped data (`data/`) was written for this project by `tests/math_fixtures.py`.
"""

from mathrl.tasks.math.problems import MathProblem
from mathrl.tasks.math.prompts import calculation
from mathrl.tasks.math.task import MathDatasetAdapter

__all__ = ["MathDatasetAdapter", "MathProblem", "calculation"]
