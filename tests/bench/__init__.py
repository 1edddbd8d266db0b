"""Tools, not tests: they measure, print tables and exit 1 on a missed target.

- `benchmark`: a GRPO step's cost in round trips, the client's own overhead,
  peak memory and learning on the fake (`nox -s bench`, or
  `python tests/bench/benchmark.py --help`); `bench_rewards` is its part on
  reward work against sampling, on the real clock.
- `ablation`: each loss, with and without `--fill-batch`, with and without
  KL, on the fake (`nox -s ablation`, or `python tests/bench/ablation.py --help`).

pytest collects nothing here.
"""
