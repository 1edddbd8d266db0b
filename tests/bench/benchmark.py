"""Benchmark: a GRPO step's cost in round trips, the client's own overhead, peak memory.

Reward work against sampling, on the real clock, is in `bench_rewards.py`.

Run it with `nox -s bench` (or `python tests/bench/benchmark.py --help`). It is not
part of the test suite: it prints markdown tables, then a table of every
target, and exits 1 if one is missed. Its assertions only check that the
runs it compares are comparable: the serial reference loop trains on the same
datums as mathrl, evaluations happen at the steps they are due, and they
change nothing that is trained.

Latency model (FakeBackend's `latency` knob): every call costs one round trip
L from submission to result; calls in flight overlap freely; training-side
calls complete in submission order; creating a sampler costs one round trip.
The step times are measured on a virtual clock (see `tests/virtual_clock.py`), where
waiting costs exactly its simulated latency and CPU costs nothing: on a busy
two-core machine, the fake's own compute at 256 x 16 exceeds 50 ms, and a real
clock would time that instead of the round trips. One row is also timed with
real sleeps, so the two can be compared.

A step's time is its steady-state period: the mean gap between the
submissions of consecutive steps' training calls. That leaves out the one-off
saves and sampler before step 1, and the next sampler the last step skips; a
whole N-step on-policy run costs (3N + 1) L, an off-policy one (2N + 2) L.

The loop also saves the full training state (weights and optimizer): at step
0, every `save_every` steps and after the last step. None of these saves
changes a number here: step 0's is submitted right behind step 0's sampler
save and the others right behind their step's training calls, and training
calls complete in submission order, so each shares the round trip of the
calls ahead of it. The serial reference loop saves no state, as the seed did
not; its batch + 4 L a step is the seed's schedule, unchanged.

Held-out evaluation (`eval_every` K) samples greedily from the sampler the
next step uses anyway, so its steady-state cost per step should be 0; the
final evaluation needs a sampler for the final weights, then its samples:
2 L once per run.

Every checkpoint the fakes write goes into a temporary folder that is removed
at exit.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import math
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Run as a script: the tests' folder, for `bench` and `virtual_clock`.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import mathrl_fakes.fake_backend as fake_module
from bench.bench_rewards import CODE, MATH, reward_overlap_table
from mathrl.backend import Datum, check_train_step
from mathrl.checkpoints import checkpoint_name
from mathrl.config import TrainConfig
from mathrl.episodes import Player
from mathrl.grpo import step_advantages
from mathrl.loop import run_grpo_async
from mathrl.report import EvalMetrics, Observer, StepMetrics
from mathrl.resolved import Task, as_task
from mathrl.rollout import (
    datums_of,
    prompt_tokens,
    request_seed,
    run_problems,
    sample_params,
    trained,
)
from mathrl.tasks.addition import AdditionProblem, MathAdapter
from mathrl_fakes import FakeBackend, FakeModel, RecordingBackend
from virtual_clock import INLINE, run_virtual

DEFAULT_SIZES = ((10, 4), (64, 16), (256, 16))
EVAL_SIZES = ((10, 4), (64, 16))
EVAL_EVERY = (0, 1, 5)
EVAL_PROBLEMS = 100
EVAL_STEPS = 2 * max(EVAL_EVERY) + 1
"""Steps of an evaluation-overhead run. With N = mK + 1 steps, the N - 1 gaps
between training submissions hold exactly m evaluations every K steps, so the
mean gap is the steady-state period for each K; step 0's and step N's
evaluations fall outside the gaps and are reported apart."""
CURVE_SEEDS = tuple(range(10))
CURVE_STEPS = 20
RSS_STEPS = 20
TARGET_ON_POLICY_L, TARGET_OFF_POLICY_L = 3.3, 2.2
TARGET_US_PER_COMPLETION, TARGET_RSS_MB = 50.0, 300.0
TARGET_EVAL_L = 0.1
TARGET_CURVE_GAP = 10.0
TARGET_HELDOUT_START, TARGET_HELDOUT_GAIN = 70.0, 15.0


@dataclass(frozen=True)
class Target:
    """One of the targets, and what was measured against it."""

    what: str
    measured: float
    limit: float
    unit: str
    at_least: bool = False
    """True: the measurement must reach the limit; False: stay at or below it."""

    @property
    def met(self) -> bool:
        return self.measured >= self.limit if self.at_least else self.measured <= self.limit

    @property
    def bound(self) -> str:
        return f"{'>=' if self.at_least else '<='} {self.limit:g} {self.unit}"


TARGETS: list[Target] = []


class Fakes:
    """Makes FakeBackends for the addition task, each writing into its own folder.

    The folders sit under `root`, a temporary folder the caller removes. Each
    backend gets a fresh one because runs with the same settings reuse
    checkpoint names.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self._made = itertools.count()

    def make(self, config: TrainConfig, latency: float = 0.0) -> FakeBackend:
        """A fake that knows every problem a run of `config` draws, held-out ones included."""
        folder = self.root / f"backend{next(self._made)}"
        return FakeBackend.for_run(
            MathAdapter(),
            run_problems(MathAdapter(), config),
            latency=latency,
            checkpoint_dir=folder,
        )


