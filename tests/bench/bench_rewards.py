"""Benchmark, part of `tests/bench/benchmark.py`: reward work against sampling, on the real clock.

The code task, then the math task (`Subject`: each with a variant whose reward
costs nothing), at 32 problems x 8 samples with the fake backend's round trip
L. Steps 1-3 from one sampler (so every variant samples the same
completions):

- sampling only: the step's rollout with a reward that costs nothing (an
  exact match against the reference, no sandbox);
- serial rewards: the step's rewards one after another on one thread, the
  sandbox cache cleared first (what a loop that scores after sampling pays);
- rollout: the real rollout, rewards in the worker pool as turns come back.

Then whole runs of the loop (4 steps; the mean of steps 2-4, each step's
time from the end of the one before): on-policy and off-policy 1, with the
free reward and with the real one.

Targets: with the real reward, the rollout (a step's sampling and rewards)
takes at most 1.25 x max(its sampling-only time, serial / cores) + 0.5 s, at
L = 1 s and at L = 0; a loop that scores after sampling takes their sum. The
same for the whole steps, where sampling-only is the same schedule with the
free reward: at L = 0, and off-policy at L = 1 s. On-policy at L = 1 s it is
not a target (the table shows it): the step's update needs every reward of
the step, and the next step's sampling needs the update, so a reward's work
on a completion can overlap only the step's own sampling, all of whose
requests, at a fixed round trip, come back at once. The step is its three
round trips plus that work, which fits under the target only when the work
is small. The worker pool keeps up to `WARM_SANDBOXES` (32) sandboxes started
ahead of their calls, started while the loop waits on the service: the part
of a reward that needs no completion overlaps the waits. With 32 the
on-policy step at L = 1 s lands near the target, on either side; a pool as
large as a step's calls meets it, at about 8 MB a sandbox.
Also: the sandbox's cost per call, alone and with one call per core in
flight.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import itertools
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mathrl.adapter import Response
from mathrl.config import TrainConfig
from mathrl.loop import run_grpo_async
from mathrl.resolved import Task, as_task
from mathrl.rewards import rewards_of
from mathrl.rollout import Rollout, run_problems
from mathrl.step import sample_and_score
from mathrl.tasks.code.sandbox import WARM_SANDBOXES, call_function, warm_of
from mathrl.tasks.code.task import LIMITS, CodeAdapter, CodeProblem, code_of, run
from mathrl.tasks.math import MathDatasetAdapter, MathProblem
from mathrl.tasks.math.grading import verdict
from mathrl.workers import Workers, default_size, in_process
from mathrl_fakes import FakeBackend

BATCH, GROUP = 32, 8
LATENCIES = (1.0, 0.0)
STEPS = (1, 2, 3)
SANDBOX_CALLS = 40
SLACK, OVERHEAD = 1.25, 0.5


class FreeRewards(CodeAdapter):
    """The code task with a reward that costs nothing: the reference's text or not."""

    def compute_reward(self, completion: str, problem: CodeProblem) -> float:
        return 1.0 if code_of(completion) == problem.reference() else 0.0


class FreeMath(MathDatasetAdapter):
    """The math task with a reward that costs nothing: the reference's text or not."""

    def compute_reward(self, completion: str, problem: MathProblem) -> dict[str, float]:
        return {"correct": 1.0 if completion == self.reference_completion(problem) else 0.0}


@dataclass(frozen=True)
class Subject:
    """A task whose reward work is measured against sampling: the task, the same task with a
    reward that costs nothing, and how to forget what its reward has cached."""

    name: str
    task: Any
    free: Any
    forget: Callable[[], None]


CODE = Subject("the code task", CodeAdapter(), FreeRewards(), run.cache_clear)
MATH = Subject("the math task", MathDatasetAdapter(), FreeMath(), verdict.cache_clear)


async def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    result = await fn()
    return time.perf_counter() - started, result


