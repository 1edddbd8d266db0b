"""The code-writing task and the sandbox its reward runs model-written code in.

- `task`: `CodeAdapter`, write a small Python function `f`; the reward is the
  share of hidden tests it passes.
- `sandbox`: `call_function`, which runs untrusted code in a locked-down child
  process (with `harness`, the script the child runs, and `kernel`, the
  namespaces, Landlock and seccomp layers it enters).
"""

from mathrl.tasks.code.task import CodeAdapter, CodeProblem

__all__ = ["CodeAdapter", "CodeProblem"]
