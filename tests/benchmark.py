"""Benchmark: a GRPO step's cost in round trips, the client's own overhead, peak memory.

Run it with `nox -s bench` (or `python tests/benchmark.py --help`). It is not
part of the test suite: it prints markdown tables and asserts only that the
loops it compares train on identical datums.

Latency model (FakeBackend's `latency` knob): every call costs one round trip
L from submission to result; calls in flight overlap freely; training-side
calls complete in submission order; creating a sampler costs one round trip.
The step times are measured on a virtual clock (see `virtual_clock.py`), where
waiting costs exactly its simulated latency and CPU costs nothing: on a busy
two-core machine, the fake's own compute at 256 x 16 exceeds 50 ms, and a real
clock would time that instead of the round trips. One row is also timed with
real sleeps, so the two can be compared.

A step's time is its steady-state period: the mean gap between the
submissions of consecutive steps' training calls. That leaves out the one-off
save and sampler before step 1, and the next sampler the last step skips; a
whole N-step on-policy run costs (3N + 1) L.
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
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import mathrl_fakes.fake_backend as fake_module
from mathrl.config import Config
from mathrl.grpo import Datum
from mathrl.loop import (
    StepMetrics,
    checkpoint_name,
    request_seed,
    run_grpo_async,
    sample_params,
    score,
)
from mathrl.math_task import MathAdapter, all_problems
from mathrl_fakes import FakeBackend, FakeSampler, RecordingBackend, reference_table
from virtual_clock import run_virtual

DEFAULT_SIZES = ((10, 4), (64, 16), (256, 16))
CURVE_SEEDS = tuple(range(10))
TARGET_ON_POLICY_L, TARGET_OFF_POLICY_L = 3.3, 2.2
TARGET_US_PER_COMPLETION, TARGET_RSS_MB = 50.0, 300.0


@dataclass(frozen=True)
class Target:
    """One of the issue's targets, and what was measured against it."""

    what: str
    measured: float
    limit: float
    unit: str

    @property
    def met(self) -> bool:
        return self.measured <= self.limit


TARGETS: list[Target] = []


@cache
def references() -> Mapping[str, str]:
    return reference_table(MathAdapter(), all_problems())


_SCRATCH = tempfile.TemporaryDirectory(prefix="mathrl-bench-")
_backends_made = itertools.count()


def make_fake(latency: float, seed: int = 0) -> FakeBackend:
    # A fresh checkpoint folder per backend: runs reuse checkpoint names.
    folder = Path(_SCRATCH.name) / f"backend{next(_backends_made)}"
    return FakeBackend(references(), seed=seed, latency=latency, checkpoint_dir=folder)


async def run_serial_async(
    backend: FakeBackend, adapter: MathAdapter, config: Config, recorder: RecordingBackend
) -> None:
    """The seed's schedule: each call is awaited before the next one is sent.

    It samples with the same seeds as `run_grpo_async`, so on the same fake it
    trains on the same datums, one round trip at a time. Like the seed, it
    waits on forward_backward before it submits optim_step, using the fake's
    separate service calls.
    """
    trained_through = 0
    for step in range(1, config.steps + 1):
        # The fake keys samples on the checkpoint's name; name it after the last
        # step that changed the weights, as run_grpo_async does.
        name = checkpoint_name(config, trained_through)
        path = await (await backend.submit_save_for_sampler(name))
        sampler = await backend.create_sampler(path)
        problems_P = adapter.build_dataset(config.seed, step, config.batch)
        prompts_P_T = [backend.tokenizer.encode(adapter.make_prompt(p)) for p in problems_P]
        completions_P_G = []
        for i, prompt_T in enumerate(prompts_P_T):
            params = sample_params(config, request_seed(config.seed, step, i))
            completions_P_G.append(await sampler.sample(prompt_T, config.group, params))
        batch = score(adapter, backend.tokenizer.decode, problems_P, prompts_P_T, completions_P_G)
        if batch.datums_D:
            recorder.trained.append(batch.datums_D)
            recorder.train_submitted_at.append(asyncio.get_running_loop().time())
            await (await backend.submit_forward_backward(batch.datums_D))
            await (await backend.submit_optim_step(config.lr))
            trained_through = step


@dataclass(frozen=True)
class Run:
    """What one run trained on, when (loop clock), and its per-step accuracy."""

    trained: list[list[Datum]]
    train_submitted_at: list[float]
    accuracies: list[float]

    def step_time(self) -> float:
        """Mean gap between consecutive training submissions (needs two)."""
        times = self.train_submitted_at
        if len(times) < 2:
            raise RuntimeError(f"a step time needs >= 2 trained steps (got {len(times)})")
        return (times[-1] - times[0]) / (len(times) - 1)


async def timed_run(loop_kind: str, backend: FakeBackend, config: Config) -> Run:
    """Run one loop, "mathrl" (run_grpo_async) or "serial" (run_serial_async)."""
    recorder = RecordingBackend(backend)
    metrics: list[StepMetrics] = []
    if loop_kind == "mathrl":
        await run_grpo_async(recorder, MathAdapter(), config, metrics.append)
    else:
        await run_serial_async(backend, MathAdapter(), config, recorder)
    return Run(recorder.trained, recorder.train_submitted_at, [m.accuracy for m in metrics])


def bench_config(batch: int, group: int, steps: int, off_policy: bool = False) -> Config:
    return Config(steps=steps, batch=batch, group=group, max_steps_off_policy=int(off_policy))


# -- 1. round trips per step ---------------------------------------------------