def bench_config(
    batch: int, group: int, steps: int, off_policy: bool = False, **settings: Any
) -> TrainConfig:
    return TrainConfig(
        steps=steps, batch=batch, group=group, max_steps_off_policy=int(off_policy), **settings
    )


async def run_serial_async(
    backend: FakeBackend,
    task: Task[AdditionProblem],
    config: TrainConfig,
    recorder: RecordingBackend,
) -> None:
    """The seed's schedule: each call is awaited before the next one is sent.

    It samples with the same seeds as `run_grpo_async` and plays each problem's
    group with the same `Player` (its rewards on the loop), so on the same fake
    it trains on the same datums, one round trip at a time. Like the seed, it
    waits on forward_backward before it submits optim_step (`seed_update`),
    and it saves no training state.
    """
    adapter = task.adapter
    trained_through = 0
    for step in range(1, config.steps + 1):
        # The fake keys samples on the checkpoint's name; name it after the last
        # step that changed the weights, as run_grpo_async does.
        name = checkpoint_name(task, config, trained_through)
        path = await (await backend.submit_save_for_sampler(name))
        sampler = await backend.create_sampler(path)
        player = Player(backend.tokenizer, sampler, task, INLINE)
        problems_P = adapter.build_dataset(config.seed, step, config.batch)
        prompts_P = [adapter.make_prompt(p) for p in problems_P]
        prompts_P_T = [prompt_tokens(backend.tokenizer, task, prompt) for prompt in prompts_P]
        episodes_P_G = []
        for i, (problem, prompt, prompt_T) in enumerate(
            zip(problems_P, prompts_P, prompts_P_T, strict=True)
        ):
            params = sample_params(task, config, prompt, request_seed(config.seed, step, i))
            episodes_P_G.append(await player.group(problem, prompt, prompt_T, config.group, params))
        rewards_P_G = [[e.reward for e in episodes_G] for episodes_G in episodes_P_G]
        advantages_P_G = step_advantages(rewards_P_G)
        responses_P_G = [[e.final for e in episodes_G] for episodes_G in episodes_P_G]
        trained_P_G = trained(task, config, rewards_P_G, responses_P_G)
        datums_D = datums_of(prompts_P_T, episodes_P_G, advantages_P_G, trained_P_G)
        if datums_D:
            recorder.trained.append(datums_D)
            recorder.train_submitted_at.append(asyncio.get_running_loop().time())
            await seed_update(backend, datums_D, config)
            trained_through = step


