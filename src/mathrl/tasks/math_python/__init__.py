"""The math-python task (built-in as `math-python`): math problems, with a Python tool.

- `task`: `MathPython`, the math task's problems and reward with a `python` tool, and its
  reference episode (a call, then the answer);
- `python_tool`: the tool, which runs the model's code in the code task's sandbox.

How tools work in any task: `mathrl.tools`.
"""

from mathrl.tasks.math_python.task import MathPython

__all__ = ["MathPython"]
