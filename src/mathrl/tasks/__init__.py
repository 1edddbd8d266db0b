"""The built-in tasks, one module each, every one an `Adapter` (see `mathrl.adapter`).

- `addition.MathAdapter`: two-digit addition, exact-match reward (the default).
- `code.CodeAdapter`: write a small Python function; the reward is the share
  of hidden tests it passes, run in `mathrl.tasks.code.sandbox`.
"""
