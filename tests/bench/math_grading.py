"""Benchmark: the math task's grading cost per completion, fast path and math-verify.

Run it with `python tests/bench/math_grading.py` (needs `mathrl[math]`). It
is not part of the test suite and has no targets: it prints one markdown
table, for the lead's note and the README's ranges.

Rows:

- fast path: `Grader().equivalent` on a plain number (`\\boxed{245}` against
  245), and the whole `compute_reward` of such a completion;
- math-verify, in a child process: what the task does for an answer exact
  numbers cannot settle, each pair new to the cache (the equivalence
  fixture's 64 pairs: its answers against their other spellings and their
  near misses);
- math-verify, in this process, unbounded: the same pairs, first seen (the
  cost of the work itself; the difference is the fork's);
- each of those on the worker pool of 2 threads, all calls in flight at once,
  as a step's rewards run: wall time over calls.

The machine's load average is printed with the table: timings on a loaded
two-core machine can be several times an idle one's.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import time
from collections.abc import Callable, Sequence
from functools import partial
from importlib import resources

from mathrl.tasks.math import MathDatasetAdapter, MathProblem
from mathrl.tasks.math.answers import final_answer
from mathrl.tasks.math.grading import Grader, math_verify_equal, verdict, warm
from mathrl.workers import Workers

FAST_CALLS = 2_000
POOL_SIZE = 2


def pairs() -> list[tuple[str, str]]:
    """The equivalence fixture's (gold, candidate) pairs: each answer against its other
    spelling and against its near miss."""
    text = resources.files("mathrl.tasks.math").joinpath("data", "equivalence.jsonl")
    rows = [json.loads(line) for line in text.read_text("utf-8").splitlines()]
    found = [(final_answer(r["solution"]) or "", r) for r in rows]
    return [(gold, r[key]) for gold, r in found for key in ("equivalent", "different")]


def alone(calls: Sequence[Callable[[], object]]) -> list[float]:
    """Each call's seconds, one after another on this thread."""
    seconds = []
    for call in calls:
        started = time.perf_counter()
        call()
        seconds.append(time.perf_counter() - started)
    return seconds


def on_pool(calls: Sequence[Callable[[], object]]) -> float:
    """Seconds per call with every call in flight at once on a pool of POOL_SIZE threads."""

    async def run_all() -> float:
        with Workers(size=POOL_SIZE, timeout=120.0) as pool:
            await pool.run(lambda: None)  # the threads started
            started = time.perf_counter()
            await asyncio.gather(*(pool.run(call) for call in calls))
            return (time.perf_counter() - started) / len(calls)

    return asyncio.run(run_all())


def row(what: str, seconds: Sequence[float], pooled: float | None) -> str:
    mean, median = statistics.fmean(seconds), statistics.median(seconds)
    return (
        f"| {what} | {len(seconds)} | {_ms(median)} | {_ms(mean)} | {_ms(max(seconds))} "
        f"| {_ms(pooled) if pooled is not None else '-'} |"
    )


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f} ms" if seconds < 0.01 else f"{seconds * 1e3:.0f} ms"


def main() -> None:
    grader, task = Grader(), MathDatasetAdapter()
    problem = MathProblem("How many rose bushes are left?", "245", "#### 245")
    fast = [partial(grader.equivalent, "245", "245") for _ in range(FAST_CALLS)]
    reward = [partial(task.compute_reward, "So \\boxed{245}.", problem) for _ in fast]
    checks = pairs()
    started = time.perf_counter()
    warm()  # once per trainer: math-verify imported and its parser loaded
    warming = time.perf_counter() - started
    # Children first: the parent's parse caches stay cold, so no child inherits a parse.
    verdict.cache_clear()
    forked = [partial(grader.equivalent, gold, candidate) for gold, candidate in checks]
    forked_alone = alone(forked)
    verdict.cache_clear()
    forked_pool = on_pool(forked)
    inline = alone([partial(math_verify_equal, g, c) for g, c in checks])  # first seen here
    cached = [partial(grader.equivalent, g, c) for g, c in checks]  # the verdict cache's
    repeated = alone(cached)
    print(f"Load average (1, 5, 15 min): {', '.join(f'{x:.1f}' for x in os.getloadavg())}")
    print(f"math-verify import and warm-up, once per trainer: {warming * 1e3:.0f} ms\n")
    print(
        f"| grading | calls | median alone | mean alone | slowest alone "
        f"| per call on {POOL_SIZE} workers |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    print(row("fast path: `245` against 245", alone(fast), on_pool(fast)))
    print(row("compute_reward of `So \\boxed{245}.`", alone(reward), on_pool(reward)))
    print(row("math-verify in a child process (new pair)", forked_alone, forked_pool))
    print(row("math-verify in this process, unbounded (new pair)", inline, None))
    print(row("a pair graded before (the verdict cache)", repeated, on_pool(cached)))


if __name__ == "__main__":
    main()
