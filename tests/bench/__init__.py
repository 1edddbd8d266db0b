"""Tools, not tests: they run mathrl on the fake backend and print Markdown tables.

- `benchmark`: a GRPO step's cost in round trips, the client's own overhead,
  peak memory and learning on the fake; it exits 1 if a target is missed
  (`nox -s bench`, or `python tests/bench/benchmark.py --help`).
  `bench_rewards` is its part on reward work against sampling, on the real
  clock.
- `ablation`: each loss, with and without `--fill-batch`, with and without
  KL (`nox -s ablation`, or `python tests/bench/ablation.py --help`).
- `math_grading`: the math task's grading cost per completion, fast path and
  math-verify (`python tests/bench/math_grading.py`; needs `mathrl[math]`).
- `survey_reasoning_gym`: every reasoning-gym dataset through the reasoning-gym
  task, which can be used and why not (`python tests/bench/survey_reasoning_gym.py`).

pytest collects nothing here.
"""