async def one_latency(
    subject: Subject, latency: float, folder: Path, cores: int
) -> list[tuple[float, ...]]:
    """(sampling only, serial rewards, step) seconds for each of STEPS at `latency`."""
    config = TrainConfig(steps=max(STEPS), batch=BATCH, group=GROUP)
    as_task(subject.task).preflight()  # as the command line does, before training
    backend = FakeBackend.for_run(
        subject.task, run_problems(subject.task, config), latency=latency, checkpoint_dir=folder
    )
    path = await (await backend.submit_save_for_sampler("bench"))
    sampler = await backend.create_sampler(path)
    code, free = as_task(subject.task), as_task(subject.free)
    rows: list[tuple[float, ...]] = []
    with Workers(cores) as workers:
        for step in STEPS:

            def go(task: Task[Any], pool: Workers, step: int = step) -> Callable[[], Any]:
                tokenizer = backend.tokenizer
                return lambda: sample_and_score(tokenizer, sampler, task, config, step, pool)

            sampling, _ = await timed(go(free, Workers(size=0)))
            subject.forget()
            stepped, batch = await timed(go(code, workers))
            subject.forget()
            serial = serial_rewards(code, config, step, batch)
            rows.append((sampling, serial, stepped))
    return rows


def serial_rewards(task: Task[Any], config: TrainConfig, step: int, batch: Rollout) -> float:
    """The step's rewards one after another, on this thread (each completion alone:
    `compute_reward`, once per distinct response, as the rollout does)."""
    problems = task.adapter.build_dataset(config.seed, step, config.batch)
    responses: list[list[Response]] = batch.responses_P_G
    started = time.perf_counter()
    for problem, responses_G in zip(problems, responses, strict=True):
        rewards_of(task, problem, responses_G)
    return time.perf_counter() - started


async def loop_step(
    adapter: Any,
    latency: float,
    off_policy: int,
    folder: Path,
    cores: int,
    forget: Callable[[], None] = run.cache_clear,
) -> float:
    """The mean time of steps 2-4 of a 4-step run."""
    config = TrainConfig(steps=4, batch=BATCH, group=GROUP, max_steps_off_policy=off_policy)
    backend = FakeBackend.for_run(
        adapter, run_problems(adapter, config), latency=latency, checkpoint_dir=folder
    )
    forget()
    with Workers(cores) as workers:
        result = await run_grpo_async(backend, adapter, config, workers=workers)
    return statistics.mean(m.seconds for m in result.steps[1:])


def sandbox_costs(workers: int) -> tuple[float, float]:
    """Milliseconds per sandbox call: one at a time, and `workers` at a time (per call)."""
    sources = [f"def f(x):\n    return x * {k} + 1\n" for k in range(SANDBOX_CALLS)]
    inputs: Sequence[Sequence[Any]] = [[x] for x in range(8)]
    call_function(sources[0], "f", inputs, LIMITS)  # warm: the kernel layers are built once
    started = time.perf_counter()
    for source in sources:
        call_function(source, "f", inputs, LIMITS)
    alone = (time.perf_counter() - started) / len(sources)
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        started = time.perf_counter()
        list(pool.map(lambda s: call_function(s, "f", inputs, LIMITS), sources))
        shared = (time.perf_counter() - started) / len(sources)
    return alone * 1e3, shared * 1e3


def warm_cost() -> float:
    """Milliseconds per call, one at a time, in sandboxes a pool started ahead of the calls
    (what a call costs once its sandbox is ready)."""
    sources = [f"def f(x):\n    return x * {k} + 1\n" for k in range(WARM_SANDBOXES)]
    inputs: Sequence[Sequence[Any]] = [[x] for x in range(8)]

    async def go(pool: Workers) -> float:
        await pool.run(lambda: call_function("def f(x):\n    return x\n", "f", inputs, LIMITS))
        warm = warm_of(pool)
        assert warm is not None, "the pool is open"
        while warm.ready < warm.size:
            await asyncio.sleep(0.01)
        warm.size = 0  # no more started between the calls: the call's own cost
        started = time.perf_counter()
        for source in sources:
            await pool.run(functools.partial(call_function, source, "f", inputs, LIMITS))
        assert warm.taken == len(sources), "a call found no sandbox ready"
        return (time.perf_counter() - started) / len(sources)

    with Workers(1) as pool:
        return asyncio.run(go(pool)) * 1e3


