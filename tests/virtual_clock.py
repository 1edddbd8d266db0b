"""An asyncio event loop on a virtual clock: waiting is free, computing is free.

`loop.time()` advances only when the loop has nothing ready to run and would
otherwise block until its next timer; it then jumps straight to that timer.
So `asyncio.sleep(L)` costs exactly L of virtual time, and any amount of CPU
work costs none. The fake backend simulates a round trip with
`asyncio.sleep(latency)`, so on this loop a run's virtual duration counts its
dependent round trips exactly, however slow or busy the machine is.

Given a `cpu_clock`, the loop also charges the time its callbacks take, as
read from that clock, so CPU work costs what it really costs while waiting
stays free of noise. The benchmark uses it to charge mathrl's own CPU time and
nothing else (the fake's compute stands for the service's and is left out).

Not for code that waits on threads or sockets with a timeout: the clock would
jump over the wait instead of sleeping through it. So a run on this loop takes
`workers=INLINE`: the task's rewards run on the loop itself, costing no time.
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, TypeVar

from mathrl.workers import Workers

T = TypeVar("T")
INLINE = Workers(size=0)
"""Workers for a run on this loop: rewards on the loop itself, never in a thread (time spent
in a thread would let the clock jump past other timers)."""


class _JumpingSelector(selectors.BaseSelector):
    """Delegates to a real selector, but turns a timed wait into a clock jump."""

    def __init__(self, loop: VirtualClockLoop) -> None:
        self._loop = loop
        self._real = selectors.DefaultSelector()

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        # The callbacks run since the last select took this long: charge it first.
        charged = self._loop.charge_cpu()
        events = self._real.select(0)
        if events or timeout is None:
            # No timer pending: only real I/O can wake the loop, so really wait.
            return events or self._real.select(None)
        # `timeout` was the gap to the next timer (0 when callbacks are ready),
        # measured before the charge.
        self._loop.advance(max(0.0, timeout - charged))
        return []

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._real.register(fileobj, events, data)

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        return self._real.unregister(fileobj)

    def modify(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._real.modify(fileobj, events, data)

    def get_map(self) -> Mapping[Any, selectors.SelectorKey]:
        return self._real.get_map()

    def close(self) -> None:
        self._real.close()


class VirtualClockLoop(asyncio.SelectorEventLoop):
    """A selector event loop whose `time()` is virtual (starts at 0.0)."""

    def __init__(self, cpu_clock: Callable[[], float] | None = None) -> None:
        self._virtual_now = 0.0
        self._cpu_clock = cpu_clock
        self._cpu_seen = cpu_clock() if cpu_clock else 0.0
        super().__init__(_JumpingSelector(self))

    def time(self) -> float:
        return self._virtual_now

    def advance(self, seconds: float) -> None:
        self._virtual_now += seconds

    def charge_cpu(self) -> float:
        """Advance by the CPU clock's progress since the last charge; return it."""
        if self._cpu_clock is None:
            return 0.0
        now = self._cpu_clock()
        spent, self._cpu_seen = max(0.0, now - self._cpu_seen), now
        self.advance(spent)
        return spent


def run_virtual(
    main: Coroutine[Any, Any, T], cpu_clock: Callable[[], float] | None = None
) -> tuple[T, float]:
    """Run `main` to completion on a fresh virtual clock; return it and its virtual duration."""
    with asyncio.Runner(loop_factory=lambda: VirtualClockLoop(cpu_clock)) as runner:
        result = runner.run(main)
        return result, runner.get_loop().time()