def latency_table(sizes: Sequence[tuple[int, int]], latency: float, steps: int) -> list[str]:
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
        on, _ = run_virtual(timed_run("mathrl", make_fake(latency), config))
        off, _ = run_virtual(timed_run("mathrl", make_fake(latency), off_config))
        on_cpu, off_cpu = (charged_run(make_fake(latency), c) for c in (config, off_config))
        serial, _ = run_virtual(timed_run("serial", make_fake(latency), config))
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
            f"| yes ({sum(map(len, on.trained))} datums) |"
        )
    rows += [
        "",
        "serial awaits each call before sending the next, as the seed does: save, sampler, "
        "one sample request per problem, forward_backward, optim_step = batch + 4 L.",
    ]
    return rows


def charged_run(backend: FakeBackend, config: Config) -> Run:
    """A mathrl run on the virtual clock, charged with mathrl's CPU but not the fake's."""
    timer = FakeComputeTimer()
    with timer.patched():
        run, _ = run_virtual(
            timed_run("mathrl", backend, config),
            cpu_clock=lambda: time.perf_counter() - timer.seconds,
        )
    return run


def real_clock_table(size: tuple[int, int], latency: float, steps: int) -> list[str]:
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
        run = asyncio.run(timed_run(kind, make_fake(latency), config))
        seconds = run.step_time()
        rows.append(f"| {label} | {seconds:.3f} | {seconds / latency:.2f} L |")
    return rows


# -- 2. client overhead and memory ----------------------------------------------


class FakeComputeTimer:
    """Adds up the time spent in the fake's own work (the service's side).

    Everything else counts as mathrl's, including the fake's per-request
    bookkeeping in `sample` and `_call`, so the client figure errs high.
    """

    TARGETS: tuple[tuple[Any, str], ...] = (
        (FakeSampler, "_sample_now"),
        (FakeBackend, "_forward_backward"),
        (FakeBackend, "_optim_step"),
        (FakeBackend, "_save"),
        (FakeBackend, "_load"),
        (fake_module, "check_datums"),
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


def overhead_table(sizes: Sequence[tuple[int, int]], steps: int) -> list[str]:
    rows = [
        f"Client overhead at L = 0 ({steps} steps, real clock; the fake's sampling, "
        "training, checkpoint I/O and datum checks subtracted):",
        "",
        "| batch x group | loop ms / step | fake ms / step "
        f"| mathrl µs / completion (target <= {TARGET_US_PER_COMPLETION:g} at 256 x 16) |",
        "| --- | ---: | ---: | ---: |",
    ]
    for batch, group in sizes:
        backend = make_fake(0.0)
        timer = FakeComputeTimer()
        with timer.patched():
            start = time.perf_counter()
            asyncio.run(run_grpo_async(backend, MathAdapter(), bench_config(batch, group, steps)))
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
    asyncio.run(run_grpo_async(make_fake(0.0), MathAdapter(), bench_config(batch, group, steps)))
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


# -- 3. off-policy learning ------------------------------------------------------


def curve_table(seeds: Sequence[int], steps: int = 20) -> list[str]:
    rows = [
        f"Accuracy on the fake, {steps} steps at the CLI defaults (10 x 4). "
        '"Start" is the mean of steps 1-5, "end" the mean of steps 16-20:',
        "",
        "| seed | on-policy start | on-policy end | off-policy 1 start | off-policy 1 end "
        "| end gap (points, target within 10) |",
        "| ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for seed in seeds:
        ends: list[float] = []
        cells: list[str] = []
        for off_policy in (False, True):
            config = Config(steps=steps, seed=seed, max_steps_off_policy=int(off_policy))
            run = asyncio.run(timed_run("mathrl", make_fake(0.0, seed), config))
            start, end = mean(run.accuracies[:5]), mean(run.accuracies[15:20])
            ends.append(end)
            cells += [f"{start:.1%}", f"{end:.1%}"]
        gap = (ends[1] - ends[0]) * 100
        TARGETS.append(Target(f"off-policy end gap, seed {seed}", abs(gap), 10.0, "points"))
        rows.append(f"| {seed} | {' | '.join(cells)} | {gap:+.1f} |")
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
    parser.add_argument("--skip-rss", action="store_true", help="skip the 20-step memory run")
    parser.add_argument("--skip-curve", action="store_true", help="skip the accuracy curves")
    parser.add_argument("--rss-child", type=parse_size, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.rss_child is not None:
        peak_memory_child(args.rss_child, args.steps)
        return
    if args.steps < 2:
        parser.error(f"--steps must be >= 2 to time a step (got {args.steps})")
    latency = args.latency_ms / 1e3
    sections = [
        latency_table(args.sizes, latency, args.steps),
        real_clock_table(min(args.sizes, key=math.prod), latency, args.steps),
        overhead_table(args.sizes, args.steps),
    ]
    if not args.skip_rss:
        sections.append(peak_memory_line(max(args.sizes, key=math.prod), 20))
    if not args.skip_curve:
        sections.append(curve_table(CURVE_SEEDS))
    sections.append(targets_table())
    print("\n\n".join("\n".join(rows) for rows in sections))
    if not all(t.met for t in TARGETS):
        sys.exit(1)


def targets_table() -> list[str]:
    rows = ["Targets (the benchmark exits 1 if one is missed):", "",
            "| target | measured | limit | met |", "| --- | ---: | ---: | --- |"]  # fmt: skip
    for t in TARGETS:
        rows.append(
            f"| {t.what} | {t.measured:.2f} {t.unit} | <= {t.limit:g} {t.unit} "
            f"| {'yes' if t.met else 'NO'} |"
        )
    return rows


if __name__ == "__main__":
    main()
