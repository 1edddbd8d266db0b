"""The sandbox's cost per call in two or more checkouts, their calls interleaved one by one.

For a change to the sandbox: each checkout's `mathrl` is imported into this one process, and
their calls alternate, fresh and then in sandboxes started ahead, so the machine's drift
(load, frequency, cache) falls on every checkout alike. The shared figures of
`bench.bench_rewards` (means of runs made one after another) move by 10% from run to run on a
loaded 2-core machine; the medians of interleaved calls move by a few percent.

Usage: python tests/bench/sandbox_ab.py BEFORE AFTER [MORE ...] [--fresh N] [--rounds R]
(each a checkout's folder; N fresh calls each, R rounds of 32 calls each started ahead).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import importlib
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

INPUTS = [[x] for x in range(8)]
AHEAD = 32
"""Calls a round makes in sandboxes each checkout's pool started ahead (`WARM_SANDBOXES`)."""


@dataclass(frozen=True)
class Checkout:
    """One checkout's sandbox, workers and the code task's limits, imported side by side."""

    folder: str
    sandbox: ModuleType
    workers: ModuleType
    limits: Any

    def call(self, k: int) -> None:
        source = f"def f(x):\n    return x * {k} + 1\n"
        outcome = self.sandbox.call_function(source, "f", INPUTS, self.limits)
        assert outcome.status == "ok", outcome


def load(folder: str) -> Checkout:
    """`folder`'s mathrl, imported under its own names (those of any other are forgotten
    first; the modules already imported keep their own)."""
    for name in [m for m in sys.modules if m == "mathrl" or m.startswith("mathrl.")]:
        del sys.modules[name]
    sys.path.insert(0, f"{folder}/src")
    try:
        sandbox = importlib.import_module("mathrl.tasks.code.sandbox")
        workers = importlib.import_module("mathrl.workers")
        limits = importlib.import_module("mathrl.tasks.code.task").LIMITS
    finally:
        sys.path.remove(f"{folder}/src")
    return Checkout(folder, sandbox, workers, limits)


def fresh(checkouts: Sequence[Checkout], calls: int) -> list[list[float]]:
    """Seconds of each fresh call, per checkout; the order turns round each time."""
    times: list[list[float]] = [[] for _ in checkouts]
    for checkout in checkouts:
        checkout.call(-1)  # the kernel layers are built once
    for k in range(calls):
        order = list(enumerate(checkouts))
        for i, checkout in order if k % 2 == 0 else order[::-1]:
            started = time.perf_counter()
            checkout.call(k)
            times[i].append(time.perf_counter() - started)
    return times


async def ahead(checkouts: Sequence[Checkout], rounds: int) -> list[list[float]]:
    """Seconds of each call in a sandbox its pool started ahead, per checkout: each round
    opens a pool for each, lets it start AHEAD sandboxes, stops the starting and makes AHEAD
    calls in each, interleaved."""
    times: list[list[float]] = [[] for _ in checkouts]
    for r in range(rounds):
        pools = [c.workers.Workers(1) for c in checkouts]
        try:
            for checkout, pool in zip(checkouts, pools, strict=True):
                await pool.run(functools.partial(checkout.call, -1))  # the pool's kind
            warms = [c.sandbox.warm_of(p) for c, p in zip(checkouts, pools, strict=True)]
            while any(w.ready < AHEAD for w in warms):
                await asyncio.sleep(0.01)
            for warm in warms:
                warm.size = 0  # none started between the calls: the calls' own cost
            for k in range(AHEAD):
                order = list(enumerate(zip(checkouts, pools, strict=True)))
                for i, (checkout, pool) in order if (k + r) % 2 == 0 else order[::-1]:
                    started = time.perf_counter()
                    await pool.run(functools.partial(checkout.call, k))
                    times[i].append(time.perf_counter() - started)
            assert all(w.taken == AHEAD for w in warms), "a call found no sandbox ready"
        finally:
            for pool in pools:
                pool.close()
    return times


def report(what: str, checkouts: Sequence[Checkout], times: list[list[float]]) -> None:
    first = statistics.median(times[0])
    for checkout, seconds in zip(checkouts, times, strict=True):
        low, _, high = statistics.quantiles(seconds, n=4)
        median = statistics.median(seconds)
        print(
            f"{what:14s} {checkout.folder}: median {median * 1e3:.2f} ms (quartiles "
            f"{low * 1e3:.2f}-{high * 1e3:.2f}), {median / first:.3f} of the first's, "
            f"{len(seconds)} calls"
        )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("folders", nargs="+", metavar="CHECKOUT")
    parser.add_argument("--fresh", type=int, default=150, help="fresh calls per checkout")
    parser.add_argument("--rounds", type=int, default=8, help=f"rounds of {AHEAD} calls ahead")
    args = parser.parse_args(argv)
    checkouts = [load(folder) for folder in args.folders]
    report("fresh, alone", checkouts, fresh(checkouts, args.fresh))
    report("started ahead", checkouts, asyncio.run(ahead(checkouts, args.rounds)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
