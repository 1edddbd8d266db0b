"""What makes the fake behave like a remote service: round trips, ordering, faults, a log.

For: `FakeBackend`, which runs every call through `ServiceCalls.call` (or
`training_call` for the training side). Not for: what a call does (the
model's business).

Latency model, when `latency` > 0: every call costs one round trip from
submission to result; calls in flight overlap freely; training-side calls
complete in submission order.

Faults: `fault_rate` P makes a seeded share P of all calls raise
`TransientBackendError`, and `fail_next` fails the next calls of one kind.
A training-side fault happens either before the call takes effect or after
(the effect stays, as when a service applies a request and the answer is
lost), so a client cannot assume a failed call did nothing.
"""

from __future__ import annotations

import asyncio
import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from mathrl.backend import TransientBackendError
from mathrl_fakes.policy import uniforms

T = TypeVar("T")


@dataclass(slots=True)
class CallRecord:
    """One call the fake received, with when it was submitted and finished."""

    kind: str
    submitted: float
    finished: float = math.nan
    size: int = 0
    """Datums for forward_backward, else 0."""
    failed: str = ""
    """"before" or "after" (the effect) for an injected fault, else ""."""


@dataclass
class CallLog:
    """What the fake has seen: every call, and the most in flight at once."""

    calls: list[CallRecord] = field(default_factory=list)
    in_flight: int = 0
    max_in_flight: int = 0

    def kinds(self) -> list[str]:
        return [c.kind for c in self.calls]

    def count(self, kind: str) -> int:
        return sum(1 for c in self.calls if c.kind == kind)


class ServiceCalls:
    """Round trips, training-side ordering, injected faults and the call log of one fake."""

    def __init__(self, seed: int, latency: float, fault_rate: float) -> None:
        if not 0.0 <= fault_rate <= 1.0:
            raise ValueError(f"fault_rate must be in [0, 1] (got {fault_rate})")
        self.seed = seed
        self.latency = latency
        self.fault_rate = fault_rate
        self.log = CallLog()
        self._failures: Counter[tuple[str, bool]] = Counter()
        self._training_tail: asyncio.Future[None] | None = None

    def fail_next(self, kind: str, times: int = 1, *, after_apply: bool = False) -> None:
        """Make the next `times` calls of `kind` raise TransientBackendError.

        With `after_apply`, a training-side call takes effect first.
        """
        self._failures[kind, after_apply] += times

    def training_call(
        self, kind: str, work: Callable[[], T], size: int = 0, drawn: str | None = None
    ) -> asyncio.Future[T]:
        """Schedule a training-side call: done after one round trip and after its predecessor."""
        previous = self._training_tail
        call = self.call(kind, work, size, after=previous, training=True, drawn=drawn)
        result = asyncio.ensure_future(call)
        tail: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        result.add_done_callback(lambda _: tail.set_result(None))
        self._training_tail = tail
        return result

    async def call(
        self,
        kind: str,
        work: Callable[[], T],
        size: int = 0,
        after: asyncio.Future[None] | None = None,
        training: bool = False,
        drawn: str | None = None,
    ) -> T:
        """Run one call: record it, wait a round trip (and for `after`), maybe fail, do `work`.

        `drawn` is a fault already drawn for it ("", "before" or "after"); by
        default the call draws its own from the fault rate.
        """
        loop = asyncio.get_running_loop()
        record = CallRecord(kind, loop.time(), size=size)
        number = len(self.log.calls)
        self.log.calls.append(record)
        self.log.in_flight += 1
        self.log.max_in_flight = max(self.log.max_in_flight, self.log.in_flight)
        try:
            if self.latency > 0:
                await asyncio.sleep(self.latency)
            if after is not None:
                await after
            fault = self._injected(kind)
            if not fault:
                fault = drawn if drawn is not None else self._draw(number, training)[0]
            if fault == "before":
                record.failed = fault
                raise TransientBackendError(f"{kind}: injected transient failure")
            result = work()
            if fault == "after":
                record.failed = fault
                raise TransientBackendError(f"{kind}: injected transient failure (after applying)")
            return result
        finally:
            self.log.in_flight -= 1
            record.finished = loop.time()

    def _injected(self, kind: str) -> str:
        for after_apply in (False, True):
            if self._failures[kind, after_apply] > 0:
                self._failures[kind, after_apply] -= 1
                return "after" if after_apply else "before"
        return ""

    def _draw(self, number: int, training: bool) -> tuple[str, float]:
        """A fault from the rate for call `number` ("", "before", "after"), and a spare uniform."""
        if self.fault_rate == 0.0:
            return "", 0.0
        u_fail, u_when, u_spare = uniforms(f"{self.seed}/fault/{number}", 3)
        if u_fail >= self.fault_rate:
            return "", u_spare
        return ("after" if training and u_when < 0.5 else "before"), u_spare