def busy(work: int) -> int:
    """Pure Python: it holds the interpreter's lock throughout."""
    return sum(i * i for i in range(work))


def calibrated(seconds: float) -> int:
    """The `busy` work that takes about `seconds` here, on one core."""
    started = time.perf_counter()
    busy(100_000)
    return max(1, int(100_000 * seconds / (time.perf_counter() - started)))


async def busy_calls(workers: Workers, processes: bool, calls: int, work: int) -> float:
    """Wall time of `calls` busy calls through `workers`, on threads or in processes."""

    def fn() -> Callable[[], int]:
        call = lambda: busy(work)  # noqa: E731  # one call, as the loop hands it over
        return in_process(call, workers.timeout) if processes else call

    started = time.perf_counter()
    await asyncio.gather(*(workers.run(fn()) for _ in range(calls)))
    return time.perf_counter() - started


def gil_line(cores: int, calls: int = 32, seconds: float = 0.05) -> str:
    work = calibrated(seconds)
    started = time.perf_counter()
    for _ in range(calls):
        busy(work)
    serial = time.perf_counter() - started
    with Workers(cores) as workers:
        threads = asyncio.run(busy_calls(workers, False, calls, work))
        processes = asyncio.run(busy_calls(workers, True, calls, work))
    return (
        f"A pure-Python reward of {seconds * 1e3:g} ms, {calls} calls, {cores} workers: "
        f"{threads:.2f} s on threads, {processes:.2f} s with `work_in_processes` "
        f"({serial:.2f} s one after another)."
    )


def reward_overlap_table(
    root: Path, subject: Subject = CODE, latencies: Sequence[float] = LATENCIES
) -> tuple[list[str], list[tuple[str, float, float]]]:
    """The tables' rows, and (what, measured, limit) for each target."""
    cores = default_size()
    rows = [
        f"Reward work against sampling: {subject.name} at {BATCH} x {GROUP}, real clock, "
        f"{cores} cores (seconds a step; target 1.25 x max(sampling only, serial / cores) "
        f"+ 0.5 s):",
        "",
        "| L | schedule | sampling only | serial rewards | serial / cores | their sum | "
        "measured | target |",
        "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    targets = []
    folders = (root / f"rewards{i}" for i in itertools.count())
    for latency in latencies:
        runs = asyncio.run(one_latency(subject, latency, next(folders), cores))
        sampling, serial, rolled = (statistics.mean(column) for column in zip(*runs, strict=True))
        schedules = [("rollout (steps 1-3)", sampling, rolled, True)]
        for off_policy in (0, 1):
            given = (latency, off_policy)
            free = asyncio.run(
                loop_step(subject.free, *given, next(folders), cores, subject.forget)
            )
            real = asyncio.run(
                loop_step(subject.task, *given, next(folders), cores, subject.forget)
            )
            label = "off-policy 1 step" if off_policy else "on-policy step"
            schedules.append((label, free, real, latency == 0 or bool(off_policy)))
        for label, alone, measured, targeted in schedules:
            limit = SLACK * max(alone, serial / cores) + OVERHEAD
            rows.append(
                f"| {latency:g} s | {label} | {alone:.2f} | {serial:.2f} | {serial / cores:.2f} "
                f"| {alone + serial:.2f} | {measured:.2f} | {f'{limit:.2f}' if targeted else '—'} |"
            )
            if targeted:
                targets.append((f"{subject.name}: {label} at L = {latency:g} s", measured, limit))
    if subject is not CODE:
        return rows, targets
    alone, shared = sandbox_costs(cores)
    rows += [
        "",
        f"The sandbox: {alone:.1f} ms a call one at a time, {shared:.1f} ms a call with "
        f"{cores} in flight ({SANDBOX_CALLS} calls of a distinct one-line `f` on 8 inputs); "
        f"{warm_cost():.1f} ms a call one at a time in sandboxes started ahead "
        f"({WARM_SANDBOXES} calls).",
        "",
        gil_line(cores),
    ]
    return rows, targets