async def seed_update(backend: FakeBackend, datums_D: list[Datum], config: TrainConfig) -> None:
    """The seed's update: forward_backward, awaited, then optim_step, awaited.

    Two calls on the fake's training side, one round trip each, where the
    `Backend` protocol's `submit_train_step` submits both at once. They train
    the fake's model exactly as that does (`config.loss_fn`, then Adam at
    `config.lr`), after the same checks.
    """
    check_train_step(datums_D, config.lr, backend.tokenizer.vocab_size)
    model = backend.model
    await backend.training_call(
        "forward_backward",
        lambda: model.forward_backward(datums_D, config.loss_fn),
        size=len(datums_D),
    )
    await backend.training_call("optim_step", lambda: model.optim_step(config.lr))


class Collected(Observer):
    """Keeps each step's training accuracy and each held-out evaluation."""

    def __init__(self) -> None:
        self.accuracies: list[float] = []
        self.evals: list[EvalMetrics] = []

    def on_step(self, metrics: StepMetrics) -> None:
        self.accuracies.append(metrics.accuracy)

    def on_eval(self, metrics: EvalMetrics) -> None:
        self.evals.append(metrics)


@dataclass(frozen=True)
class Run:
    """What one run trained on, when (loop clock), its accuracies and how long it took."""

    trained: list[list[Datum]]
    train_submitted_at: list[float]
    accuracies: list[float]
    evals: list[EvalMetrics]
    seconds: float
    """The whole run, on the clock of the loop it ran on."""

    def step_time(self) -> float:
        """Mean gap between consecutive training submissions (needs two)."""
        times = self.train_submitted_at
        if len(times) < 2:
            raise RuntimeError(f"a step time needs >= 2 trained steps (got {len(times)})")
        return (times[-1] - times[0]) / (len(times) - 1)


async def timed_run(loop_kind: str, backend: FakeBackend, config: TrainConfig) -> Run:
    """Run one loop, "mathrl" (run_grpo_async) or "serial" (run_serial_async)."""
    recorder = RecordingBackend(backend)
    collected = Collected()
    clock = asyncio.get_running_loop().time
    started = clock()
    if loop_kind == "mathrl":
        await run_grpo_async(recorder, MathAdapter(), config, collected, workers=INLINE)
    else:
        await run_serial_async(backend, as_task(MathAdapter()), config, recorder)
    return Run(
        recorder.trained,
        recorder.train_submitted_at,
        collected.accuracies,
        collected.evals,
        clock() - started,
    )


def virtual_run(backend: FakeBackend, config: TrainConfig, loop_kind: str = "mathrl") -> Run:
    """One run on a fresh virtual clock: waiting costs its latency, CPU costs nothing."""
    run, _ = run_virtual(timed_run(loop_kind, backend, config))
    return run


# -- 1. round trips per step ---------------------------------------------------


