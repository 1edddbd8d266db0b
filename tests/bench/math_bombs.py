"""Benchmark: a math-task step's rewards with a quarter of its completions LaTeX bombs.

Run it with `python tests/bench/math_bombs.py` (needs `mathrl[math]`; `--steps`,
`--batch`, `--group`). It is not part of the test suite: it prints one markdown
table and exits 1 when a step's bombed rewards cost more than TARGET times its
clean ones.

Each step samples the math task (its default data) on the fake backend, 32
problems x 8 samples, as `sample_and_score` does (the "step" column: sampling,
rewards and datums). Then its rewards are timed alone, every group's
`rewards_of` in flight at once on the worker pool of one thread per core,
as the rollout runs them: once on the completions sampled ("clean"), once with
a quarter of them (two of each group's eight) replaced by bombs, each distinct
so that no verdict is cached ("bombed"): towers (`9^{9^{9^{9^{k}}}}`), `\\frac`
nested 30 deep, a huge `\\underbrace`, answers of 10^5 characters, and what else
took math-verify seconds (`(x+y+z)^{100}`, twelve nested `\\sin`, an integral,
`(10^{6})!`, `\\binom{10^6}{k}`). The verdict cache is cleared before each.
(The bombs go in as texts, not tokens: the fake's pure-Python tokenizer would
take seconds to decode 10^5 of its byte tokens, which no grader pays.)

Without the cost check (`grading.costly`), each bomb that reaches math-verify
runs to its deadline (5 s) in a child process.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from mathrl.adapter import Response
from mathrl.config import TrainConfig
from mathrl.resolved import Task, as_task
from mathrl.rewards import rewards_of
from mathrl.rollout import run_problems
from mathrl.step import sample_and_score
from mathrl.tasks.math import MathDatasetAdapter, MathProblem
from mathrl.tasks.math.grading import verdict
from mathrl.workers import Workers, default_size
from mathrl_fakes import FakeBackend

TARGET = 2.0
"""A bombed step may cost at most this many times a clean one."""
BOMBS: tuple[Callable[[int], str], ...] = (
    lambda k: f"9^{{9^{{9^{{9^{{{k + 2}}}}}}}}}",
    lambda k: "\\frac{1}{" * 30 + str(k) + "}" * 30,
    lambda k: "\\underbrace{" + "x+" * 5_000 + f"x}}_{{{10**9 + k}}}",
    lambda k: "9" * 100_000 + str(k),
    lambda k: f"(x+y+z)^{{{100 + k}}}",
    lambda k: "\\sin(" * 6 + "\\sin " * 6 + f"x_{{{k}}}" + ")" * 6,
    lambda k: f"\\int_0^{{{k + 1}}} e^{{-x^2}}\\sin(x^3)\\,dx",
    lambda k: f"(10^{{{6 + k % 3}}})! + {k}",
    lambda k: f"\\binom{{10^{{6}}}}{{{k + 2}}}",
)
"""Each family of bomb, the k-th of its kind: distinct for every k."""


BOMBED = (0, 4)
"""The members of each group of eight made bombs: a quarter."""


def bombed(responses_P_G: Sequence[Sequence[Response]]) -> list[list[Response]]:
    """The step's responses with each group's BOMBED members bombs, boxed, each distinct."""
    made = 0
    out = []
    for responses_G in responses_P_G:
        group = list(responses_G)
        for i in BOMBED:
            if i < len(group):
                group[i] = Response(f"\\boxed{{{BOMBS[made % len(BOMBS)](made)}}}")
                made += 1
        out.append(group)
    return out


async def rewards_seconds(
    task: Task[MathProblem],
    problems: Sequence[MathProblem],
    responses_P_G: Sequence[Sequence[Response]],
    pool: Workers,
) -> float:
    """Seconds for every group's rewards, all in flight on `pool`, none cached before."""
    verdict.cache_clear()
    started = time.perf_counter()
    calls = [
        pool.run(partial(rewards_of, task, problem, responses_G))
        for problem, responses_G in zip(problems, responses_P_G, strict=True)
    ]
    await asyncio.gather(*calls)
    return time.perf_counter() - started


async def steps(config: TrainConfig, folder: Path, cores: int) -> list[tuple[float, ...]]:
    """(step, clean rewards, bombed rewards) seconds for each step."""
    adapter = MathDatasetAdapter()
    task: Task[Any] = as_task(adapter)
    task.preflight()  # as the command line does: math-verify imported and warmed
    backend = FakeBackend.for_run(adapter, run_problems(adapter, config), checkpoint_dir=folder)
    sampler = await backend.create_sampler(await (await backend.submit_save_for_sampler("b")))
    rows: list[tuple[float, ...]] = []
    with Workers(cores) as pool:
        for step in range(1, config.steps + 1):
            verdict.cache_clear()
            started = time.perf_counter()
            batch = await sample_and_score(backend.tokenizer, sampler, task, config, step, pool)
            whole = time.perf_counter() - started
            problems = adapter.build_dataset(config.seed, step, config.batch)
            clean = await rewards_seconds(task, problems, batch.responses_P_G, pool)
            bombs = bombed(batch.responses_P_G)
            rows.append((whole, clean, await rewards_seconds(task, problems, bombs, pool)))
    return rows


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--group", type=int, default=8)
    args = parser.parse_args(argv)
    config = TrainConfig(steps=args.steps, batch=args.batch, group=args.group)
    cores = default_size()
    with tempfile.TemporaryDirectory() as folder:
        rows = asyncio.run(steps(config, Path(folder), cores))
    bombs = config.batch * len([i for i in BOMBED if i < config.group])
    print(f"Load average (1, 5, 15 min): {', '.join(f'{x:.1f}' for x in os.getloadavg())}")
    print(
        f"\nThe math task's rewards, a step of {config.batch} x {config.group} on the fake, "
        f"{cores} reward workers; {bombs} completions of the bombed step are bombs, all "
        "distinct:\n"
    )
    print("| step | the step (clean) | its rewards, clean | bombed | bombed / clean |")
    print("| ---: | ---: | ---: | ---: | ---: |")
    for step, (whole, clean, bomb) in enumerate(rows, start=1):
        print(f"| {step} | {whole:.3f} s | {clean:.3f} s | {bomb:.3f} s | {bomb / clean:.2f} |")
    whole, clean, bomb = (statistics.median(column) for column in zip(*rows, strict=True))
    ratio = bomb / clean
    print(
        f"| median | {whole:.3f} s | {clean:.3f} s | {bomb:.3f} s "
        f"| {ratio:.2f} (target <= {TARGET:g}) |"
    )
    if ratio > TARGET:
        sys.exit(1)


if __name__ == "__main__":
    main()