def latency_table(
    fakes: Fakes, sizes: Sequence[tuple[int, int]], latency: float, steps: int
) -> list[str]:
    rows = [
        f"Step wall time in round trips L (virtual clock, L = {latency * 1e3:g} ms, "
        f"{steps}-step runs, steady state). The +CPU columns also charge mathrl's own "
        "CPU time (not the fake's) to the clock:",
        "",
        f"| batch x group | mathrl (target <= {TARGET_ON_POLICY_L} L) | mathrl +CPU "
        f"| off-policy 1 (target <= {TARGET_OFF_POLICY_L} L) | off-policy 1 +CPU | serial "
        "| serial / mathrl | datums identical |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for batch, group in sizes:
        config = bench_config(batch, group, steps)
        off_config = bench_config(batch, group, steps, off_policy=True)
        on = virtual_run(fakes.make(config, latency), config)
        off = virtual_run(fakes.make(off_config, latency), off_config)
        on_cpu, off_cpu = (charged_run(fakes.make(c, latency), c) for c in (config, off_config))
        serial = virtual_run(fakes.make(config, latency), config, "serial")
        for k, (ours, theirs) in enumerate(zip(on.trained, serial.trained, strict=True), 1):
            assert ours == theirs, f"{batch}x{group}: train step {k} datums differ"
        on_l, on_cpu_l, off_l, off_cpu_l, serial_l = (
            r.step_time() / latency for r in (on, on_cpu, off, off_cpu, serial)
        )
        TARGETS.append(Target(f"mathrl step, {batch} x {group}", on_l, TARGET_ON_POLICY_L, "L"))
        TARGETS.append(
            Target(f"off-policy step, {batch} x {group}", off_l, TARGET_OFF_POLICY_L, "L")
        )
        rows.append(
            f"| {batch} x {group} | {on_l:.2f} L | {on_cpu_l:.2f} L | {off_l:.2f} L "
            f"| {off_cpu_l:.2f} L | {serial_l:.2f} L | {serial_l / on_l:.1f}x "
            f"| yes ({sum(map(len, on.trained)):,} datums) |"
        )
    rows += [
        "",
        "serial awaits each call before sending the next, as the seed does: save, sampler, "
        "one sample request per problem, forward_backward, optim_step = batch + 4 L.",
    ]
    return rows


def charged_run(backend: FakeBackend, config: TrainConfig) -> Run:
    """A mathrl run on the virtual clock, charged with mathrl's CPU but not the fake's."""
    timer = FakeComputeTimer()
    with timer.patched():
        run, _ = run_virtual(
            timed_run("mathrl", backend, config),
            cpu_clock=lambda: time.perf_counter() - timer.seconds,
        )
    return run


def real_clock_table(fakes: Fakes, size: tuple[int, int], latency: float, steps: int) -> list[str]:
    batch, group = size
    rows = [
        f"The same at {batch} x {group} on the real clock (real sleeps, fake's compute included):",
        "",
        "| loop | s / step | in L |",
        "| --- | ---: | ---: |",
    ]
    for label, kind, off_policy in (
        ("mathrl", "mathrl", False),
        ("mathrl, off-policy 1", "mathrl", True),
        ("serial", "serial", False),
    ):
        config = bench_config(batch, group, steps, off_policy)
        run = asyncio.run(timed_run(kind, fakes.make(config, latency), config))
        seconds = run.step_time()
        rows.append(f"| {label} | {seconds:.3f} | {seconds / latency:.2f} L |")
    return rows


# -- 2. evaluation overhead ------------------------------------------------------


def eval_overhead_table(
    fakes: Fakes, sizes: Sequence[tuple[int, int]], latency: float
) -> list[str]:
    steps = EVAL_STEPS
    rows = [
        f"Evaluation overhead in round trips L (virtual clock, L = {latency * 1e3:g} ms, "
        f"{steps}-step runs, {EVAL_PROBLEMS} held-out problems). "
        '"extra / step" is the steady-state step time less that of the same run without '
        'evaluation; "before step 1" and "after the last step" are the rest of the '
        "whole run's extra (step 0's and the final evaluation):",
        "",
        "| batch x group | loop | eval_every | evaluations | step "
        f"| extra / step (target <= {TARGET_EVAL_L:g} L) | before step 1 | after the last step "
        "| whole run |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for (batch, group), off_policy in itertools.product(sizes, (False, True)):
        loop = "off-policy 1" if off_policy else "on-policy"
        runs: dict[int, Run] = {}
        for every in EVAL_EVERY:
            config = bench_config(
                batch, group, steps, off_policy, eval_every=every, eval_problems=EVAL_PROBLEMS
            )
            runs[every] = run = virtual_run(fakes.make(config, latency), config)
            due = [s for s in range(steps + 1) if every and (s % every == 0 or s == steps)]
            assert [m.step for m in run.evals] == due, (every, [m.step for m in run.evals])
            assert all(m.problems == EVAL_PROBLEMS for m in run.evals)
        base = runs[0]
        for every, run in runs.items():
            # Greedy requests must leave the training samples, hence the datums, alone.
            assert run.trained == base.trained, f"eval_every={every} changed what was trained"
            step_l = run.step_time() / latency
            if every == 0:
                rows.append(
                    f"| {batch} x {group} | {loop} | 0 | 0 | {step_l:.2f} L | - | - | - "
                    f"| {run.seconds / latency:.2f} L |"
                )
                continue
            per_step = step_l - base.step_time() / latency
            before = (run.train_submitted_at[0] - base.train_submitted_at[0]) / latency
            whole = (run.seconds - base.seconds) / latency
            after = whole - before - per_step * (steps - 1)
            TARGETS.append(
                Target(
                    f"evaluation per step, {loop} {batch} x {group}, eval_every={every}",
                    per_step,
                    TARGET_EVAL_L,
                    "L",
                )
            )
            rows.append(
                f"| {batch} x {group} | {loop} | {every} | {len(run.evals)} | {step_l:.2f} L "
                f"| {per_step:+.2f} L | {before:+.2f} L | {after:+.2f} L "
                f"| {run.seconds / latency:.2f} L ({whole:+.2f}) |"
            )
    rows += [
        "",
        "Expected: +0 L a step, +0 L before step 1 (step 0's evaluation runs alongside step 1's "
        "sampling) and +2 L after the last step (a sampler for the final weights, then the "
        "greedy samples).",
    ]
    return rows


# -- 3. client overhead and memory ----------------------------------------------


class FakeComputeTimer:
    """Adds up the time spent in the fake's own work (the service's side).

    Everything else counts as mathrl's, including the fake's per-request
    bookkeeping in `FakeSampler.sample` and `FakeBackend.call`, so the client
    figure errs high. None of the timed functions calls another, so no time is
    counted twice.
    """

    TARGETS: tuple[tuple[Any, str], ...] = (
        (FakeModel, "sample"),
        (FakeModel, "forward_backward"),
        (FakeModel, "optim_step"),
        (FakeBackend, "save"),  # sampler and full-state checkpoints
        (FakeBackend, "restore"),
        (FakeBackend, "open_sampler"),
        # The service's check of a train step, as the module-level name the fake calls.
        (fake_module, "check_train_step"),
    )

    def __init__(self) -> None:
        self.seconds = 0.0

    def _timed(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - start

        return timed

    @contextmanager
    def patched(self) -> Iterator[None]:
        originals = [(owner, name, getattr(owner, name)) for owner, name in self.TARGETS]
        for owner, name, fn in originals:
            setattr(owner, name, self._timed(fn))
        try:
            yield
        finally:
            for owner, name, fn in originals:
                setattr(owner, name, fn)


def overhead_table(fakes: Fakes, sizes: Sequence[tuple[int, int]], steps: int) -> list[str]:
    rows = [
        f"Client overhead at L = 0 ({steps} steps, real clock; the fake's sampling, "
        "training, checkpoint I/O and datum checks subtracted):",
        "",
        "| batch x group | loop ms / step | fake ms / step "
        f"| mathrl µs / completion (target <= {TARGET_US_PER_COMPLETION:g} at 256 x 16) |",
        "| --- | ---: | ---: | ---: |",
    ]
    for batch, group in sizes:
        config = bench_config(batch, group, steps)
        backend = fakes.make(config)  # built outside the timing: it stands for the service
        timer = FakeComputeTimer()
        with timer.patched():
            start = time.perf_counter()
            asyncio.run(run_grpo_async(backend, MathAdapter(), config))
            wall = time.perf_counter() - start
        per_completion = (wall - timer.seconds) / (steps * batch * group)
        if (batch, group) == (256, 16):
            TARGETS.append(
                Target("client overhead, 256 x 16", per_completion * 1e6,
                       TARGET_US_PER_COMPLETION, "µs / completion")
            )  # fmt: skip
        rows.append(
            f"| {batch} x {group} | {wall / steps * 1e3:.1f} | {timer.seconds / steps * 1e3:.1f} "
            f"| {per_completion * 1e6:.1f} |"
        )
    return rows


def peak_memory_child(size: tuple[int, int], steps: int) -> None:
    """Run in a child process: one L = 0 run, then print peak RSS as JSON."""
    batch, group = size
    config = bench_config(batch, group, steps)
    with tempfile.TemporaryDirectory(prefix="mathrl-bench-") as scratch:
        asyncio.run(run_grpo_async(Fakes(Path(scratch)).make(config), MathAdapter(), config))
    # VmHWM, not getrusage's ru_maxrss: Linux carries ru_maxrss across fork and
    # exec, so a child would report its parent's peak if that was higher.
    status = Path("/proc/self/status").read_text()
    vm_hwm_kib = next(
        int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:")
    )
    print(json.dumps({"peak_rss_mb": vm_hwm_kib / 1024}))


def peak_memory_line(size: tuple[int, int], steps: int) -> list[str]:
    batch, group = size
    child = subprocess.run(
        [sys.executable, __file__, "--rss-child", f"{batch}x{group}", "--steps", str(steps)],
        capture_output=True,
        text=True,
        check=True,
    )
    peak = json.loads(child.stdout.splitlines()[-1])["peak_rss_mb"]
    TARGETS.append(Target(f"peak RSS, {steps} steps {batch} x {group}", peak, TARGET_RSS_MB, "MB"))
    return [
        f"Peak memory (VmHWM of a child process) of a {steps}-step {batch} x {group} run "
        f"at L = 0: **{peak:.0f} MB** (target <= {TARGET_RSS_MB:.0f} MB)."
    ]


# -- 4. learning -------------------------------------------------------------------


def curve_table(fakes: Fakes, seeds: Sequence[int], steps: int = CURVE_STEPS) -> list[str]:
    rows = [
        f"Training accuracy on the fake, {steps} steps at the CLI defaults (10 x 4). "
        '"Start" is the mean of steps 1-5, "end" the mean of steps 16-20:',
        "",
        "| seed | on-policy start | on-policy end | off-policy 1 start | off-policy 1 end "
        f"| end gap (points, target within {TARGET_CURVE_GAP:g}) |",
        "| ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for seed in seeds:
        ends: list[float] = []
        cells: list[str] = []
        for off_policy in (False, True):
            config = TrainConfig(steps=steps, seed=seed, max_steps_off_policy=int(off_policy))
            run = asyncio.run(timed_run("mathrl", fakes.make(config), config))
            start, end = mean(run.accuracies[:5]), mean(run.accuracies[15:20])
            ends.append(end)
            cells += [f"{start:.1%}", f"{end:.1%}"]
        gap = (ends[1] - ends[0]) * 100
        TARGETS.append(
            Target(f"off-policy end gap, seed {seed}", abs(gap), TARGET_CURVE_GAP, "points")
        )
        rows.append(f"| {seed} | {' | '.join(cells)} | {gap:+.1f} |")
    return rows


def heldout_table(fakes: Fakes, seeds: Sequence[int], steps: int = CURVE_STEPS) -> list[str]:
    rows = [
        f"Held-out greedy accuracy on the fake ({EVAL_PROBLEMS} problems), {steps} steps at the "
        f"CLI defaults with eval_every={steps}:",
        "",
        f"| seed | step 0 (target <= {TARGET_HELDOUT_START:g}%) | step {steps} "
        f"| gain (points, target >= {TARGET_HELDOUT_GAIN:g}) |",
        "| ---: | ---: | ---: | ---: |",
    ]
    starts: dict[int, float] = {}
    gains: dict[int, float] = {}
    for seed in seeds:
        config = TrainConfig(steps=steps, seed=seed, eval_every=steps)
        run = asyncio.run(timed_run("mathrl", fakes.make(config), config))
        before, after = run.evals
        assert (before.step, after.step) == (0, steps), [m.step for m in run.evals]
        starts[seed] = before.accuracy * 100
        gains[seed] = (after.accuracy - before.accuracy) * 100
        rows.append(
            f"| {seed} | {before.accuracy:.1%} ({before.correct}/{before.problems}) "
            f"| {after.accuracy:.1%} ({after.correct}/{after.problems}) | {gains[seed]:+.1f} |"
        )
    # One target each, at the worst seed: every seed must meet both.
    high = max(starts, key=starts.__getitem__)
    low = min(gains, key=gains.__getitem__)
    TARGETS.append(
        Target(f"held-out accuracy at step 0, highest (seed {high})", starts[high],
               TARGET_HELDOUT_START, "%")
    )  # fmt: skip
    TARGETS.append(
        Target(f"held-out gain by step {steps}, lowest (seed {low})", gains[low],
               TARGET_HELDOUT_GAIN, "points", at_least=True)
    )  # fmt: skip
    return rows


def mean(xs: Sequence[float]) -> float:
    return math.fsum(xs) / len(xs)


# -- command line ------------------------------------------------------------------


def parse_size(text: str) -> tuple[int, int]:
    batch, _, group = text.lower().partition("x")
    try:
        return int(batch), int(group)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a size must look like 64x16 (got {text!r})") from None


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--latency-ms", type=float, default=50.0, help="round trip L (ms)")
    parser.add_argument("--steps", type=int, default=3, help="steps per timed run (>= 2)")
    parser.add_argument(
        "--sizes", type=parse_size, nargs="+", default=list(DEFAULT_SIZES), help="e.g. 10x4 64x16"
    )
    parser.add_argument(
        "--eval-sizes",
        type=parse_size,
        nargs="+",
        default=list(EVAL_SIZES),
        help="sizes of the evaluation-overhead runs",
    )
    parser.add_argument("--skip-rss", action="store_true", help="skip the 20-step memory run")
    parser.add_argument("--skip-curve", action="store_true", help="skip the accuracy curves")
    parser.add_argument(
        "--skip-eval",
        action="store_true",
        help="skip the evaluation overhead and held-out accuracy tables",
    )
    parser.add_argument(
        "--skip-rewards", action="store_true", help="skip reward work against sampling (2-3 min)"
    )
    parser.add_argument("--rss-child", type=parse_size, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.rss_child is not None:
        peak_memory_child(args.rss_child, args.steps)
        return
    if args.steps < 2:
        parser.error(f"--steps must be >= 2 to time a step (got {args.steps})")
    latency = args.latency_ms / 1e3
    with tempfile.TemporaryDirectory(prefix="mathrl-bench-") as scratch:
        fakes = Fakes(Path(scratch))
        sections = [
            latency_table(fakes, args.sizes, latency, args.steps),
            real_clock_table(fakes, min(args.sizes, key=math.prod), latency, args.steps),
        ]
        if not args.skip_eval:
            sections.append(eval_overhead_table(fakes, args.eval_sizes, latency))
        sections.append(overhead_table(fakes, args.sizes, args.steps))
        if not args.skip_rss:
            sections.append(peak_memory_line(max(args.sizes, key=math.prod), RSS_STEPS))
        if not args.skip_curve:
            sections.append(curve_table(fakes, CURVE_SEEDS))
        if not args.skip_eval:
            sections.append(heldout_table(fakes, CURVE_SEEDS))
        if not args.skip_rewards:
            for subject in (CODE, MATH):
                rows, measured = reward_overlap_table(Path(scratch) / subject.task.name, subject)
                sections.append(rows)
                TARGETS.extend(Target(what, value, limit, "s") for what, value, limit in measured)
    sections.append(targets_table())
    print("\n\n".join("\n".join(rows) for rows in sections))
    if not all(t.met for t in TARGETS):
        sys.exit(1)


def targets_table() -> list[str]:
    rows = ["Targets (the benchmark exits 1 if one is missed):", "",
            "| target | measured | limit | met |", "| --- | ---: | ---: | --- |"]  # fmt: skip
    for t in TARGETS:
        rows.append(
            f"| {t.what} | {t.measured:.2f} {t.unit} | {t.bound} | {'yes' if t.met else 'NO'} |"
        )
    return rows


if __name__ == "__main__":
    main()
